"""Fix rounds: a change request at review that sends the review's comments back to execution as fix pulses.

The aggregate's rules (what is sent back, every refusal recording nothing, the round limit), which pulse runs
next while a round is open, what the fix pulses and the review after them are told, and the wire events.
"""

from __future__ import annotations

import uuid
from functools import reduce
from typing import Any

from autarch.contracts.events import PulseStarted, WorkflowChangesRequested, WorkflowFixRoundOpened
from autarch.contracts.workflows import WorkflowErrorCode
from autarch.services.orchestrator.workflow import kickoffs
from autarch.services.orchestrator.workflow.cards import artifacts_of
from autarch.services.orchestrator.workflow.driver import all_pulses_done, next_pulse
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.workflow.steps import fixing, step_over
from autarch.services.orchestrator.workflow.views import to_contract, view_of

from .test_workflow_domain import SCOPE, card, names, new, refused
from .test_workflow_driving import executing, run

PLAN: list[dict[str, Any]] = [{"id": "pulse-1", "title": "p1", "description": "d", "expectedChanges": ["a.py"],
         "estimatedSize": "small", "dependsOn": None},
        {"id": "pulse-2", "title": "p2", "description": "d", "expectedChanges": ["b.py"],
         "estimatedSize": "small", "dependsOn": ["pulse-1"]}]


def comment(description: str, file_path: str | None = None, line: int | None = None,
            severity: str = "Medium") -> dict[str, Any]:
    kind = "review" if file_path is None else ("line" if line is not None else "file")
    return {"kind": kind, "severity": severity, "category": "bug", "description": description,
            "file_path": file_path, "start_line": line, "end_line": line}


def reviewed(*comments: dict[str, Any], plan: list[dict[str, Any]] = PLAN) -> Workflow:
    """Both planned pulses committed, the review made ``comments`` and awaits approval."""
    wf = executing(plan)
    for pulse in plan:
        run(wf, pulse["id"], "succeeded")
    wf.assign_session(step="review", session_id="rs", role="review", root="/wt", kickoff="k", script=None,
                      notes=[], assigned_at="2026-11-22T00:00:00+00:00")
    wf.finish_execution()
    for n, fields in enumerate(comments):
        wf.add_review_comment(fields, key=f"c{n}")
    wf.submit_artifact("review", card("review", {"recommendation": "reject", "summary": "two problems"}))
    wf.collect_events()
    return wf


def fix_run(wf: Workflow, planned: str, status: str, attempt: int = 1) -> None:
    """A run of fix pulse ``planned`` (fix round 1), ended ``status`` unless running, as the driver records it."""
    run_id = planned if attempt == 1 else f"{planned}-a{attempt}"
    wf.pulse_started(run={"id": run_id, "planned_pulse_id": planned, "title": planned, "attempt": attempt,
                          "status": "running", "session_id": "s", "pulse_branch": "b", "base_commit": "0" * 40,
                          "description": f"fix: {planned}", "fix_round": 1})
    if status != "running":
        wf.pulse_ended(run_id=run_id, status=status, commit="c" * 40, diff_artifact_id=None,  # type: ignore[arg-type]  # status: one of the Literal's values, as the test names it
                       is_recovery_checkpoint=False, ended_at="2026-11-22T00:00:00+00:00")


def ids(wf: Workflow) -> list[str]:
    assert wf.review is not None
    return [c.comment_id for c in wf.review.comments]


def test_a_fix_round_groups_the_comments_by_file_and_goes_back_to_execution() -> None:
    wf = reviewed(comment("off by one", "a.py", 3), comment("no test", "b.py"), comment("name it", "a.py", 9),
                  comment("document the change"))
    a1, b, a9, general = ids(wf)
    fix_round = wf.request_fix("Fix them; keep the API", None, limit=3)
    assert names(wf) == ["ChangesRequested", "FixRoundOpened", "StageChanged"]
    assert (wf.stage, wf.status, wf.last_feedback) == ("execution", "active", "Fix them; keep the API")
    assert fix_round.round == 1 and fix_round.comment_ids == [a1, b, a9, general]
    # One pulse per file, in the order the review first named it, then the comments on no file.
    assert [(p.pulse_id, p.file_path, p.comment_ids) for p in fix_round.pulses] == [
        ("fix-1-1", "a.py", [a1, a9]), ("fix-1-2", "b.py", [b]), ("fix-1-3", None, [general])]
    assert fix_round.review.recommendation == "reject" and len(fix_round.review.comments) == 4
    assert [p.id for p in wf.pulses] == ["pulse-1", "pulse-2"]  # the plan is not redone
    assert wf.feedback[-1].feedback == "Fix them; keep the API"
    assert not step_over(wf, "review")  # the review's session stays open for the review after the fixes


