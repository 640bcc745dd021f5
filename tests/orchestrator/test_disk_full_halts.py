"""``disk_full`` halts: recorded with the path, lifted with nothing said to the agent, the step retried; the
orchestrator's writer reports a full store and gives up its reserve to record what it must."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import OperationalError

from autarch.runtime.storage import Reserve, StorageFull, StorageState, remote_storage_full
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.workflow import controls
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.workflow.space import halt_for_space, lift_space_halt
from autarch.services.orchestrator.workflow.views import view_of
from autarch.services.orchestrator.writer import BatchedWriter

from .test_workflow_domain import SCOPE, card
from .test_workflow_steps import next_step, open_session, pulse_running

PATH = "/data/agent_runner/events.sqlite"
MESSAGE = f"no space left on device: {PATH}: agent_runner: database or disk is full"


def research_running() -> tuple[Workflow, str]:
    wf = Workflow(workflow_id="3f1f0a86-5d39-4a59-9b43-1a1e3c1f0d10", title="t", request="r", repo="/repo",
                  base_branch="main", branch=None, script=None)
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    wf.approve()
    return wf, open_session(wf, "research")


async def test_a_research_turn_waiting_for_space_halts_the_workflow_naming_the_path() -> None:
    wf, _ = research_running()
    assert halt_for_space(wf, PATH, MESSAGE)
    assert not halt_for_space(wf, PATH, MESSAGE)  # halted already: nothing more recorded
    view = view_of(wf)
    assert view.status == "halted" and view.stage == "research"
    assert view.halt is not None and view.halt.reason == "disk_full" and view.halt.message == MESSAGE
    assert view.halt.details == {"step": "research", "path": PATH}
    assert await next_step(wf) is None  # nothing is asked of anybody while it waits

    assert not lift_space_halt(wf, "/another/path")
    assert lift_space_halt(wf, PATH)
    assert wf.halt is None and wf.outbox == []  # the runner runs the turn again: the agent is told nothing
    assert not lift_space_halt(wf, PATH)


async def test_resume_lifts_a_disk_full_halt_and_retries_the_step() -> None:
    wf, _ = pulse_running()
    wf.session_closed(step="preflight", reason="preflight completed")
    wf.accept_completion("pulse-1", description="feat: x", files_changed=[], unresolved_issues=[])
    assert halt_for_space(wf, "/data/worktrees/w", "no space left on device: /data/worktrees/w: git")
    assert wf.halt is not None and wf.halt.pulse_id == "pulse-1"
    controls.resume(wf, None)
    assert wf.halt is None and wf.outbox == []
    step = await next_step(wf)
    assert step is not None and step[0] == "checkpoint"


def test_a_finished_workflow_is_not_halted() -> None:
    wf, _ = research_running()
    wf.abandon("no longer wanted")
    assert not halt_for_space(wf, PATH, MESSAGE) and wf.halt is None


@pytest.mark.parametrize(("code", "message", "details", "path"), [
    ("storage_full", "no space left on device: /w: x", {"path": "/w"}, "/w"),
    ("git_failed", "git commit: fatal: write error: No space left on device", {}, "/default"),
    ("internal", "OperationalError: database or disk is full", {}, "/default"),
])
def test_a_service_saying_it_had_no_space(code: str, message: str, details: dict[str, object], path: str) -> None:
    full = remote_storage_full(code, message, details, "/default")
    assert full is not None and full.path == path


def test_other_service_errors_are_not_a_lack_of_space() -> None:
    assert remote_storage_full("conflict", "session is still running", {}, "/d") is None


def _full() -> OperationalError:
    cause = sqlite3.OperationalError("database or disk is full")
    cause.sqlite_errorcode = 13  # what SQLite sets on SQLITE_FULL
    exc = OperationalError(cause)
    exc.__cause__ = cause
    return exc


async def test_a_full_store_gives_up_its_reserve_once_to_record(tmp_path: Path) -> None:
    app = WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store",
                                   "SQLITE_DBNAME": str(tmp_path / "events.sqlite")})
    reserve = Reserve(tmp_path / "space-reserve", size=64 * 1024)
    assert reserve.ensure() and (tmp_path / "space-reserve").stat().st_size == 64 * 1024
    state = StorageState()
    writer = BatchedWriter(app=app, store_path=str(tmp_path / "events.sqlite"), reserve=reserve, storage=state)
    refusals = [1]
    real_save = app.save

    def save(*events: Any) -> Any:
        # The first write finds the disk full; the reserve given up, the second goes through.
        if refusals[0] > 0:
            refusals[0] -= 1
            raise _full()
        return real_save(*events)

    app.save = save  # type: ignore[method-assign,assignment]  # a save that finds the disk full first
    writer.start()
    wf, _ = research_running()
    await writer.save(wf)
    assert not (tmp_path / "space-reserve").exists()
    assert [p.path for p in state.problems] == [str(tmp_path / "events.sqlite")]
    assert app.repository.get(wf.id).version == wf.version  # recorded once

    # With no reserve left, a full store is a typed StorageFull and nothing is recorded.
    refusals[0] = 2
    halt_for_space(wf, PATH, MESSAGE)
    with pytest.raises(StorageFull) as raised:
        await writer.save(wf)
    assert raised.value.path == str(tmp_path / "events.sqlite")
    assert app.repository.get(wf.id).halt is None
    await writer.stop()
    # Made again once there is room.
    assert reserve.ensure()
    app.close()


async def test_the_stepper_hands_a_lack_of_space_to_no_space_or_retries_it() -> None:
    import asyncio
    import logging

    from autarch.contracts.errors import ErrorReply
    from autarch.runtime.errors import RemoteError
    from autarch.services.orchestrator.stepping import Stepper

    def no_room() -> RemoteError:
        return RemoteError(ErrorReply(code="storage_full", message="no space left on device: /w: x",
                                      details={"path": "/w"}), subject="autarch.svc.git.checkpoint_pulse")

    failed: list[str] = []
    halted: list[tuple[str, str]] = []
    calls: dict[str, int] = {"a": 0, "b": 0}

    async def advance(key: str) -> None:
        calls[key] += 1
        if calls[key] == 1 or (key == "b" and calls[key] < 3):
            raise no_room()

    async def fail(key: str, message: str) -> None:
        failed.append(key)

    async def no_space(key: str, full: StorageFull) -> None:
        halted.append((key, full.path))

    with_halt = Stepper(kind="workflow", log=logging.getLogger("test"))
    with_halt.start(advance=advance, fail=fail, no_space=no_space)
    with_halt.kick("a")
    without = Stepper(kind="loop", log=logging.getLogger("test"))
    without.start(advance=advance, fail=fail)
    without.kick("b")
    for _ in range(200):
        if halted and calls["b"] >= 3:
            break
        await asyncio.sleep(0.05)
    assert halted == [("a", "/w")] and calls["a"] == 2  # halted, then advanced once more (finding nothing to do)
    assert calls["b"] == 3 and failed == []  # retried until the service had room, never failed for a person
    await with_halt.stop()
    await without.stop()
