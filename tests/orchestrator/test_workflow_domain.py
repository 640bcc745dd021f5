"""The Workflow aggregate's stage machine: every transition, every refused one (refused ones record nothing)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from autarch.contracts.agents import SubmitPlanArgs, SubmitResearchArgs, SubmitScopeArgs
from autarch.contracts.errors import ErrorCode
from autarch.contracts.workflows import ReviewCard, WorkflowErrorCode
from autarch.services.orchestrator.workflow.lifecycle import LifecycleError, validate_plan
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.workflow.state import ChangeRequest, ReviewVerdict, StageCard

SCOPE: dict[str, Any] = {"title": "JWT", "description": "validate JWTs", "in_scope": ["middleware"], "out_of_scope": [],
         "recommended_path": "full", "constraints": ["no new deps"], "rationale": None}
RESEARCH = {"summary": "auth is in api/", "keyFiles": [], "recommendations": ["reuse the middleware"]}


def pulse(pid: str, *deps: str) -> dict[str, Any]:
    return {"id": pid, "title": pid, "description": "d", "expectedChanges": ["a.py"], "estimatedSize": "small",
            "dependsOn": list(deps) or None}


PLAN: dict[str, Any] = {"approachSummary": "two steps", "pulses": [pulse("pulse-1"), pulse("pulse-2", "pulse-1")]}

_CARDS: dict[str, type[StageCard]] = {"scoping": SubmitScopeArgs, "research": SubmitResearchArgs,
                                      "planning": SubmitPlanArgs, "review": ReviewVerdict}


def card(stage: str, fields: dict[str, Any]) -> StageCard:
    """The typed card of ``stage`` from its wire fields (as an agent's tool call carries them)."""
    return msgspec.convert(fields, _CARDS[stage])


def new() -> Workflow:
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/x", base_branch="main",
                  branch=None, script=None)
    wf.collect_events()
    return wf


def names(wf: Workflow) -> list[str]:
    return [type(e).__name__ for e in wf.collect_events()]


def at(stage: str, *, path: str = "full") -> Workflow:
    """A workflow driven to the start of ``stage`` (nothing awaiting approval)."""
    wf = new()
    wf.submit_artifact("scoping", card("scoping", {**SCOPE, "recommended_path": path}))
    wf.approve()
    if path == "full":
        for name, fields in (("research", RESEARCH), ("planning", PLAN)):
            if wf.stage == stage:
                break
            wf.submit_artifact(name, card(name, fields))
            wf.approve()
    if stage in ("review", "done") and wf.stage == "execution":
        wf.finish_execution()
    if stage == "done":
        wf.submit_artifact("review", card("review", {"recommendation": "approve", "summary": "ok"}))
        wf.approve()
    assert wf.stage == stage
    wf.collect_events()
    return wf


def refused(wf: Workflow, code: str, fn, *args: Any, **kwargs: Any) -> LifecycleError:
    version = wf.version
    with pytest.raises(LifecycleError) as err:
        fn(*args, **kwargs)
    assert err.value.code == code
    assert wf.version == version and names(wf) == []
    return err.value


def test_full_path_through_every_stage():
    wf = new()
    cards = {"scoping": SCOPE, "research": RESEARCH, "planning": PLAN}
    for stage, following in (("scoping", "research"), ("research", "planning"), ("planning", "execution")):
        assert wf.submit_artifact(stage, card(stage, cards[stage]))
        stored = getattr(wf.artifacts, stage)
        assert wf.awaiting_approval and stored == card(stage, cards[stage])
        assert names(wf) == ["ArtifactSubmitted"]
        wf.approve()
        assert (wf.stage, wf.awaiting_approval) == (following, False)
        assert names(wf) == ["StageChanged"]
    assert wf.path == "full" and [p.id for p in wf.pulses] == ["pulse-1", "pulse-2"]
    assert wf.finish_execution()
    assert (wf.stage, wf.review) == ("review", ReviewCard(comments=[], recommendation=None, summary=None))
    wf.submit_artifact("review", card("review", {"recommendation": "approve", "summary": "fine"}))
    assert wf.awaiting_approval
    names(wf)
    wf.approve()
    assert (wf.stage, wf.awaiting_approval) == ("done", False)
    assert names(wf) == ["StageChanged", "Completed"]


@pytest.mark.parametrize(("recommended", "chosen", "expected"), [
    ("quick", None, "quick"), ("full", None, "full"), ("full", "quick", "quick"), ("quick", "full", "full"),
])
def test_scope_approval_chooses_the_path(recommended, chosen, expected):
    wf = new()
    wf.submit_artifact("scoping", card("scoping", {**SCOPE, "recommended_path": recommended}))
    wf.approve(chosen)
    assert wf.path == expected
    assert wf.stage == ("execution" if expected == "quick" else "research")


