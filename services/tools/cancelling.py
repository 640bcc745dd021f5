"""Routing a ``cancel`` to the tools instance that runs the call.

Calls are spread over the instances by the ``tools`` queue group, and so are cancels: the instance
that receives a cancel is often not the one running the call. It stops the call if it runs it
itself; otherwise, unless the store already holds the call's result, it passes the cancel on over
:data:`~autarch.contracts.subjects.TOOLS_CANCEL_FANOUT`, which every instance subscribes to outside
the queue group, and waits a short while for the instance running the call to answer once the call
has stopped. Instances that do not run it stay silent and remember the cancel (see
:meth:`ToolExecutor.remember_cancel`): a call whose request was still on its way does not start.
"""

from __future__ import annotations

import asyncio
import logging

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from autarch.contracts import subjects
from autarch.contracts.base import decoder_for, encode
from autarch.contracts.errors import ErrorCode
from autarch.contracts.tools import CancelToolCall, ToolCallCancelled
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request

from .executor import ToolExecutor

__all__ = ["FANOUT_WINDOW_SECONDS", "CancelRouter"]

log = logging.getLogger("tools")

FANOUT_WINDOW_SECONDS = 1.5
"""How long a cancel waits for another instance to say it stopped the call (killing a process
group takes milliseconds; the rest is slack for a busy machine)."""

_cancel_decoder: msgspec.json.Decoder[CancelToolCall] = decoder_for(CancelToolCall)


class CancelRouter:
    """Serves the ``cancel`` verb of one tools instance and answers the other instances' fan-out."""

    def __init__(self, executor: ToolExecutor, nc: Client | None, *, window: float = FANOUT_WINDOW_SECONDS) -> None:
        self.executor = executor
        self.nc = nc
        self.window = window
        self._sub: Subscription | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Subscribe to the fan-out subject (no queue group: every instance must hear each cancel)."""
        if self.nc is not None:
            self._sub = await self.nc.subscribe(subjects.TOOLS_CANCEL_FANOUT, cb=self._on_fanout)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def cancel(self, command: CancelToolCall) -> ToolCallCancelled:
        """The ``cancel`` verb: stop the call wherever it runs; a no-op answer when nothing runs it."""
        stopped = await self.executor.cancel_running(command)
        if stopped is not None:
            return stopped
        settled = await self.executor.settled_cancel(command)
        if settled is not None:
            return settled
        elsewhere = await self._ask_others(command)
        if elsewhere is not None:
            return elsewhere
        self.executor.remember_cancel(command)
        return ToolCallCancelled(
            session_id=command.session_id,
            tool_call_id=command.tool_call_id,
            cancelled=False,
            state="not_running",
            detail="no tools instance is running this call",
        )

    async def _ask_others(self, command: CancelToolCall) -> ToolCallCancelled | None:
        if self.nc is None or not self.nc.is_connected:
            return None
        try:
            return await request(
                self.nc, subjects.TOOLS_CANCEL_FANOUT, command, ToolCallCancelled, timeout=self.window
            )
        except RemoteError as exc:
            if exc.code != ErrorCode.TIMEOUT:  # a timeout is the normal "nobody runs it"
                log.warning("cancel fan-out for %s/%s: %s", command.session_id, command.tool_call_id, exc)
            return None

    async def _on_fanout(self, msg: Msg) -> None:
        # Stopping a call waits for its processes to die: answer each cancel in a task of its own.
        task = asyncio.create_task(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, msg: Msg) -> None:
        try:
            command = _cancel_decoder.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("ignoring a malformed cancel on %s: %s", msg.subject, exc)
            return
        stopped = await self.executor.cancel_running(command)
        if stopped is None:
            self.executor.remember_cancel(command)
            return  # silent: the instance that runs it answers
        if msg.reply:
            try:
                await msg.respond(encode(stopped))
            except Exception:  # the asking instance gave up or lost its connection
                log.warning("could not answer a cancel fan-out", exc_info=True)
