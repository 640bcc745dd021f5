"""The driver's pure parts: which pulse runs next, what each step's agent is told, and the halt rules."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from autarch.contracts.execution import PulseStatus
from autarch.contracts.workflows import WorkflowErrorCode
from autarch.services.orchestrator.workflow import kickoffs
from autarch.services.orchestrator.workflow.driver import all_pulses_done, next_pulse, session_id_for
from autarch.services.orchestrator.workflow.lifecycle import LifecycleError, validate_plan
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.workflow.state import PulseRun

from .test_workflow_domain import PLAN, RESEARCH, SCOPE, card, pulse


def executing(pulses: list[dict[str, Any]]) -> Workflow:
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="JWT", request="validate JWTs", repo="/x", base_branch="main",
                  branch=None, script=None)
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    wf.approve()
    wf.submit_artifact("research", card("research", RESEARCH))
    wf.approve()
    wf.submit_artifact("planning", card("planning", {"approachSummary": "steps", "pulses": pulses}))
    wf.approve()
    wf.execution_prepared(branch="autarch/x", worktree_path="/wt", base_commit="0" * 40, repository_id="r" * 16)
    return wf


def run(wf: Workflow, planned: str, status: PulseStatus, attempt: int = 1) -> PulseRun:
    record: dict[str, Any] = {"id": planned if attempt == 1 else f"{planned}-a{attempt}", "planned_pulse_id": planned,
              "title": planned, "attempt": attempt, "status": "running", "session_id": "s", "pulse_branch": "b",
              "base_commit": "0" * 40, "completion_rejections": 0, "extensions": 0, "description": f"feat: {planned}",
              "files_changed": [], "unresolved_issues": [], "ending": None, "worktree_path": "/wt"}
    wf.pulse_started(run=record)
    if status != "running":
        wf.pulse_ended(run_id=record["id"], status=status, commit=None, diff_artifact_id=None,
                       is_recovery_checkpoint=False, ended_at="2026-11-22T00:00:00+00:00")
    return wf.run(record["id"])


def next_id(wf: Workflow) -> str | None:
    pulse = next_pulse(wf)
    return pulse.id if pulse is not None else None


def test_pulses_run_in_plan_order_and_wait_for_their_dependencies() -> None:
    wf = executing([pulse("a"), pulse("b", "c"), pulse("c", "a")])
    assert next_id(wf) == "a"
    run(wf, "a", "succeeded")
    assert next_id(wf) == "c"  # b needs c
    run(wf, "c", "succeeded")
    assert next_id(wf) == "b"
    run(wf, "b", "succeeded")
    assert next_pulse(wf) is None and all_pulses_done(wf)


def test_a_failed_pulse_is_the_next_to_run_again_and_blocks_its_dependants() -> None:
    wf = executing(PLAN["pulses"])
    run(wf, "pulse-1", "failed")
    assert next_id(wf) == "pulse-1" and not all_pulses_done(wf)


def test_session_ids_are_stable_per_step() -> None:
    wid = str(uuid.uuid4())
    assert session_id_for(wid, "research") == session_id_for(wid, "research")
    assert session_id_for(wid, "pulse:pulse-1") != session_id_for(wid, "pulse:pulse-1-a2")


def test_a_pulse_kickoff_carries_scope_plan_and_its_own_task_only() -> None:
    wf = executing(PLAN["pulses"])
    first = run(wf, "pulse-1", "succeeded")
    second = run(wf, "pulse-2", "running")
    text = kickoffs.kickoff("pulse", wf, second)
    assert "## Your pulse: pulse-2" in text and SCOPE["title"] in text and "## Plan approach\nsteps" in text
    assert f"- pulse-1: {first.description}" in text  # what is already on the branch, as one line
    assert "Your pulse: pulse-1" not in text


def test_resume_refuses_a_halt_that_needs_another_action_and_records_nothing() -> None:
    wf = executing(PLAN["pulses"])
    wf.halt_for("extension_requested", "more time", details={"step": "pulse:pulse-1"})  # type: ignore[arg-type]  # as recorded
    wf.collect_events()
    with pytest.raises(LifecycleError) as refused:
        wf.resume(("stopped", "error"), None)
    assert refused.value.code == WorkflowErrorCode.WRONG_HALT and wf.collect_events() == []
    assert wf.resume(("extension_requested",), None).reason == "extension_requested"
    assert wf.status == "active"
    with pytest.raises(LifecycleError) as again:
        wf.resume(("extension_requested",), None)
    assert again.value.code == WorkflowErrorCode.NOT_HALTED


def test_plan_pulse_ids_must_be_usable_as_branch_names() -> None:
    with pytest.raises(LifecycleError) as refused:
        validate_plan([pulse("pulse 1")])
    assert refused.value.code == WorkflowErrorCode.INVALID_PLAN
    with pytest.raises(LifecycleError):
        validate_plan([])


def test_changes_requested_are_queued_for_the_stage_session() -> None:
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/x", base_branch="main", branch=None,
                  script=None)
    wf.assign_session(step="scoping", session_id="s1", role="scoping", root="/x", kickoff="k", script=None, notes=[],
                      assigned_at="2026-11-22T00:00:00+00:00")
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    wf.request_changes("narrower, please")
    [message] = wf.outbox
    assert message.session_id == "s1" and "narrower, please" in message.text and not message.delivered
