"""Stopping the tool call a stopped turn was waiting for.

Cancelling a turn's task only stops the runner waiting: the tools service would go on running the
call (a shell command for up to 300 s, changing the worktree after the turn was recorded as
cancelled). A stop command therefore cancels the task with :data:`STOP_TURN` as the message, and
the turn loop, seeing it, asks the tools service to cancel the call before the cancellation is
recorded. A shutdown cancels without that message: the next process resumes the turn and the call's
result is still wanted.
"""

from __future__ import annotations

from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.tools import CANCEL, CancelToolCall, ToolCallCancelled
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request

__all__ = ["STOP_TURN", "cancel_timeout", "cancel_tool_call"]

STOP_TURN = "autarch.agent_runner.stop_session"
"""The message of the ``CancelledError`` a stop command raises in a turn's task."""

_TOOLS_CANCEL = subjects.request("tools", CANCEL)


def cancel_timeout(request_timeout: float) -> float:
    """How long a stop waits for the tools service: well inside the stop command's own deadline."""
    return min(3.0, request_timeout / 2)


async def cancel_tool_call(
    nc: Client, *, session_id: str, tool_call_id: str, reason: str, timeout: float
) -> str:
    """Ask the tools service to stop a running call (best effort); what happened, as words for the record."""
    command = CancelToolCall(session_id=session_id, tool_call_id=tool_call_id, reason=reason[:500] or "stopped")
    try:
        reply = await request(nc, _TOOLS_CANCEL, command, ToolCallCancelled, timeout=timeout)
    except RemoteError as exc:
        return f"which may still be running: the tools service did not confirm a cancel ({exc.code}: {exc.message})"
    if reply.cancelled:
        return "which the tools service stopped (its processes were killed)"
    if reply.state == "finished":
        return "which had already finished"
    return "which no tools instance was running"
