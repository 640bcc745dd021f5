"""Running one tool call: role check, argument validation, idempotency, the handler, the result shape.

A mutating call is claimed in the session store under ``(session, tool call id)`` before it
runs and its result recorded after, so a repeated call gets the recorded result back instead of
a second run — also from another instance, and after a restart. A call whose process died (or
stopped) mid-run is run again by the retry its caller sends: its commands died with that process
(``PR_SET_PDEATHSIG``), so nothing of the first run goes on beside the second, and the model gets
a real result rather than an error about the crash of a service. Only a claim whose owner cannot
be checked (another machine) and that is older than ``stale_after`` is settled as interrupted.

The work of every call with an effect runs as a task of its own, so a ``cancel`` can stop it: the
call is then answered and recorded with a ``cancelled: …`` error result. A read-only call is not
cancellable (it changes nothing a stop must prevent) and answers a cancel with ``not_running``. A
cancel that finds no such call here is remembered for a minute, so a call whose request was still on
its way does not start.
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
from dataclasses import dataclass
from typing import Any

import msgspec

from autarch.contracts.base import decoder_for, encode
from autarch.contracts.tool_catalog import MUTATING_TOOLS, TOOL_ARGUMENTS, tool_definitions, tool_variant
from autarch.contracts.tools import (
    CancelState,
    CancelToolCall,
    FileAccessLog,
    GetFileAccess,
    ListTools,
    ToolCall,
    ToolCallCancelled,
    ToolDefinitions,
    ToolResult,
)
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.leases import LeaseTable

from .context import Forwarder, ToolContext, ToolSettings, failure
from .gitrecord import GitRecords
from .grep_pool import GrepEngine
from .lease_guard import lease_refusal
from .paths import PathRefused, Worktree
from .registry import HANDLERS
from .sandbox_client import LaunchServer
from .sensitivity import Redactor
from .shell import MAX_TIMEOUT_SECONDS
from .store import SessionStore

__all__ = ["ToolExecutor", "is_error_result"]

log = logging.getLogger("tools")

_FILE_WRITERS = frozenset({"write_file", "edit_file", "multi_edit"})
_OWNER = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
_result_decoder: msgspec.json.Decoder[ToolResult] = decoder_for(ToolResult)
_EARLY_CANCEL_SECONDS = 60.0
"""How long a cancel of a call not (yet) running here is remembered."""
_EARLY_CANCEL_LIMIT = 10_000


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


@dataclass(eq=False)
class _Running:
    """The work of one tool call in this process, and why it was cancelled (None: it was not)."""

    task: asyncio.Task[Any]
    tool: str
    reason: str | None = None


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
        leases: LeaseTable | None = None,
    ) -> None:
        self.store = store
        self.engine = engine
        self.forwarder = forwarder
        self.settings = settings
        self.redactor = redactor or Redactor()
        self.stale_after = stale_after
        self._inflight: dict[tuple[str, str], asyncio.Future[ToolResult]] = {}
        self._root_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._running: dict[tuple[str, str], list[_Running]] = {}
        self._early_cancels: dict[tuple[str, str], tuple[float, str]] = {}
        self.leases = leases
        """The file leases checked for calls with a ``lease_holder`` (None: such calls are refused)."""
        self.launcher = LaunchServer()
        """Starts the confined commands of ``shell`` (its server process starts with the first one)."""
        self.git_records = GitRecords(forwarder.nc)
        """Each worktree's git directories, asked of the git service (docs/security.md)."""

    def close(self) -> None:
        self.launcher.close()
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
            leases=self.leases,
            launcher=self.launcher,
            git_records=self.git_records,
        )
        if tool in MUTATING_TOOLS:
            return await self._once(ctx, args, started)
        # A read-only call changes nothing a stop must prevent, so it runs without the bookkeeping of a
        # cancellable task (it is on every tool round trip).
        return self._result(call, await self._run(ctx, args), started)

    async def cancel_running(self, command: CancelToolCall) -> ToolCallCancelled | None:
        """Stop the call if this process runs it, and answer once it has stopped; None when it does not run here."""
        key = (command.session_id, command.tool_call_id)
        entries = list(self._running.get(key, ()))  # a copy: each run removes itself when it ends
        if not entries:
            return None
        for entry in entries:
            entry.reason = entry.reason or command.reason
            entry.task.cancel()
        await asyncio.wait([entry.task for entry in entries])
        settling = self._inflight.get(key)
        if settling is not None:
            # A mutating call: answer after its cancelled result is recorded, so a replay finds it.
            await asyncio.shield(settling)
        tool = entries[0].tool
        if any(entry.task.cancelled() for entry in entries):
            return self._cancel_reply(command, "cancelled", f"the running {tool} call was stopped")
        return self._cancel_reply(command, "finished", f"the {tool} call finished before it could be stopped")

    async def settled_cancel(self, command: CancelToolCall) -> ToolCallCancelled | None:
        """The answer to a cancel of a call whose result is already recorded; None when there is none."""
        if await asyncio.to_thread(self.store.finished, command.session_id, command.tool_call_id):
            return self._cancel_reply(command, "finished", "the call had already finished; its recorded result stands")
        return None

    def remember_cancel(self, command: CancelToolCall) -> None:
        """A cancel of a call not running here: if its request arrives shortly after all, it does not start."""
        now = time.monotonic()
        if len(self._early_cancels) >= _EARLY_CANCEL_LIMIT:
            self._early_cancels = {
                key: value for key, value in self._early_cancels.items() if now - value[0] < _EARLY_CANCEL_SECONDS
            }
            while len(self._early_cancels) >= _EARLY_CANCEL_LIMIT:
                del self._early_cancels[next(iter(self._early_cancels))]
        self._early_cancels[(command.session_id, command.tool_call_id)] = (now, command.reason)

    @staticmethod
    def _cancel_reply(command: CancelToolCall, state: CancelState, detail: str) -> ToolCallCancelled:
        return ToolCallCancelled(
            session_id=command.session_id,
            tool_call_id=command.tool_call_id,
            cancelled=state == "cancelled",
            state=state,
            detail=detail,
        )

    # -- internals ------------------------------------------------------------------------------

    async def _run_cancellable(self, ctx: ToolContext, args: Any) -> Any:
        """:meth:`_run` as a task :meth:`cancel_running` can stop; a stopped call's value is the cancelled error."""
        call = ctx.call
        key = (call.session_id, call.tool_call_id)
        early = self._early_cancels.pop(key, None)
        if early is not None and time.monotonic() - early[0] < _EARLY_CANCEL_SECONDS:
            return failure(call.tool, _cancelled(call.tool, early[1], ran=False))
        work = asyncio.ensure_future(self._run(ctx, args))
        entry = _Running(task=work, tool=call.tool)
        self._running.setdefault(key, []).append(entry)
        try:
            return await work
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if entry.reason is None or (current is not None and current.cancelling()):
                raise  # this request itself was cancelled (the service is stopping), not the call
            return failure(call.tool, _cancelled(call.tool, entry.reason, ran=True))
        finally:
            entries = self._running.get(key, [])
            if entry in entries:
                entries.remove(entry)
            if not entries:
                self._running.pop(key, None)

    async def _run(self, ctx: ToolContext, args: Any) -> Any:
        tool = ctx.call.tool
        try:
            if tool in _FILE_WRITERS:
                # One file mutation at a time per worktree: read-check-write must not interleave.
                async with self._root_locks[ctx.worktree.root]:
                    if ctx.call.lease_holder is not None:
                        refused = await lease_refusal(ctx, args.path)
                        if refused is not None:
                            return refused
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
            if not _alive(claim.owner):
                if await asyncio.to_thread(
                    self.store.take_over, call.session_id, call.tool_call_id, dead_owner=claim.owner, owner=_OWNER
                ):
                    log.info("running %s %s again: the process that ran it died", call.tool, call.tool_call_id)
                    break
                continue  # another retry took it over (or settled it) first: read back what it did
            if time.time() - claim.started_at > self.stale_after:
                result = self._result(call, failure(call.tool, _interrupted(call.tool)), started)
                await asyncio.to_thread(self.store.settle, call.session_id, call.tool_call_id, encode(result))
                continue  # read back whatever was settled first
            await asyncio.sleep(0.2)  # another instance is running it right now
        future: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = self._result(call, await self._run_cancellable(ctx, args), started)
        except BaseException:
            # Cancelled mid-run (the service is stopping; the call's commands were killed): give the claim up
            # so the caller's retry, on another instance or after the restart, runs the call again. Waiters in
            # this process (being stopped too) hear it was interrupted.
            self.store.release(call.session_id, call.tool_call_id, owner=_OWNER)
            future.set_result(self._result(call, failure(call.tool, _interrupted(call.tool)), started))
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


def _cancelled(tool: str, reason: str, *, ran: bool) -> str:
    if not ran:
        return f"cancelled: {reason}. This {tool} call was stopped before it ran; it had no effect."
    return (
        f"cancelled: {reason}. This {tool} call was stopped while it ran (a command's processes were killed), "
        "so it may have done part of its work. Check the current state before trying again with a new call."
    )
