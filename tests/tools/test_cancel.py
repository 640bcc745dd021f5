"""``cancel``: a running call stops at once, its processes die, its cancelled result is what a replay gets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.tools import CancelToolCall, ToolCall, ToolCallCancelled, ToolResult
from autarch.runtime.bus import connect
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.tools.cancelling import CancelRouter
from autarch.services.tools.service import build_executor, start

from ..held_lock import HOLD, until_released
from .helpers import Tools

# Writes a marker after a delay, from the shell itself and from a background child of it: after a
# cancel neither may ever appear (the child proves the whole process group went, not only bash).
SLOW = HOLD + "touch started; (sleep 2 && touch child-marker) & sleep 2 && touch marker; wait"


async def _started(root: Path) -> None:
    while not (root / "started").exists():
        await asyncio.sleep(0.01)


def _cancel(call_id: str = "slow", session: str = "session-1", reason: str = "user pressed stop") -> CancelToolCall:
    return CancelToolCall(session_id=session, tool_call_id=call_id, reason=reason)


async def _assert_markers_never_appear(root: Path) -> None:
    await until_released(root)  # every process of SLOW has exited: none can write a marker later
    assert not (root / "marker").exists() and not (root / "child-marker").exists()


async def test_a_running_shell_command_is_stopped_with_its_process_group(tools: Tools, executor, worktree):
    running = asyncio.create_task(tools.result("shell", {"command": SLOW, "timeoutSeconds": 60}, call_id="slow"))
    await asyncio.wait_for(_started(worktree), 10)
    answer = await executor.cancel_running(_cancel())
    assert answer is not None and (answer.cancelled, answer.state) == (True, "cancelled")
    result = await asyncio.wait_for(running, 10)  # a guard against a hang, not a timing assertion
    value = json.loads(result.content)
    assert result.is_error and value["success"] is False
    assert value["error"].startswith("cancelled: user pressed stop.") and "may have done part" in value["error"]
    await _assert_markers_never_appear(worktree)


async def test_a_cancelled_call_replays_its_cancelled_result_and_never_runs(tools: Tools, executor, worktree,
                                                                           tool_settings):
    arguments = {"command": SLOW}
    running = asyncio.create_task(tools.result("shell", arguments, call_id="slow"))
    await asyncio.wait_for(_started(worktree), 10)
    await executor.cancel_running(_cancel())
    cancelled = await running
    (worktree / "started").unlink()
    replay = await tools.result("shell", arguments, call_id="slow")
    assert replay.replayed and replay.content == cancelled.content
    # After a restart too: the cancelled result is in the store, not only in memory.
    restarted = build_executor(tool_settings, grep_workers=0)
    try:
        again = await Tools(restarted, worktree).result("shell", arguments, call_id="slow")
        stale = await restarted.cancel_running(_cancel())
    finally:
        restarted.close()
    assert again.replayed and again.content == cancelled.content
    assert stale is None  # nothing runs in the new process
    assert not (worktree / "started").exists()
    await _assert_markers_never_appear(worktree)


async def test_cancelling_a_finished_or_unknown_call_is_a_no_op(tools: Tools, executor, worktree):
    router = CancelRouter(executor, None)
    done = await tools.result("shell", {"command": "echo done"}, call_id="quick")
    finished = await router.cancel(_cancel("quick"))
    assert (finished.cancelled, finished.state) == (False, "finished")
    replay = await tools.result("shell", {"command": "echo done"}, call_id="quick")
    assert replay.replayed and replay.content == done.content and not replay.is_error

    unknown = await router.cancel(_cancel("never-sent"))
    assert (unknown.cancelled, unknown.state) == (False, "not_running")


async def test_a_call_arriving_just_after_its_cancel_does_not_start(tools: Tools, executor, worktree):
    # The cancel overtook the call's request (they travel by different subjects): the call must not run.
    router = CancelRouter(executor, None)
    answer = await router.cancel(_cancel("late"))
    assert answer.state == "not_running"
    result = await tools.result("shell", {"command": "touch ran"}, call_id="late")
    value = json.loads(result.content)
    assert result.is_error and value["error"].startswith("cancelled: user pressed stop.")
    assert "had no effect" in value["error"] and not (worktree / "ran").exists()
    # Other calls of the session are not affected.
    other = await tools.result("shell", {"command": "touch ran"}, call_id="other")
    assert not other.is_error and (worktree / "ran").exists()


async def test_a_read_only_call_is_not_cancellable(tools: Tools, executor, worktree):
    """It changes nothing a stop must prevent, so it runs even after a cancel of its id (no task bookkeeping on the
    hot path of every read)."""
    (worktree / "a.txt").write_text("hello\n")
    router = CancelRouter(executor, None)
    await router.cancel(_cancel("read-1"))
    read = await tools.result("read_file", {"path": "a.txt"}, call_id="read-1")
    assert not read.is_error and "hello" in read.content


# --- over NATS ----------------------------------------------------------------------------------------


@pytest.fixture
def service_settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=str(tmp_path / "data"), tools_grep_workers=0, request_timeout=5.0)


@pytest.fixture
async def tools_service(nc, service_settings):
    stop = await start(nc, service_settings)
    yield
    await stop()


def _shell_call(root: Path, command: str, call_id: str = "slow") -> ToolCall:
    return ToolCall(session_id="session-1", tool_call_id=call_id, role="pulsing", root=str(root), tool="shell",
                    arguments={"reason": "test", "command": command})


async def test_cancel_over_nats_stops_the_call_and_answers_its_request(nc, tools_service, worktree):
    call = asyncio.create_task(request(nc, subjects.request("tools", "call"), _shell_call(worktree, SLOW),
                                       ToolResult, timeout=30))
    await asyncio.wait_for(_started(worktree), 10)
    answer = await request(nc, subjects.request("tools", "cancel"), _cancel(), ToolCallCancelled)
    assert (answer.session_id, answer.tool_call_id, answer.cancelled, answer.state) == (
        "session-1", "slow", True, "cancelled")
    result = await call
    assert result.is_error and "cancelled: user pressed stop." in result.content
    again = await request(nc, subjects.request("tools", "cancel"), _cancel(), ToolCallCancelled)
    assert (again.cancelled, again.state) == (False, "finished")
    await _assert_markers_never_appear(worktree)


async def test_a_cancel_received_by_another_instance_reaches_the_one_running_the_call(
    nc, nats_server, tools_service, service_settings, worktree
):
    # The second instance does not serve `call` here, so the call surely runs on the first one, and
    # the cancel given to the second must travel the fan-out subject to stop it.
    other_nc = await connect(nats_server.url, name="tools-2")
    other = build_executor(service_settings, nc=other_nc, grep_workers=0)
    router = CancelRouter(other, other_nc)
    await router.start()
    try:
        call = asyncio.create_task(request(nc, subjects.request("tools", "call"), _shell_call(worktree, SLOW),
                                           ToolResult, timeout=30))
        await asyncio.wait_for(_started(worktree), 10)
        answer = await router.cancel(_cancel())
        assert (answer.cancelled, answer.state) == (True, "cancelled")
        result = await call
        assert result.is_error and "cancelled: " in result.content
        unknown = await router.cancel(_cancel("nobody-runs-this"))
        assert (unknown.cancelled, unknown.state) == (False, "not_running")
    finally:
        await router.stop()
        other.close()
        await other_nc.drain()
    await _assert_markers_never_appear(worktree)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"not json", "invalid cancel payload"),
        (b'{"session_id": "s", "tool_call_id": ""}', "tool_call_id"),
        (b'{"session_id": "", "tool_call_id": "c"}', "session_id"),
        (b'{"session_id": "s", "tool_call_id": 7}', "tool_call_id"),
        (b'{"session_id": "s"}', "tool_call_id"),
        (b'{"session_id": "s", "tool_call_id": "' + b"x" * 600 + b'"}', "tool_call_id"),
        (b'{"session_id": "s", "tool_call_id": "c", "reason": ""}', "reason"),
    ],
)
async def test_bad_cancel_requests_are_typed_errors(nc, tools_service, payload, fragment):
    msg = await nc.request(subjects.request("tools", "cancel"), payload, timeout=5)
    assert msg.headers and msg.headers.get("Autarch-Error") == ErrorCode.BAD_REQUEST
    error = json.loads(msg.data)
    assert error["code"] == ErrorCode.BAD_REQUEST and fragment in error["message"]


async def test_a_bad_cancel_changes_nothing(nc, tools_service, worktree):
    call = asyncio.create_task(request(nc, subjects.request("tools", "call"), _shell_call(worktree, "sleep 0.5"),
                                       ToolResult, timeout=30))
    with pytest.raises(RemoteError) as refused:
        await request(nc, subjects.request("tools", "cancel"),
                      {"session_id": "session-1", "tool_call_id": "slow", "reason": ""}, ToolCallCancelled)
    assert refused.value.code == ErrorCode.BAD_REQUEST
    result = await call
    assert not result.is_error and json.loads(result.content)["exit_code"] == 0
