"""A stop stops the running tool call too: the command's processes die before the turn is recorded cancelled."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import SessionStopped, StopSession
from autarch.contracts.tools import ToolCall, ToolResult
from autarch.runtime.requests import request
from autarch.services.scripted_model import ScriptedModelServer

from ..held_lock import HOLD, until_released
from .conftest import RUNNER, get_session, start_session
from .scenarios import step, text, tool

# The marker would be written 3 s into the command, by bash and by a background child of it.
COMMAND = HOLD + "touch started; (sleep 3 && touch child-marker) & sleep 3 && touch marker; wait"

SCENARIO = {
    "description": "A pulse whose shell command is stopped while it runs.",
    "check_tools": False,
    "scripts": {
        "pulsing:stop-mid-command": [
            step(tool("shell", reason="Run the slow check", command=COMMAND, timeoutSeconds=60)),
            step(text("Never reached: the turn is stopped during the command.")),
        ],
    },
}


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedModelServer]:
    """This module's own scripted model (the ``runner`` fixture picks it up by name)."""
    with ScriptedModelServer(SCENARIO) as server:
        yield server


async def _started(root: Path) -> None:
    while not (root / "started").exists():
        await asyncio.sleep(0.01)


async def test_stopping_a_pulse_mid_command_kills_the_command_and_records_the_cancel(nc, runner, repo, scripted):
    accepted = await start_session(nc, role="pulsing", script="stop-mid-command", root=repo)
    await asyncio.wait_for(_started(repo), 20)
    stopped = await request(nc, subjects.request(RUNNER, "stop_session"),
                            StopSession(session_id=accepted.session_id, reason="user pressed stop"), SessionStopped)
    assert stopped.turn_id == accepted.turn_id

    view = await get_session(nc, accepted.session_id)
    turn = view.turns[0]
    assert turn.outcome is not None and turn.outcome.kind == "cancelled"
    detail = turn.outcome.detail
    assert detail.startswith("user pressed stop: cancelled during tool shell")
    assert "which the tools service stopped" in detail
    [call] = turn.tool_calls
    assert call.output is None  # the next turn's transcript explains the missing result
    assert len([r for r in scripted.requests if r.key == "pulsing:stop-mid-command"]) == 1  # no model call after

    # The tools service recorded the call as cancelled: a replay (a runner resuming after a crash) gets
    # that result and does not start the command again.
    replay = await request(nc, subjects.request("tools", "call"), ToolCall(
        session_id=accepted.session_id, tool_call_id=call.tool_use_id, role="pulsing", root=str(repo), tool="shell",
        arguments=call.input, run_id=view.run_id), ToolResult, timeout=10)
    assert replay.replayed and replay.is_error
    assert json.loads(replay.content)["error"].startswith("cancelled: user pressed stop.")

    await until_released(repo)  # every process of the command has exited: none can write a marker later
    assert not (repo / "marker").exists() and not (repo / "child-marker").exists()