def test_only_the_named_comments_are_sent_back() -> None:
    wf = reviewed(comment("off by one", "a.py", 3), comment("nit", "b.py", severity="Low"))
    a, b = ids(wf)
    fix_round = wf.request_fix("only the bug", [a, a], limit=3)
    assert fix_round.comment_ids == [a] and [p.comment_ids for p in fix_round.pulses] == [[a]]
    assert b not in fix_round.comment_ids


def test_the_fix_pulses_run_one_after_another_then_execution_is_done() -> None:
    wf = reviewed(comment("off by one", "a.py", 3), comment("no test", "b.py"))
    wf.request_fix("fix", None, limit=3)
    assert not all_pulses_done(wf)
    pulse = next_pulse(wf)
    assert pulse is not None and pulse.id == "fix-1-1" and pulse.expected_changes == ["a.py"]
    fix_run(wf, "fix-1-1", "failed")
    assert next_pulse(wf).id == "fix-1-1"  # a failed fix pulse runs again before the next one
    fix_run(wf, "fix-1-1", "succeeded", attempt=2)
    assert next_pulse(wf).id == "fix-1-2" and not all_pulses_done(wf)
    fix_run(wf, "fix-1-2", "succeeded")
    assert next_pulse(wf) is None and all_pulses_done(wf)
    assert view_of(wf).pulses_succeeded == 2  # of the plan's two; the fix pulses are the round's


def test_the_review_after_the_fixes_is_asked_again_with_what_changed_and_its_comments() -> None:
    wf = reviewed(comment("off by one", "a.py", 3), comment("nit", "b.py", severity="Low"))
    a, _ = ids(wf)
    wf.request_fix("Use a guard clause", [a], limit=3)
    record = {"id": "fix-1-1", "planned_pulse_id": "fix-1-1", "title": "t", "attempt": 1, "status": "running",
              "session_id": "s", "pulse_branch": "b", "base_commit": "0" * 40, "fix_round": 1}
    wf.pulse_started(run=record)
    wf.accept_completion("fix-1-1", description="fix(a): stop the off-by-one", files_changed=["a.py"],
                         unresolved_issues=[])
    wf.pulse_ended(run_id="fix-1-1", status="succeeded", commit="c" * 40, diff_artifact_id="d",
                   is_recovery_checkpoint=False, ended_at="2026-11-22T00:00:00+00:00")
    wf.collect_events()
    assert wf.finish_execution()
    assert names(wf) == ["StageChanged", "MessageQueued"]
    assert wf.stage == "review" and wf.review is not None and wf.review.comments == []  # a new card
    [message] = [m for m in wf.outbox if m.step == "review"]
    assert message.session_id == "rs"
    text = message.text
    assert "fix round 1" in text and "> Use a guard clause" in text
    assert "- fix-1-1 (commit cccccccccc): fix(a): stop the off-by-one — a.py" in text
    assert "[Medium · bug] a.py:3: off by one" in text  # sent back
    assert "did not send back" in text and "[Low · bug] b.py: nit" in text
    assert "complete_review" in text


def test_a_fix_pulse_kickoff_names_its_comments_the_feedback_and_the_other_pulses() -> None:
    wf = reviewed(comment("off by one", "a.py", 3), comment("no test", "b.py"))
    wf.request_fix("Keep the API as it is", None, limit=3)
    record = {"id": "fix-1-2", "planned_pulse_id": "fix-1-2", "title": "t", "attempt": 1, "status": "running",
              "session_id": "s", "pulse_branch": "b", "base_commit": "0" * 40, "fix_round": 1}
    wf.pulse_started(run=record)
    text = kickoffs.kickoff("pulse", wf, wf.run("fix-1-2"))
    assert "## Your pulse: fix-1-2 — Fix the review's comments on b.py" in text
    assert "- [Medium · bug] b.py: no test" in text and "off by one" not in text
    assert "> Keep the API as it is" in text
    assert "- fix-1-1: a.py" in text  # another pulse's file, left to it
    assert "- pulse-1: feat: pulse-1" in text  # what is on the branch already
    assert "fix(<scope>): …" in text


