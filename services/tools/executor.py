"""Running one tool call: role check, argument validation, idempotency, the handler, the result shape.

A mutating call is claimed in the session store under ``(session, tool call id)`` before it
runs and its result recorded after, so a repeated call gets the recorded result back instead of
a second run — also from another instance, and after a restart. A call whose process died
mid-run is never re-run: the retry is told its effect is unknown.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import socket
import time
from collections import defaultdict
from typing import Any

import msgspec

from autarch.contracts.base import decoder_for, encode
from autarch.contracts.tool_catalog import MUTATING_TOOLS, TOOL_ARGUMENTS, tool_definitions, tool_variant
from autarch.contracts.tools import (
    FileAccessLog,
    GetFileAccess,
    ListTools,
    ToolCall,
    ToolDefinitions,
    ToolResult,
)
from autarch.runtime.errors import ServiceFailure

from .context import Forwarder, ToolContext, ToolSettings, failure
from .grep_pool import GrepEngine
from .paths import PathRefused, Worktree
from .registry import HANDLERS
from .sensitivity import Redactor
from .shell import MAX_TIMEOUT_SECONDS
from .store import SessionStore

__all__ = ["ToolExecutor", "is_error_result"]

log = logging.getLogger("tools")

_FILE_WRITERS = frozenset({"write_file", "edit_file", "multi_edit"})
_OWNER = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
_result_decoder = decoder_for(ToolResult)


def is_error_result(tool: str, value: Any) -> bool:
    """The seed's error shapes, and a shell command that exited non-zero."""
    if not isinstance(value, dict):
        return False
    if "error" in value or value.get("success") is False or value.get("blocked") is True:
        return True
    return tool == "shell" and value.get("exit_code") not in (0, None)