def test_quick_path_runs_one_pulse_made_from_the_scope():
    wf = at("execution", path="quick")
    assert [p.id for p in wf.pulses] == ["pulse-1"] and wf.pulses[0].title == "JWT"
    assert wf.artifacts.research is None and wf.artifacts.planning is None
    wf.finish_execution()
    assert wf.stage == "review"


def test_request_changes_records_feedback_and_allows_a_resubmission():
    wf = new()
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    names(wf)
    wf.request_changes("narrow it")
    assert names(wf) == ["ChangesRequested"]
    assert (wf.awaiting_approval, wf.last_feedback, wf.stage) == (False, "narrow it", "scoping")
    assert wf.feedback == [ChangeRequest(stage="scoping", feedback="narrow it")]
    wf.submit_artifact("scoping", card("scoping", {**SCOPE, "title": "JWT only"}))
    assert wf.last_feedback is None and wf.artifacts.scoping is not None and wf.artifacts.scoping.title == "JWT only"


def test_approve_or_request_changes_with_nothing_waiting_is_refused():
    for stage in ("scoping", "research", "planning", "execution", "review", "done"):
        wf = at(stage) if stage != "scoping" else new()
        refused(wf, WorkflowErrorCode.NOT_AWAITING_APPROVAL, wf.approve)
        refused(wf, WorkflowErrorCode.NOT_AWAITING_APPROVAL, wf.request_changes, "x")


def test_artifact_for_another_stage_is_refused():
    wf = new()
    refused(wf, WorkflowErrorCode.WRONG_STAGE, wf.submit_artifact, "research", card("research", RESEARCH))
    refused(wf, WorkflowErrorCode.WRONG_STAGE, wf.submit_artifact, "planning", card("planning", PLAN))
    refused(wf, WorkflowErrorCode.WRONG_STAGE, wf.submit_artifact, "execution", card("scoping", SCOPE))
    # The review card does not exist before review: the tools' "Review card not found".
    refused(wf, ErrorCode.NOT_FOUND, wf.submit_artifact, "review",
            card("review", {"recommendation": "approve", "summary": "s"}))
    wf = at("research")
    refused(wf, WorkflowErrorCode.WRONG_STAGE, wf.submit_artifact, "scoping", card("scoping", SCOPE))
    wf = at("done")
    refused(wf, WorkflowErrorCode.WRONG_STAGE, wf.submit_artifact, "planning", card("planning", PLAN))


def test_resubmitting_while_awaiting_approval_is_refused():
    wf = new()
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    names(wf)
    refused(wf, WorkflowErrorCode.AWAITING_APPROVAL, wf.submit_artifact, "scoping", card("scoping", SCOPE))


def test_path_only_at_scope_approval():
    wf = at("research")
    wf.submit_artifact("research", card("research", RESEARCH))
    names(wf)
    refused(wf, WorkflowErrorCode.WRONG_STAGE, wf.approve, "quick")


def test_finish_execution_only_from_execution_and_idempotent_after():
    for stage in ("scoping", "research", "planning"):
        wf = at(stage) if stage != "scoping" else new()
        refused(wf, WorkflowErrorCode.WRONG_STAGE, wf.finish_execution)
    wf = at("review")
    assert wf.finish_execution() is False and names(wf) == []


@pytest.mark.parametrize(("pulses", "fragment"), [
    ([pulse("a"), pulse("a")], "duplicate"),
    ([pulse("a", "ghost")], "unknown"),
    ([pulse("a", "a")], "cycle"),
    ([pulse("a", "c"), pulse("b", "a"), pulse("c", "b")], "cycle"),
])
def test_invalid_plans_are_refused(pulses, fragment):
    wf = at("planning")
    err = refused(wf, WorkflowErrorCode.INVALID_PLAN, wf.submit_artifact, "planning",
                  card("planning", {"approachSummary": "x", "pulses": pulses}))
    assert fragment in err.message


def test_a_diamond_plan_is_valid():
    validate_plan([pulse("a"), pulse("b", "a"), pulse("c", "a"), pulse("d", "b", "c")])


def test_notes_are_per_stage_and_idempotent_on_the_key():
    wf = new()
    first = wf.take_note(session_id="s", note="one", key="s:1")
    assert wf.take_note(session_id="s", note="one", key="s:1") == first
    assert names(wf) == ["NoteTaken"]
    wf = at("research")
    wf.take_note(session_id="s", note="two", key="s:2")
    assert [(n.stage, n.note) for n in wf.notes] == [("research", "two")]


def test_baselines_only_during_execution_and_idempotent():
    wf = at("planning")
    refused(wf, WorkflowErrorCode.WRONG_STAGE, wf.record_baseline, {"pattern": "x"}, key="k")
    wf = at("execution")
    base = {"issue_type": "Error", "source": "Build", "pattern": "TS2304", "file_path": None, "description": None}
    bid = wf.record_baseline(base, key="k")
    assert wf.record_baseline(base, key="k") == bid
    assert names(wf) == ["BaselineRecorded"] and wf.baselines[0].baseline_id == bid


