"""A store that cannot be written for lack of space: the turn waits, the runner says why, and the turn runs again
from what was recorded once space is back, with nothing recorded twice."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import OperationalError

from autarch.contracts import subjects
from autarch.contracts.agents import SendMessage, SessionStopped, StopSession, TurnAccepted
from autarch.contracts.errors import ErrorCode
from autarch.contracts.storage import StorageNotice
from autarch.gateway.health import check_health
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.runtime.storage import STORAGE
from autarch.services.agent_runner.service import AgentRunner

from .conftest import RUNNER, get_session, start_session, wait_turn


def _full() -> OperationalError:
    """What eventsourcing raises when SQLite reports SQLITE_FULL."""
    cause = sqlite3.OperationalError("database or disk is full")
    cause.sqlite_errorcode = 13  # what SQLite sets on SQLITE_FULL
    exc = OperationalError(cause)
    exc.__cause__ = cause
    return exc


class FullDisk:
    """The runner's store failing every save for lack of space while ``full`` is set, as SQLite does: the
    aggregate's pending events are taken, then the write fails and nothing is recorded."""

    def __init__(self, runner: AgentRunner) -> None:
        self.full = False
        self.allow = 0
        """Saves let through while full (the session's start, so that its turn is the one finding no space)."""
        self.refused = 0
        self._save: Callable[..., Any] = runner.app.save

        def save(*aggregates: Any, **kwargs: Any) -> Any:
            if self.full and self.allow > 0:
                self.allow -= 1
            elif self.full:
                for aggregate in aggregates:
                    aggregate.collect_events()
                self.refused += 1
                raise _full()
            return self._save(*aggregates, **kwargs)

        runner.app.save = save  # type: ignore[method-assign]  # a save that finds the disk full when told


async def _until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.fixture
def no_room(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], None]]:
    """Make the process's storage check see no room (True) or plenty (False)."""
    monkeypatch.setattr(STORAGE, "interval", 0.05)

    def set_full(full: bool) -> None:
        STORAGE.min_free = 1 << 62 if full else 1

    yield set_full
    STORAGE.min_free = 4 * 1024 * 1024
    for problem in STORAGE.problems:
        STORAGE.clear(problem.path)


async def test_a_turn_that_cannot_be_saved_waits_for_space_and_runs_again(
        nc, runner: AgentRunner, repo: Path, scripted, no_room) -> None:
    disk = FullDisk(runner)
    notices: list[StorageNotice] = []

    async def heard(msg: Any) -> None:
        notices.append(msgspec.json.decode(msg.data, type=StorageNotice))

    sub = await nc.subscribe(subjects.storage("agent_runner"), cb=heard)
    workflow_id = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
    no_room(True)
    disk.full = True
    # The session's start is refused with a typed error while nothing can be recorded, and records nothing.
    with pytest.raises(RemoteError) as refused:
        await start_session(nc, role="research", script="read-and-submit", root=repo, workflow_id=workflow_id)
    assert refused.value.code == ErrorCode.STORAGE_FULL
    assert refused.value.reply.details["path"] == runner.store_path
    assert runner.sessions == {}

    # Space for the start only: the disk is full again when the first reply comes.
    disk.allow = 1
    accepted = await start_session(nc, role="research", script="read-and-submit", root=repo, workflow_id=workflow_id)
    await _until(lambda: disk.refused >= 2, "a save of the turn refused")
    await _until(lambda: any(n.problem is not None for n in notices), "a storage notice")
    waiting = next(n for n in notices if n.problem is not None)
    assert waiting.workflow_ids == [workflow_id] and waiting.path == runner.store_path
    assert waiting.problem.kind == "disk_full" and "database or disk is full" in waiting.problem.message
    health = await check_health(nc, ["agent_runner"])
    assert health.status == "degraded"
    assert [p.path for p in health.services["agent_runner"].problems] == [runner.store_path]
    # The turn is not failed: it waits, as recorded (its first turn, no reply yet).
    view = await get_session(nc, accepted.session_id)
    assert view.turns[0].outcome is None and view.turns[0].model_calls == 0
    # A message to the waiting session is refused, not queued behind it.
    with pytest.raises(RemoteError):
        await request(nc, subjects.request(RUNNER, "send_message"),
                      SendMessage(session_id=accepted.session_id, text="more"), TurnAccepted)

    disk.full = False
    no_room(False)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id, timeout=30)
    turn = view.turns[0]
    assert turn.outcome is not None and turn.outcome.kind == "block" and turn.outcome.tool == "submit_research"
    # Nothing recorded twice: two replies, two tool results, one completion.
    assert turn.model_calls == 2 and [c.name for c in turn.tool_calls] == ["read_file", "grep", "submit_research"]
    assert all(c.output is not None for c in turn.tool_calls[:2])
    stored = await asyncio.to_thread(runner.app.get_session, accepted.session_id)
    assert len(stored.turns) == 1 and len(stored.turns[0].replies) == 2
    await _until(lambda: any(n.problem is None for n in notices), "the notice that the turn goes on")
    assert next(n for n in notices if n.problem is None).workflow_ids == [workflow_id]
    health = await check_health(nc, ["agent_runner"])
    assert health.status == "ok" and health.services["agent_runner"].problems == []
    await sub.unsubscribe()


async def test_a_stop_that_cannot_be_recorded_is_recorded_once_there_is_room(
        nc, runner: AgentRunner, repo: Path, scripted, no_room) -> None:
    disk = FullDisk(runner)
    no_room(True)
    disk.full, disk.allow = True, 1  # the start fits; the turn's first reply does not
    accepted = await start_session(nc, role="research", script="read-and-submit", root=repo)
    await _until(lambda: accepted.session_id in runner._stalled, "the turn waiting for space")
    # The stop comes while nothing can be recorded: the caller is told, and the turn is not run again.
    with pytest.raises(RemoteError) as refused:
        await request(nc, subjects.request(RUNNER, "stop_session"),
                      StopSession(session_id=accepted.session_id, reason="wrong approach"), SessionStopped)
    assert refused.value.code == ErrorCode.STORAGE_FULL
    view = await get_session(nc, accepted.session_id)
    assert view.turns[0].outcome is None  # as recorded: still running

    disk.full = False
    no_room(False)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id, timeout=30)
    outcome = view.turns[0].outcome
    assert outcome is not None and outcome.kind == "cancelled" and "wrong approach" in (outcome.detail or "")
    assert view.status == "idle" and len(view.turns) == 1
    # Stopped, not run again: no model call after the stop.
    stored = await asyncio.to_thread(runner.app.get_session, accepted.session_id)
    assert stored.current_turn is None
    # And the repeat of the stop now finds nothing running.
    stopped = await request(nc, subjects.request(RUNNER, "stop_session"),
                            StopSession(session_id=accepted.session_id, reason="wrong approach"), SessionStopped)
    assert stopped.turn_id is None