def test_refusals_record_nothing() -> None:
    wf = reviewed()
    refused(wf, WorkflowErrorCode.NO_REVIEW_COMMENTS, wf.request_fix, "fix", None, limit=3)
    wf = reviewed(comment("off by one", "a.py", 3))
    unknown = str(uuid.uuid4())
    err = refused(wf, WorkflowErrorCode.UNKNOWN_COMMENTS, wf.request_fix, "fix", [ids(wf)[0], unknown], limit=3)
    assert err.details["comment_ids"] == [unknown]
    refused(wf, WorkflowErrorCode.FIX_ROUNDS_EXHAUSTED, wf.request_fix, "fix", None, limit=0)
    wf.request_changes("look at c.py too")  # the review agent reviews again: nothing awaits approval now
    wf.collect_events()
    refused(wf, WorkflowErrorCode.NOT_AWAITING_APPROVAL, wf.request_fix, "fix", None, limit=3)
    planning = executing(PLAN)
    planning.collect_events()
    refused(planning, WorkflowErrorCode.NOT_AWAITING_APPROVAL, planning.request_fix, "fix", None, limit=3)
    scoping = new()
    scoping.submit_artifact("scoping", card("scoping", SCOPE))
    scoping.collect_events()
    refused(scoping, WorkflowErrorCode.WRONG_STAGE, scoping.request_fix, "fix", None, limit=3)


def test_the_round_limit_counts_every_fix_round_of_the_workflow() -> None:
    wf = reviewed(comment("off by one", "a.py", 3))
    wf.request_fix("fix", None, limit=2)
    fix_run(wf, "fix-1-1", "succeeded")
    wf.finish_execution()
    wf.add_review_comment(comment("still off by one", "a.py", 4), key="again")
    wf.submit_artifact("review", card("review", {"recommendation": "reject", "summary": "not yet"}))
    wf.collect_events()
    err = refused(wf, WorkflowErrorCode.FIX_ROUNDS_EXHAUSTED, wf.request_fix, "fix", None, limit=1)
    assert err.details == {"rounds": 1, "limit": 1}
    second = wf.request_fix("fix", None, limit=2)
    assert second.round == 2 and [p.pulse_id for p in second.pulses] == ["fix-2-1"]
    assert [r.round for r in wf.fix_rounds] == [1, 2]


def test_fix_pulse_ids_never_reuse_a_planned_or_earlier_id() -> None:
    plan = [{**PLAN[0], "id": "fix-1-1"}]
    wf = reviewed(comment("off by one", "a.py", 3), plan=plan)
    assert [p.pulse_id for p in wf.request_fix("fix", None, limit=3).pulses] == ["fix-1-1-2"]


def test_a_swarm_workflow_runs_its_fix_round_as_pulses() -> None:
    wf = reviewed(comment("off by one", "a.py", 3))
    wf.execution_mode = "swarm"
    wf.request_fix("fix", None, limit=3)
    assert fixing(wf) is not None and next_pulse(wf).id == "fix-1-1"


def test_the_wire_says_what_happened_and_old_change_requests_still_replay() -> None:
    wf = reviewed(comment("off by one", "a.py", 3))
    [cid] = ids(wf)
    wf.request_fix("fix it", None, limit=3)
    changed, opened, stage = [to_contract(e) for e in wf.collect_events()]  # type: ignore[arg-type]  # DomainEvents
    assert isinstance(changed, WorkflowChangesRequested) and changed.fix and changed.stage == "review"
    assert isinstance(opened, WorkflowFixRoundOpened)
    assert (opened.round, opened.feedback, opened.comment_ids) == (1, "fix it", [cid])
    assert [(p.pulse_id, p.file_path, p.comment_ids) for p in opened.pulses] == [("fix-1-1", "a.py", [cid])]
    assert (stage.from_stage, stage.to_stage) == ("review", "execution")
    wf.pulse_started(run={"id": "fix-1-1", "planned_pulse_id": "fix-1-1", "title": "t", "attempt": 1,
                          "status": "running", "base_commit": "0" * 40, "pulse_branch": "b", "fix_round": 1})
    [started] = [to_contract(e) for e in wf.collect_events()]  # type: ignore[arg-type]  # DomainEvents
    assert isinstance(started, PulseStarted) and started.fix_round == 1
    assert view_of(wf).fix_rounds == 1
    cards = artifacts_of(wf)
    assert [r.round for r in cards.fix_rounds] == [1]
    assert [(r.id, r.fix_round) for r in cards.pulse_runs][-1] == ("fix-1-1", 1)

    # A change request recorded before fix rounds existed carries no ``fix``: it replays, and is not a fix.
    old = Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/x", base_branch="main",
                   branch=None, script=None)
    old.submit_artifact("scoping", card("scoping", SCOPE))
    old.request_changes("narrower")
    events = old.collect_events()
    del events[-1].__dict__["fix"]
    rebuilt = reduce(lambda aggregate, e: e.mutate(aggregate), events, None)
    assert rebuilt is not None and rebuilt.last_feedback == "narrower" and rebuilt.fix_rounds == []
    assert to_contract(events[-1]).fix is False  # type: ignore[arg-type]  # a DomainEvent