def test_review_comments_need_an_open_review_card():
    comment = {"kind": "review", "severity": "Low", "category": "style", "description": "d", "file_path": None,
               "start_line": None, "end_line": None}
    wf = at("execution")
    refused(wf, ErrorCode.NOT_FOUND, wf.add_review_comment, comment, key="k")
    wf = at("review")
    cid = wf.add_review_comment(comment, key="k")
    assert wf.add_review_comment(comment, key="k") == cid
    assert names(wf) == ["ReviewCommentAdded"]
    verdict = card("review", {"recommendation": "reject", "summary": "no"})
    assert wf.submit_artifact("review", verdict, key="done")
    assert wf.submit_artifact("review", verdict, key="done") is False
    names(wf)
    refused(wf, WorkflowErrorCode.AWAITING_APPROVAL, wf.add_review_comment, comment, key="k2")
    wf.request_changes("look again")
    wf.add_review_comment(comment, key="k3")
    assert wf.review is not None and len(wf.review.comments) == 2


def test_scope_card_is_given_only_once_approved():
    wf = new()
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    assert wf.approved_scope() is None
    wf.approve()
    assert wf.approved_scope() == msgspec.convert(SCOPE, SubmitScopeArgs)


def test_an_answer_naming_its_card_is_refused_once_that_card_moved_on() -> None:
    """What an action link relies on: ``card_version`` is the version the card was recorded at."""
    wf = new()
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    first = wf.version
    assert wf.card_version == first
    wf.collect_events()
    wf.request_changes("narrower", source="telegram", card_version=first)
    recorded: Sequence[Any] = wf.collect_events()
    (sent_back,) = recorded
    assert (sent_back.source, sent_back.stage) == ("telegram", "scoping")
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    second = wf.version
    wf.collect_events()
    for answer in (lambda: wf.approve(card_version=first),  # the card it names was sent back and replaced
                   lambda: wf.request_changes("again", card_version=first)):
        with pytest.raises(LifecycleError) as refused:
            answer()
        assert refused.value.code == WorkflowErrorCode.CARD_MOVED_ON
        assert names(wf) == [] and wf.awaiting_approval
    wf.approve(source="slack", card_version=second)
    moved: Any = next(e for e in wf.collect_events() if type(e).__name__ == "StageChanged")
    assert (moved.from_stage, moved.to_stage, moved.source) == ("scoping", "research", "slack")
    with pytest.raises(LifecycleError) as refused:
        wf.approve(card_version=second)  # answered already
    assert refused.value.code == WorkflowErrorCode.CARD_MOVED_ON


def test_a_resume_or_stop_naming_its_halt_is_refused_once_that_halt_is_over() -> None:
    """What a halt's action links rely on: ``halt_version`` is the version the halt was recorded at."""
    from autarch.contracts.execution import RESUMABLE
    from autarch.services.orchestrator.workflow import controls

    wf = new()
    wf.halt_for("error", "the scoping agent failed")
    first = wf.version
    assert wf.halt_version == first
    wf.collect_events()
    controls.resume(wf, None, source="telegram", halt_version=first)
    recorded: Sequence[Any] = wf.collect_events()
    (resumed,) = recorded
    assert (resumed.source, wf.halt) == ("telegram", None)
    wf.halt_for("error", "failed again")
    second = wf.version
    wf.collect_events()
    for answer in (lambda: controls.resume(wf, None, halt_version=first),  # resumed, then halted again
                   lambda: controls.abandon_waiting(wf, first, "stopped from slack", "slack")):
        with pytest.raises(LifecycleError) as refused:
            answer()
        assert refused.value.code == WorkflowErrorCode.CARD_MOVED_ON
        assert names(wf) == [] and wf.halt is not None and not wf.abandoned
    assert wf.resume(RESUMABLE, None, halt_version=second).reason == "error"


def test_stop_on_a_card_abandons_the_workflow_and_its_card_takes_no_answer() -> None:
    from autarch.services.orchestrator.workflow import controls

    wf = new()
    wf.submit_artifact("scoping", card("scoping", SCOPE))
    version = wf.version
    wf.collect_events()
    with pytest.raises(LifecycleError) as refused:
        controls.abandon_waiting(wf, version - 1, "stopped from slack", "slack")  # not the card that waits
    assert refused.value.code == WorkflowErrorCode.CARD_MOVED_ON and names(wf) == []
    controls.abandon_waiting(wf, version, "stopped from telegram", "telegram")
    recorded: Sequence[Any] = wf.collect_events()
    (ended,) = recorded
    assert (type(ended).__name__, ended.source, ended.reason, wf.status, wf.awaiting_approval) == (
        "Abandoned", "telegram", "stopped from telegram", "abandoned", False)
    for answer in (lambda: wf.approve(card_version=version), lambda: wf.request_changes("x"),
                   lambda: controls.abandon_waiting(wf, version, "again", "slack")):
        with pytest.raises(LifecycleError) as refused:
            answer()
        assert refused.value.code == WorkflowErrorCode.FINISHED
    assert names(wf) == []
