"""What the driver does next after turn outcomes and user controls: resume after a failed pulse turn, preflight's
tracked-file guard, closing finished sessions, the preflight clock, notes and baselines for pulses, answers."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from autarch.contracts.agents import SessionView
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import TurnCompleted
from autarch.contracts.git import FileChange, TrackedChanges
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.workflow import controls
from autarch.services.orchestrator.workflow.cards import artifacts_of
from autarch.services.orchestrator.workflow.completion import completion_rejections
from autarch.services.orchestrator.workflow.driver import next_action
from autarch.services.orchestrator.workflow.lifecycle import LifecycleError
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.workflow.outcomes import handle_turn
from autarch.services.orchestrator.workflow.steps import (
    needs_driving,
    preflight_overdue,
    session_baselines,
    session_notes,
    sessions_to_close,
)

from .test_workflow_domain import PLAN, RESEARCH, SCOPE, card
from .test_workflow_driving import executing, run

SETTINGS = Settings(data_dir="/nonexistent", drive_workflows=False)
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class Steps:
    """Stands in for the driver in ``next_action``: its returned action says which step it would take."""

    def __getattr__(self, name: str) -> Any:
        async def step(workflow_id: str, *args: Any) -> tuple[str, tuple[Any, ...]]:
            return name, args
        return step


async def next_step(wf: Workflow) -> tuple[str, tuple[Any, ...]] | None:
    action = next_action(Steps(), wf)  # type: ignore[arg-type]  # Steps stands in for the driver
    return None if action is None else await action()  # type: ignore[return-value]  # a Steps step returns its name and arguments


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def open_session(wf: Workflow, step: Any, *, assigned: str | None = None) -> str:
    session_id = str(uuid.uuid4())
    wf.assign_session(step=step, session_id=session_id, role="pulsing" if step.startswith("pulse:") else step,
                      root="/wt", kickoff="go", script=None, notes=[], assigned_at=assigned or at(0))
    wf.confirm_session(step=step, kickoff_turn_id=f"turn-0-{step}")
    return session_id


def turn(session_id: str, outcome: str, *, tool: str | None = None, detail: str = "",
         **arguments: Any) -> TurnCompleted:
    return TurnCompleted(run_id="w", occurred_at=T0, session_id=session_id, turn_id=str(uuid.uuid4()),
                         text="", thoughts="", outcome=outcome, tool=tool, arguments=arguments or None,
                         detail=detail)


def pulse_running(pulse_id: str = "pulse-1") -> tuple[Workflow, str]:
    wf = executing(PLAN["pulses"])
    open_session(wf, "preflight")
    wf.complete_preflight(status="completed", build_success=True)
    record = run(wf, pulse_id, "running")
    return wf, open_session(wf, f"pulse:{record.id}")


async def test_resume_after_a_failed_pulse_turn_asks_the_same_session_to_carry_on() -> None:
    wf, session_id = pulse_running()
    assert sessions_to_close(wf) == ["preflight"]
    wf.session_closed(step="preflight", reason="preflight completed")
    handle_turn(wf, "pulse:pulse-1", turn(session_id, "error", detail="model API answered 400"), SETTINGS)
    assert wf.halt is not None and wf.halt.reason == "error" and wf.halt.pulse_id == "pulse-1"
    assert await next_step(wf) is None  # waits for the user
    controls.resume(wf, "try again")
    [message] = wf.outbox
    assert message.session_id == session_id and "try again" in message.text
    assert wf.run("pulse-1").status == "running" and wf.runs[-1].attempt == 1  # the same pulse goes on
    assert await next_step(wf) == ("deliver", (message,))


async def test_resume_after_a_step_the_driver_could_not_do_retries_the_step_without_asking_the_agent() -> None:
    wf, _ = pulse_running()
    wf.session_closed(step="preflight", reason="preflight completed")
    wf.accept_completion("pulse-1", description="feat: x", files_changed=[], unresolved_issues=[])
    wf.halt_for("error", "git: checkpoint refused", details={"step": "pulse:pulse-1"})  # type: ignore[arg-type]  # details as recorded; as the driver's _fail
    controls.resume(wf, None)
    assert wf.outbox == []
    step = await next_step(wf)
    assert step is not None and step[0] == "checkpoint"


def test_a_stopped_pulse_is_not_continued_in_its_session_on_resume() -> None:
    wf, _ = pulse_running()
    wf.halt_for("stopped", "wrong approach", pulse_id="pulse-1", details={"step": "pulse:pulse-1"})  # type: ignore[arg-type]  # details as recorded
    wf.end_pulse_as("pulse-1", "stopped", "wrong approach")
    wf.pulse_ended(run_id="pulse-1", status="stopped", commit=None, diff_artifact_id=None,
                   is_recovery_checkpoint=False, ended_at=at(5))
    controls.resume(wf, None)
    assert wf.outbox == []


async def test_a_preflight_that_modified_tracked_files_fails_and_abandons_the_workflow() -> None:
    wf = executing(PLAN["pulses"])
    session_id = open_session(wf, "preflight")
    dirty = TrackedChanges(run_id="w", clean=False, files=[FileChange(path="README.md", change="modified")])
    event = turn(session_id, "block", tool="complete_preflight", summary="ready", setupCommands=[],
                 buildSuccess=True, baselinesRecorded=0)
    handle_turn(wf, "preflight", event, SETTINGS, tracked=dirty)
    assert wf.preflight is not None and wf.preflight.status == "failed"
    assert "README.md (modified)" in (wf.preflight.error or "")
    assert wf.abandoned is not None and "README.md" in wf.abandoned
    # The preflight session is closed, then the worktree removed.
    assert await next_step(wf) == ("close_session", ("preflight",))
    wf.session_closed(step="preflight", reason="abandoned")
    assert await next_step(wf) == ("remove_worktree", ())


def test_a_clean_preflight_completes() -> None:
    wf = executing(PLAN["pulses"])
    session_id = open_session(wf, "preflight")
    clean = TrackedChanges(run_id="w", clean=True, files=[])
    handle_turn(wf, "preflight", turn(session_id, "block", tool="complete_preflight", summary="ready",
                                      setupCommands=["make"], buildSuccess=True, baselinesRecorded=0),
                SETTINGS, tracked=clean)
    assert wf.preflight is not None and wf.preflight.status == "completed" and wf.abandoned is None


def test_each_session_is_closed_once_its_step_is_over() -> None:
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/x", base_branch="main",
                  branch=None, script=None)
    open_session(wf, "scoping")
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    assert sessions_to_close(wf) == []  # the user may still request changes
    wf.approve()
    assert sessions_to_close(wf) == ["scoping"]
    wf.session_closed(step="scoping", reason="approved")
    assert sessions_to_close(wf) == []
    open_session(wf, "research")
    wf.submit_artifact("research", card("research", RESEARCH))
    wf.approve()
    assert sessions_to_close(wf) == ["research"]

    wf, _ = pulse_running()
    wf.session_closed(step="preflight", reason="completed")
    assert sessions_to_close(wf) == []
    wf.accept_completion("pulse-1", description="feat: x", files_changed=[], unresolved_issues=[])
    assert sessions_to_close(wf) == []  # succeeded only once committed
    wf.pulse_ended(run_id="pulse-1", status="succeeded", commit="c" * 40, diff_artifact_id=None,
                   is_recovery_checkpoint=False, ended_at=at(9))
    assert sessions_to_close(wf) == ["pulse:pulse-1"]


def test_abandoning_closes_every_open_session() -> None:
    wf = executing(PLAN["pulses"])
    open_session(wf, "preflight")
    wf.abandon("preflight timed out")
    assert sessions_to_close(wf) == ["preflight"]


def test_a_finished_workflow_needs_driving_until_its_worktree_is_removed_and_its_sessions_are_closed() -> None:
    """What a restarted orchestrator picks up: a workflow that finished before the last process closed it out."""
    wf = executing(PLAN["pulses"])
    open_session(wf, "preflight")
    assert needs_driving(wf)
    wf.abandon("preflight timed out")
    assert needs_driving(wf)  # its preflight session is open and its worktree still there
    wf.worktree_removed_event()
    assert needs_driving(wf)  # the session still is open
    wf.session_closed(step="preflight", reason="abandoned")
    assert not needs_driving(wf)


def test_the_preflight_clock_counts_running_time_only() -> None:
    wf = executing(PLAN["pulses"])
    open_session(wf, "preflight", assigned=at(0))
    assert not preflight_overdue(wf, 60, T0 + timedelta(seconds=59))
    assert preflight_overdue(wf, 60, T0 + timedelta(seconds=60))
    wf.halt_for("questions", "which?", details={"step": "preflight"}, at=at(50))  # type: ignore[arg-type]  # details as recorded
    assert not preflight_overdue(wf, 60, T0 + timedelta(hours=5))  # halted: the clock stands still
    wf.resume(("questions",), "this one", at=at(3600))
    # 50 s before the halt count, the hour halted does not.
    assert not preflight_overdue(wf, 60, T0 + timedelta(seconds=3609))
    assert preflight_overdue(wf, 60, T0 + timedelta(seconds=3610))


def test_the_preflight_clock_of_a_session_recorded_before_the_clock_starts_at_its_assignment() -> None:
    # Replaying an old log rebuilds the session with the clock of today's ``SessionAssigned``: it runs from the
    # assignment, and halts recorded with no ``at`` do not stop it.
    wf = executing(PLAN["pulses"])
    open_session(wf, "preflight", assigned=at(0))
    wf._halted(stage=wf.stage, reason="questions", message="which?", pulse_id=None, details={"step": "preflight"},
               at=None)
    wf._resumed(stage=wf.stage, reason="questions", message=None, at=None, source=None)
    session = wf.sessions["preflight"]
    assert (session.running_since, session.ran_seconds) == (at(0), 0.0)
    assert preflight_overdue(wf, 60, T0 + timedelta(seconds=61))


def test_pulse_sessions_get_the_execution_notes_and_the_preflight_baselines() -> None:
    wf = executing(PLAN["pulses"])
    wf.take_note(session_id="pre", note="tests need PYTHONPATH=.", key="pre:1")
    base = {"issue_type": "Warning", "source": "Lint", "pattern": "W0611", "file_path": "a.py", "description": None}
    wf.record_baseline(base, key="pre:2")
    wf.record_baseline({**base, "pattern": ""}, key="pre:3")  # cannot be matched: left out
    assert session_notes(wf, "pulse:pulse-1") == ["tests need PYTHONPATH=."]
    assert session_notes(wf, "review") == []
    [baseline] = session_baselines(wf, "pulse:pulse-1")
    assert (baseline.issue_type, baseline.source, baseline.pattern, baseline.file_path) == (
        "Warning", "Lint", "W0611", "a.py")
    assert session_baselines(wf, "preflight") == []


QUESTIONS: list[dict[str, Any]] = [{"type": "single_select", "prompt": "Greeting?", "options": ["Hello, world!", "Hi"]},
             {"type": "free_text", "prompt": "Anything else?"}]


@pytest.mark.parametrize(("answers", "fragment"), [
    (["Hello, world!"], "got 1 answer"),
    (["Hello, world!", "no", "extra"], "got 3 answer"),
    (["Hello, world!", "   "], "answers[1] is blank"),
    (["Howdy", "no"], "answers[0] must be one of the options"),
])
def test_answers_that_do_not_fit_the_questions_are_refused_and_change_nothing(answers, fragment) -> None:
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/x", base_branch="main",
                  branch=None, script=None)
    open_session(wf, "scoping")
    wf.halt_for("questions", "asks", details={"step": "scoping", "questions": QUESTIONS})  # type: ignore[arg-type]  # as recorded
    wf.collect_events()
    with pytest.raises(LifecycleError) as refused:
        controls.answer_questions(wf, answers)
    assert refused.value.code == ErrorCode.BAD_REQUEST and fragment in refused.value.message
    assert wf.collect_events() == [] and wf.halt is not None and wf.outbox == []


def test_answers_that_fit_resume_the_agent() -> None:
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/x", base_branch="main",
                  branch=None, script=None)
    open_session(wf, "scoping")
    wf.halt_for("questions", "asks", details={"step": "scoping", "questions": QUESTIONS})  # type: ignore[arg-type]  # as recorded
    controls.answer_questions(wf, ["Hello, world!", "keep it short"])
    assert wf.halt is None and "A: keep it short" in wf.outbox[0].text


def _session(outputs: list[str]) -> SessionView:
    calls = [{"tool_use_id": f"t{n}", "name": "complete_pulse", "input": {}, "step": n, "output": out,
              "is_error": True} for n, out in enumerate(outputs)]
    return msgspec.convert({
        "session_id": "s", "role": "pulsing", "root": "/wt", "model": "m", "status": "idle", "usage": {},
        "cost_usd": 0, "notes": [], "created_at": T0.isoformat(),
        "turns": [{"turn_id": "t", "index": 0, "user_text": "go", "started_at": T0.isoformat(), "messages": [],
                   "tool_calls": calls, "thoughts": [], "usage": {}, "cost_usd": 0, "model_calls": 1}],
    }, SessionView)


def test_completion_refusals_are_read_from_the_rule_of_the_runners_json_result() -> None:
    session = _session([
        '{"error": "Completion rejected: 1 tool failure(s) are still unresolved", "rule": "completion_rejected"}',
        '{"error": "Rejected: complete_pulse must be the last content", "rule": "not_last"}',
        'completion_rejected: plain text is not the runner\'s refusal',
        '{"error": "Completion rejected ... complete_pulse now takes unresolvedIssues", '
        '"rule": "completion_rejected"}',
    ])
    found = completion_rejections(session)
    assert [(tid, revealed) for tid, _, revealed in found] == [("t0", False), ("t3", True)]
    assert found[0][1] == "Completion rejected: 1 tool failure(s) are still unresolved"


def test_a_pulse_run_names_its_worktree_and_kickoff_message() -> None:
    wf, _ = pulse_running()
    view = next(r for r in artifacts_of(wf).pulse_runs if r.id == "pulse-1")
    assert view.worktree_path == "/wt" and view.initiating_message_id == "turn-0-pulse:pulse-1"