def _alive(owner: str) -> bool:
    """Whether the process that claimed a call may still be running it."""
    host, _, rest = owner.partition(":")
    pid_text, _, _token = rest.partition(":")
    if host != socket.gethostname():
        return True  # another machine: only time tells
    if owner == _OWNER:
        return True
    pid = int(pid_text) if pid_text.isdigit() else -1
    if pid == os.getpid():
        return False  # our pid, another token: an earlier life of this process slot
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ToolExecutor:
    """Executes tool calls; one per tools process."""

    def __init__(
        self,
        *,
        store: SessionStore,
        engine: GrepEngine,
        forwarder: Forwarder,
        settings: ToolSettings,
        redactor: Redactor | None = None,
        stale_after: float = MAX_TIMEOUT_SECONDS + 60,
    ) -> None:
        self.store = store
        self.engine = engine
        self.forwarder = forwarder
        self.settings = settings
        self.redactor = redactor or Redactor()
        self.stale_after = stale_after
        self._inflight: dict[tuple[str, str], asyncio.Future[ToolResult]] = {}
        self._root_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def close(self) -> None:
        self.engine.close()
        self.store.close()

    # -- verbs ----------------------------------------------------------------------------------

    async def list_tools(self, query: ListTools) -> ToolDefinitions:
        return ToolDefinitions(role=query.role, tools=tool_definitions(query.role))

    async def file_access(self, query: GetFileAccess) -> FileAccessLog:
        reads = await asyncio.to_thread(self.store.file_access, query.session_id)
        return FileAccessLog(session_id=query.session_id, reads=reads)

    async def call(self, call: ToolCall) -> ToolResult:
        """Run one tool call and shape its result for the model."""
        started = time.perf_counter()
        if not os.path.isabs(call.root):
            raise ServiceFailure.bad_request(f"root must be an absolute path, got {call.root!r}", root=call.root)
        if not os.path.isdir(call.root):  # noqa: ASYNC240 - one stat, cheaper than a thread hop
            raise ServiceFailure.bad_request(f"root is not a directory: {call.root}", root=call.root)
        tool = call.tool
        args_type = TOOL_ARGUMENTS.get(tool)
        variant = tool_variant(call.role, tool)
        if args_type is None:
            return self._result(call, {"error": f"Unknown tool '{tool}'"}, started)
        if variant is None:
            return self._result(
                call, failure(tool, f"Tool '{tool}' is not available to the {call.role} agent"), started
            )
        try:
            args = msgspec.convert(call.arguments, args_type, strict=False)
        except msgspec.ValidationError as exc:
            return self._result(call, failure(tool, f"Invalid arguments for {tool}: {exc}"), started)
        ctx = ToolContext(
            call=call,
            variant=variant,
            worktree=Worktree(call.root),
            store=self.store,
            engine=self.engine,
            forwarder=self.forwarder,
            redactor=self.redactor,
            settings=self.settings,
        )
        if tool in MUTATING_TOOLS:
            return await self._once(ctx, args, started)
        return self._result(call, await self._run(ctx, args), started)

    # -- internals ------------------------------------------------------------------------------

    async def _run(self, ctx: ToolContext, args: Any) -> Any:
        tool = ctx.call.tool
        try:
            if tool in _FILE_WRITERS:
                # One file mutation at a time per worktree: read-check-write must not interleave.
                async with self._root_locks[ctx.worktree.root]:
                    return await HANDLERS[tool](ctx, args)
            return await HANDLERS[tool](ctx, args)
        except PathRefused as exc:
            return failure(tool, str(exc))
        except Exception as exc:
            log.exception("tool %s failed", tool)
            return failure(tool, f"Internal error in {tool}: {type(exc).__name__}: {exc}")

    def _result(self, call: ToolCall, value: Any, started: float, *, replayed: bool = False) -> ToolResult:
        if isinstance(value, str):
            content, is_json, is_error = value, False, False
        else:
            content, is_json, is_error = encode(value).decode(), True, is_error_result(call.tool, value)
        return ToolResult(
            tool_call_id=call.tool_call_id,
            tool=call.tool,
            content=content,
            is_json=is_json,
            is_error=is_error,
            replayed=replayed,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )

    async def _once(self, ctx: ToolContext, args: Any, started: float) -> ToolResult:
        call = ctx.call
        key = (call.session_id, call.tool_call_id)
        running = self._inflight.get(key)
        if running is not None:
            return msgspec.structs.replace(await asyncio.shield(running), replayed=True)
        digest = hashlib.sha256(
            call.tool.encode() + b"\0" + msgspec.json.encode(call.arguments, order="sorted")
        ).hexdigest()
        while True:
            claim = await asyncio.to_thread(
                self.store.claim, call.session_id, call.tool_call_id, call.tool, digest, _OWNER
            )
            if claim.state == "new":
                break
            if claim.state == "mismatch":
                raise ServiceFailure.conflict(
                    f"tool call id {call.tool_call_id} of session {call.session_id} was already used "
                    f"for a different call ({claim.tool})",
                    session_id=call.session_id,
                    tool_call_id=call.tool_call_id,
                )
            if claim.state == "done" and claim.result is not None:
                return msgspec.structs.replace(_result_decoder.decode(claim.result), replayed=True)
            if not _alive(claim.owner) or time.time() - claim.started_at > self.stale_after:
                result = self._result(call, failure(call.tool, _interrupted(call.tool)), started)
                await asyncio.to_thread(self.store.settle, call.session_id, call.tool_call_id, encode(result))
                continue  # read back whatever was settled first
            await asyncio.sleep(0.2)  # another instance is running it right now
        future: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = self._result(call, await self._run(ctx, args), started)
        except BaseException:
            # Cancelled mid-run (the service is stopping): settle the call as interrupted so a
            # retry is told the effect is unknown instead of waiting for a run that is gone.
            interrupted = self._result(call, failure(call.tool, _interrupted(call.tool)), started)
            self.store.settle(call.session_id, call.tool_call_id, encode(interrupted))
            future.set_result(interrupted)
            raise
        else:
            await asyncio.to_thread(self.store.finish, call.session_id, call.tool_call_id, encode(result))
            future.set_result(result)
            return result
        finally:
            self._inflight.pop(key, None)


def _interrupted(tool: str) -> str:
    return (
        f"This {tool} call was interrupted before its result was recorded, so its effect is unknown. "
        "Check the current state before trying again with a new call."
    )
