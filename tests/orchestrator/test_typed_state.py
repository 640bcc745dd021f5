"""The Workflow's state is typed; events recorded with the older dict payloads still replay into it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec

from autarch.contracts.agents import Question, UnresolvedIssue
from autarch.contracts.workflows import StageNote, WorkflowBaseline
from autarch.runtime.aggregates import project
from autarch.services.orchestrator.workflow.cards import artifacts_of
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.workflow.state import HaltDetails
from autarch.services.orchestrator.workflow.views import view_of


def new_workflow() -> Workflow:
    return Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/r", base_branch="main",
                    branch=None, script=None)


def test_halt_details_are_typed_and_reach_the_wire_unchanged():
    wf = new_workflow()
    wf.halt_for("questions", "the agent asks", details=HaltDetails(
        step="scoping", questions=[Question(type="single_select", prompt="Which?", options=["a", "b"])]))
    assert wf.halt is not None and wf.halt.step == "scoping" and wf.halt.details.questions[0].prompt == "Which?"
    assert view_of(wf).halt.details == {"step": "scoping",
                                        "questions": [{"type": "single_select", "prompt": "Which?",
                                                       "options": ["a", "b"]}]}


def test_a_halt_recorded_with_a_dict_payload_replays_typed():
    wf = new_workflow()
    # As earlier versions recorded them: the extension request's arguments spread into the details.
    wf._halted(stage="scoping", reason="extension_requested", message="more time", pulse_id=None,
               details={"step": "scoping", "reason": "More to do", "completed": ["Read"], "remaining": ["Edit"]},
               at=None)
    replayed = project(None, wf.collect_events())
    assert replayed.halt.details == HaltDetails(step="scoping", reason="More to do", completed=["Read"],
                                                remaining=["Edit"])
    assert view_of(replayed).halt.details == {"step": "scoping", "reason": "More to do", "completed": ["Read"],
                                              "remaining": ["Edit"]}


def test_unresolved_issues_are_typed_state_and_wire_dicts():
    wf = new_workflow()
    wf.pulse_started(run={"id": "pulse-1", "planned_pulse_id": "pulse-1", "title": "x", "attempt": 1,
                          "status": "running"})
    wf.accept_completion("pulse-1", description="fix: x", files_changed=["a"],
                         unresolved_issues=[UnresolvedIssue(issue="flaky", reason="network")])
    run = wf.run("pulse-1")
    assert run.unresolved_issues == [UnresolvedIssue(issue="flaky", reason="network")]
    events = wf.collect_events()
    accepted = next(e for e in events if isinstance(e, Workflow.PulseCompletionAccepted))
    assert accepted.unresolved_issues == [{"issue": "flaky", "reason": "network"}]
    assert msgspec.to_builtins(project(None, events).run("pulse-1").unresolved_issues) == \
        [{"issue": "flaky", "reason": "network"}]


def test_notes_and_baselines_recorded_as_dicts_replay_as_the_wire_types():
    wf = new_workflow()
    # As every version recorded them: the note's time an ISO string, the baseline the tool's payload.
    wf._note_taken(note_id="n1", stage="scoping", session_id="s1", note="uses pytest",
                   taken_at="2026-11-25T09:00:00+00:00", key="k1")
    wf._baseline_recorded(baseline={"baseline_id": "b1", "issue_type": "Warning", "source": "Lint",
                                    "pattern": "E501", "file_path": None, "description": None}, key="k2")
    replayed = project(None, wf.collect_events())
    assert replayed.notes == [StageNote(note_id="n1", stage="scoping", session_id="s1", note="uses pytest",
                                        taken_at=datetime(2026, 11, 25, 9, tzinfo=UTC))]
    assert replayed.baselines == [WorkflowBaseline(baseline_id="b1", issue_type="Warning", source="Lint",
                                                   pattern="E501")]
    artifacts = artifacts_of(replayed)
    assert artifacts.notes == replayed.notes and artifacts.notes[0] is not replayed.notes[0]
    assert artifacts.baselines == replayed.baselines
