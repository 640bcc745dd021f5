"""A workflow kept between commands (``latest.py``): a command's copy (``Workflow.copy_for_change``) never changes the
kept workflow, whatever the command records, and a chain of copies ends where the replay of their events on one
workflow ends."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from autarch.contracts.agents import UnresolvedIssue
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.workflow.state import HaltDetails

from .test_snapshots import state, workflow_history
from .test_workflow_domain import card

Step = Callable[[Workflow], Any]
AT = "2026-11-25T09:00:00+00:00"
LATER = "2026-11-25T09:05:00+00:00"


def _session(step: str) -> Step:
    return lambda w: w.assign_session(step=step, session_id=f"s-{step}", role="pulsing", root="/wt", kickoff="go",
                                      script=None, notes=["n"], assigned_at=AT)


def _run(run_id: str) -> Step:
    return lambda w: w.pulse_started(run={"id": run_id, "planned_pulse_id": run_id, "title": "x", "attempt": 1,
                                          "status": "running", "started_at": AT})


# What a driven execution records, beyond the stage history: sessions opened, confirmed, halted and resumed (the
# step's clock), turns handled, messages queued and delivered, runs rejected, extended, accepted, failed and ended.
DRIVING: list[Step] = [
    _session("pulse:p1"), lambda w: w.confirm_session(step="pulse:p1", kickoff_turn_id="k1"),
    _run("p1"), lambda w: w.queue_message("pulse:p1", "hello"), lambda w: w.message_delivered(message_id="pulse:p1#1"),
    lambda w: w.turn_handled(turn_id="t1", step="pulse:p1", outcome="tool"),
    lambda w: w.reject_completion("p1", ["tests fail"], False),
    lambda w: w.halt_for("extension_requested", "more time", pulse_id="p1",
                         details=HaltDetails(step="pulse:p1", reason="big"), at=AT),
    lambda w: w.resume(("extension_requested",), "go on", at=LATER),
    lambda w: w.extend_pulse("p1"),
    lambda w: w.accept_completion("p1", description="feat: p1", files_changed=["a.py"],
                                  unresolved_issues=[UnresolvedIssue(issue="flaky", reason="network")]),
    lambda w: w.pulse_ended(run_id="p1", status="succeeded", commit="c1", diff_artifact_id=None,
                            is_recovery_checkpoint=False, ended_at=LATER),
    lambda w: w.session_closed(step="pulse:p1", reason="done"),
    _session("pulse:p2"), _run("p2"), lambda w: w.end_pulse_as("p2", "failed", "broken"),
    lambda w: w.pulse_ended(run_id="p2", status="failed", commit=None, diff_artifact_id=None,
                            is_recovery_checkpoint=True, ended_at=LATER),
]

# The review: a comment, the card, changes asked without a fix round (the same card stays open), another comment.
REVIEW: list[Step] = [
    lambda w: w.add_review_comment({"kind": "line", "severity": "minor", "category": "style", "description": "one",
                                    "file_path": "a.py", "start_line": 1}, key="c1"),
    lambda w: w.submit_artifact("review", card("review", {"recommendation": "reject", "summary": "fix"})),
    lambda w: w.request_changes("look again"),
    lambda w: w.add_review_comment({"kind": "line", "severity": "major", "category": "bug", "description": "two",
                                    "file_path": "a.py", "start_line": 2}, key="c2"),
    lambda w: w.submit_artifact("review", card("review", {"recommendation": "reject", "summary": "fix both"})),
    lambda w: w.request_fix("fix them", None, limit=3),
]


def _steps() -> tuple[Workflow, list[Step]]:
    wf, history = workflow_history()
    execution = history.index(next(s for s in history if "finish_execution" in s.__code__.co_names))
    return wf, [*history[:execution], *DRIVING, history[execution], *REVIEW]


def test_a_commands_copy_leaves_the_kept_workflow_as_it_was() -> None:
    kept, steps = _steps()
    kept.collect_events()
    for step in steps:
        before = pickle.dumps(kept.__dict__)
        copy = kept.copy_for_change()
        step(copy)
        assert pickle.dumps(kept.__dict__) == before, f"a step changed the kept workflow: {step.__code__.co_names}"
        assert copy.version > kept.version
        copy.collect_events()
        kept = copy


def test_a_chain_of_copies_ends_as_the_replay_of_its_events_on_one_workflow() -> None:
    workflow, steps = _steps()
    events = list(workflow.collect_events())
    for step in steps:
        workflow = workflow.copy_for_change()
        step(workflow)
        events += workflow.collect_events()
    replayed: Workflow | None = None
    for recorded in events:
        replayed = recorded.mutate(replayed)
    assert replayed is not None
    assert state(workflow) == state(replayed)
    # The card the review completed and the open one stay one card while the review runs, as in one workflow.
    assert [c.description for c in workflow.fix_rounds[-1].review.comments] == ["one", "two"]
    assert workflow.artifacts.review == workflow.fix_rounds[-1].review
