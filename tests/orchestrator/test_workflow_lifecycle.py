"""The workflow lifecycle over a real nats-server: stage verbs, approvals, the forwarded tool verbs, replay.

The tool verbs are driven twice: directly with the ``orchestrator_tools`` contracts (idempotency) and
through the real tools executor, so the replies are checked against what the tools service expects.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from autarch.contracts import orchestrator_tools as fx
from autarch.contracts import subjects
from autarch.contracts.agents import SubmitPlanArgs, SubmitResearchArgs, SubmitScopeArgs
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import AnyEvent
from autarch.contracts.workflows import (
    ApproveWorkflow,
    CreateWorkflow,
    FinishExecution,
    GetArtifacts,
    GetWorkflow,
    ReplayedWorkflow,
    ReplayWorkflow,
    RequestChanges,
    ReviewCard,
    SubmitPlan,
    SubmitResearch,
    SubmitScope,
    WorkflowArtifacts,
    WorkflowErrorCode,
    WorkflowView,
)
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.replay import replay_from_store
from autarch.services.orchestrator.service import start
from autarch.services.tools.service import build_executor
from tests.tools.helpers import Tools

SCOPE = SubmitScopeArgs(title="JWT", description="validate JWTs on every route", in_scope=["middleware"],
                        out_of_scope=["issuing"], recommended_path="full", constraints=["no new deps"])
RESEARCH = msgspec.convert({"summary": "auth lives in api/", "keyFiles": [{"path": "api/mw.py", "purpose": "auth"}],
                            "recommendations": ["reuse the middleware"]}, SubmitResearchArgs)
PLAN = msgspec.convert({"approachSummary": "two pulses", "pulses": [
    {"id": "pulse-1", "title": "middleware", "description": "d", "expectedChanges": ["api/mw.py"],
     "estimatedSize": "small"},
    {"id": "pulse-2", "title": "tests", "description": "d", "expectedChanges": ["tests/test_mw.py"],
     "estimatedSize": "medium", "dependsOn": ["pulse-1"]},
]}, SubmitPlanArgs)


@pytest.fixture
async def orchestrator(nc, data_dir) -> AsyncIterator[Settings]:
    settings = Settings(data_dir=str(data_dir), drive_workflows=False)
    stop = await start(nc, settings)
    yield settings
    await stop()


@pytest.fixture
async def tools(nc, tmp_path: Path) -> AsyncIterator[Tools]:
    """The real tools executor, forwarding to the real orchestrator over NATS."""
    root = tmp_path / "worktree"
    root.mkdir()
    executor = build_executor(Settings(data_dir=str(tmp_path / "tools-data"), request_timeout=5.0), nc=nc,
                              grep_workers=0)
    yield Tools(executor, root)
    executor.close()


async def ask(nc, verb: str, payload: Any, reply: type = WorkflowView) -> Any:
    return await request(nc, subjects.request("orchestrator", verb), payload, reply)


async def refused(nc, verb: str, payload: Any, code: str, reply: type = WorkflowView) -> RemoteError:
    with pytest.raises(RemoteError) as err:
        await ask(nc, verb, payload, reply)
    assert err.value.code == code, err.value.message
    return err.value


async def new_workflow(nc) -> str:
    wf = str(uuid.uuid4())
    await ask(nc, "create_workflow", CreateWorkflow(workflow_id=wf, title="JWT", request="add JWT", repo="/tmp/r"))
    return wf


async def stream_types(nc, workflow_id: str, expect: int) -> list[str]:
    sub = await nc.jetstream().subscribe(subjects.run_events(workflow_id), ordered_consumer=True,
                                         config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
    got: list[Any] = []
    try:
        while len(got) < expect:
            msg = await sub.next_msg(timeout=5)
            got.append(msgspec.json.decode(msg.data, type=AnyEvent))
    finally:
        await sub.unsubscribe()
    return [type(e).__struct_config__.tag for e in got]


async def test_full_path_with_tools_then_replay_equals_live_state(nc, orchestrator, tools):
    wf = await new_workflow(nc)
    assert await tools("take_note", {"note": "scoping thought"}, role="scoping", workflow_id=wf) == {"success": True}
    view = await ask(nc, "submit_scope", SubmitScope(workflow_id=wf, scope=SCOPE))
    assert (view.stage, view.awaiting_approval, view.artifact_stages) == ("scoping", True, ["scoping"])
    # The scope card is not "approved" yet: the review tool sees none.
    assert await tools("get_scope_card", {}, role="review", workflow_id=wf) == {"error": "Scope card not found"}
    view = await ask(nc, "approve", ApproveWorkflow(workflow_id=wf))
    assert (view.stage, view.path, view.awaiting_approval) == ("research", "full", False)
    await ask(nc, "submit_research", SubmitResearch(workflow_id=wf, research=RESEARCH))
    await ask(nc, "approve", ApproveWorkflow(workflow_id=wf))
    await ask(nc, "submit_plan", SubmitPlan(workflow_id=wf, plan=PLAN))
    view = await ask(nc, "approve", ApproveWorkflow(workflow_id=wf))
    assert (view.stage, view.pulses_count) == ("execution", 2)
    baseline = await tools("record_baseline", {"issueType": "warning", "source": "lint", "pattern": "unused import"},
                           role="preflight", workflow_id=wf)
    assert baseline["success"] is True and uuid.UUID(baseline["baselineId"])
    view = await ask(nc, "finish_execution", FinishExecution(workflow_id=wf))
    assert (view.stage, view.awaiting_approval) == ("review", False)
    scope = await tools("get_scope_card", {}, role="review", workflow_id=wf)
    assert scope == {"success": True, "title": "JWT", "description": SCOPE.description, "in_scope": ["middleware"],
                     "out_of_scope": ["issuing"], "constraints": ["no new deps"]}
    line = await tools("add_line_comment", {"file_path": "api/mw.py", "start_line": 3, "end_line": 5,
                                            "severity": "high", "category": "security", "description": "no expiry"},
                       role="review", workflow_id=wf)
    assert line["success"] is True and line["message"] == "Line comment added successfully"
    assert (await tools("add_file_comment", {"file_path": "api/mw.py", "severity": "Low", "category": "style",
                                             "description": "long"}, role="review", workflow_id=wf))["success"]
    assert (await tools("add_review_comment", {"severity": "Medium", "category": "tests", "description": "more"},
                        role="review", workflow_id=wf))["success"]
    done = await tools("complete_review", {"recommendation": "approve", "summary": "good"}, role="review",
                       workflow_id=wf)
    assert done == {"success": True, "recommendation": "approve", "message": "Review completed successfully"}
    view = await ask(nc, "get_workflow", GetWorkflow(workflow_id=wf))
    assert (view.awaiting_approval, view.review_comments_count, view.notes_count, view.baselines_count) == (
        True, 3, 1, 1)
    view = await ask(nc, "approve", ApproveWorkflow(workflow_id=wf))
    assert (view.stage, view.awaiting_approval) == ("done", False)

    cards = await ask(nc, "get_artifacts", GetArtifacts(workflow_id=wf), WorkflowArtifacts)
    assert (cards.scope, cards.research, cards.plan) == (SCOPE, RESEARCH, PLAN)
    assert [p.id for p in cards.pulses] == ["pulse-1", "pulse-2"] and cards.pulses[1].depends_on == ["pulse-1"]
    assert cards.review is not None and (cards.review.recommendation, cards.review.summary) == ("approve", "good")
    assert [c.kind for c in cards.review.comments] == ["line", "file", "review"]
    assert cards.review.comments[0].comment_id == line["comment_id"]
    assert (cards.review.comments[0].start_line, cards.review.comments[0].end_line) == (3, 5)
    assert [(n.stage, n.note) for n in cards.notes] == [("scoping", "scoping thought")]
    assert cards.baselines[0].baseline_id == baseline["baselineId"]

    types = await stream_types(nc, wf, expect=view.version)
    assert types == [
        "workflow:created", "workflow:note_taken", "workflow:approval_needed", "workflow:stage_changed",
        "workflow:approval_needed", "workflow:stage_changed", "workflow:approval_needed", "workflow:stage_changed",
        "workflow:baseline_recorded", "workflow:stage_changed", "workflow:review_comment_added",
        "workflow:review_comment_added", "workflow:review_comment_added", "workflow:approval_needed",
        "workflow:stage_changed", "workflow:completed",
    ]
    # Replay from the store alone (a fresh application, as `autarch replay` does) equals the live state.
    replayed = replay_from_store(orchestrator, wf)
    assert replayed.workflow == view and replayed.events_applied == view.version
    assert replayed.artifacts == cards
    over_nats = await ask(nc, "replay_workflow", ReplayWorkflow(workflow_id=wf), ReplayedWorkflow)
    assert over_nats.workflow == view
    at_review = await ask(nc, "replay_workflow", ReplayWorkflow(workflow_id=wf, at=10), ReplayedWorkflow)
    assert (at_review.workflow.stage, at_review.workflow.review_comments_count) == ("review", 0)
    assert at_review.artifacts is not None and at_review.artifacts.review == ReviewCard()
    assert [b.baseline_id for b in at_review.artifacts.baselines] == [baseline["baselineId"]]


async def test_state_and_cards_survive_a_restart(nc, data_dir):
    settings = Settings(data_dir=str(data_dir), drive_workflows=False)
    stop = await start(nc, settings)
    wf = await new_workflow(nc)
    await ask(nc, "submit_scope", SubmitScope(workflow_id=wf, scope=SCOPE))
    before = await ask(nc, "get_artifacts", GetArtifacts(workflow_id=wf), WorkflowArtifacts)
    view = await ask(nc, "get_workflow", GetWorkflow(workflow_id=wf))
    await stop()
    stop = await start(nc, settings)
    try:
        assert await ask(nc, "get_workflow", GetWorkflow(workflow_id=wf)) == view
        assert await ask(nc, "get_artifacts", GetArtifacts(workflow_id=wf), WorkflowArtifacts) == before
        assert (await ask(nc, "approve", ApproveWorkflow(workflow_id=wf))).stage == "research"
    finally:
        await stop()


async def test_quick_path_goes_from_scope_to_one_pulse_to_review(nc, orchestrator):
    wf = await new_workflow(nc)
    await ask(nc, "submit_scope", SubmitScope(workflow_id=wf, scope=SCOPE))  # recommends full
    view = await ask(nc, "approve", ApproveWorkflow(workflow_id=wf, path="quick"))
    assert (view.stage, view.path, view.pulses_count) == ("execution", "quick", 1)
    cards = await ask(nc, "get_artifacts", GetArtifacts(workflow_id=wf), WorkflowArtifacts)
    assert cards.research is None and cards.plan is None and cards.pulses[0].title == "JWT"
    assert (await ask(nc, "finish_execution", FinishExecution(workflow_id=wf))).stage == "review"
    # A repeated finish (the execution part retrying) changes nothing.
    again = await ask(nc, "finish_execution", FinishExecution(workflow_id=wf))
    assert (again.stage, again.version) == ("review", view.version + 1)
    await ask(nc, "complete_review", fx.CompleteReview(workflow_id=wf, session_id="s", idempotency_key="s:1",
                                                       recommendation="approve", summary="ok"), fx.ReviewCompleted)
    assert (await ask(nc, "approve", ApproveWorkflow(workflow_id=wf))).stage == "done"


async def test_request_changes_then_resubmit(nc, orchestrator):
    wf = await new_workflow(nc)
    await ask(nc, "submit_scope", SubmitScope(workflow_id=wf, scope=SCOPE))
    await refused(nc, "submit_scope", SubmitScope(workflow_id=wf, scope=SCOPE), WorkflowErrorCode.AWAITING_APPROVAL)
    view = await ask(nc, "request_changes", RequestChanges(workflow_id=wf, feedback="leave out the tests"))
    assert (view.stage, view.awaiting_approval, view.last_feedback) == ("scoping", False, "leave out the tests")
    await refused(nc, "request_changes", RequestChanges(workflow_id=wf, feedback="again"),
                  WorkflowErrorCode.NOT_AWAITING_APPROVAL)
    revised = msgspec.structs.replace(SCOPE, title="JWT, no tests")
    view = await ask(nc, "submit_scope", SubmitScope(workflow_id=wf, scope=revised))
    assert view.awaiting_approval and view.last_feedback is None
    cards = await ask(nc, "get_artifacts", GetArtifacts(workflow_id=wf), WorkflowArtifacts)
    assert cards.scope == revised and cards.feedback == [{"stage": "scoping", "feedback": "leave out the tests"}]
    assert (await ask(nc, "approve", ApproveWorkflow(workflow_id=wf))).stage == "research"


async def test_invalid_transitions_record_nothing(nc, orchestrator):
    wf = await new_workflow(nc)
    await refused(nc, "approve", ApproveWorkflow(workflow_id=wf), WorkflowErrorCode.NOT_AWAITING_APPROVAL)
    await refused(nc, "submit_plan", SubmitPlan(workflow_id=wf, plan=PLAN), WorkflowErrorCode.WRONG_STAGE)
    await refused(nc, "finish_execution", FinishExecution(workflow_id=wf), WorkflowErrorCode.WRONG_STAGE)
    missing = str(uuid.uuid4())
    for verb, payload in (("approve", ApproveWorkflow(workflow_id=missing)),
                          ("submit_scope", SubmitScope(workflow_id=missing, scope=SCOPE)),
                          ("get_artifacts", GetArtifacts(workflow_id=missing))):
        await refused(nc, verb, payload, ErrorCode.NOT_FOUND, WorkflowArtifacts)
    await ask(nc, "submit_scope", SubmitScope(workflow_id=wf, scope=SCOPE))
    await ask(nc, "approve", ApproveWorkflow(workflow_id=wf))
    await ask(nc, "submit_research", SubmitResearch(workflow_id=wf, research=RESEARCH))
    await refused(nc, "approve", ApproveWorkflow(workflow_id=wf, path="quick"), WorkflowErrorCode.WRONG_STAGE)
    await ask(nc, "approve", ApproveWorkflow(workflow_id=wf))
    cyclic = msgspec.convert({"approachSummary": "x", "pulses": [
        {"id": "a", "title": "a", "description": "", "expectedChanges": [], "estimatedSize": "small",
         "dependsOn": ["b"]},
        {"id": "b", "title": "b", "description": "", "expectedChanges": [], "estimatedSize": "small",
         "dependsOn": ["a"]},
    ]}, SubmitPlanArgs)
    err = await refused(nc, "submit_plan", SubmitPlan(workflow_id=wf, plan=cyclic), WorkflowErrorCode.INVALID_PLAN)
    assert err.reply.details["cycle"]
    dangling = msgspec.structs.replace(PLAN, pulses=[msgspec.structs.replace(PLAN.pulses[0], depends_on=["ghost"])])
    await refused(nc, "submit_plan", SubmitPlan(workflow_id=wf, plan=dangling), WorkflowErrorCode.INVALID_PLAN)
    view = await ask(nc, "get_workflow", GetWorkflow(workflow_id=wf))
    assert (view.stage, view.awaiting_approval, view.version) == ("planning", False, 5)


async def test_tool_verbs_are_idempotent_on_the_key_and_typed_when_refused(nc, orchestrator):
    wf = await new_workflow(nc)
    note = fx.TakeNote(run_id=wf, session_id="s", idempotency_key="s:n1", note="x")
    first = await ask(nc, "take_note", note, fx.NoteTaken)
    assert await ask(nc, "take_note", note, fx.NoteTaken) == first
    comment = fx.AddReviewComment(workflow_id=wf, session_id="s", idempotency_key="s:c1", kind="review",
                                  severity="Low", category="c", description="d")
    await refused(nc, "add_review_comment", comment, ErrorCode.NOT_FOUND, fx.ReviewCommentAdded)
    complete = fx.CompleteReview(workflow_id=wf, session_id="s", idempotency_key="s:r1", recommendation="approve",
                                 summary="s")
    await refused(nc, "complete_review", complete, ErrorCode.NOT_FOUND, fx.ReviewCompleted)
    await refused(nc, "get_scope_card", fx.GetScopeCard(workflow_id=wf), ErrorCode.NOT_FOUND, fx.ScopeCard)
    baseline = fx.RecordBaseline(workflow_id=wf, session_id="s", idempotency_key="s:b1", issue_type="Error",
                                 source="Build", pattern="E1")
    await refused(nc, "record_baseline", baseline, WorkflowErrorCode.WRONG_STAGE, fx.BaselineRecorded)
    # The tools service sends the workflow id it was given, which need not be a UUID.
    await refused(nc, "take_note", fx.TakeNote(run_id="wf-1", session_id="s", idempotency_key="k", note="x"),
                  ErrorCode.NOT_FOUND, fx.NoteTaken)
    await ask(nc, "submit_scope", SubmitScope(workflow_id=wf, scope=SCOPE, idempotency_key="s:scope"))
    await ask(nc, "approve", ApproveWorkflow(workflow_id=wf, path="quick"))
    first_b = await ask(nc, "record_baseline", baseline, fx.BaselineRecorded)
    assert await ask(nc, "record_baseline", baseline, fx.BaselineRecorded) == first_b
    await ask(nc, "finish_execution", FinishExecution(workflow_id=wf))
    first_c = await ask(nc, "add_review_comment", comment, fx.ReviewCommentAdded)
    assert await ask(nc, "add_review_comment", comment, fx.ReviewCommentAdded) == first_c
    await refused(nc, "add_review_comment", msgspec.structs.replace(comment, kind="line", idempotency_key="s:c2"),
                  ErrorCode.BAD_REQUEST, fx.ReviewCommentAdded)
    await ask(nc, "complete_review", complete, fx.ReviewCompleted)
    assert await ask(nc, "complete_review", complete, fx.ReviewCompleted) == fx.ReviewCompleted(
        recommendation="approve")
    # A late duplicate of the scope submission (after approval) is recognised, not refused.
    await ask(nc, "submit_scope", SubmitScope(workflow_id=wf, scope=SCOPE, idempotency_key="s:scope"))
    cards = await ask(nc, "get_artifacts", GetArtifacts(workflow_id=wf), WorkflowArtifacts)
    assert (len(cards.notes), len(cards.baselines), len(cards.review.comments)) == (1, 1, 1)
    view = await ask(nc, "get_workflow", GetWorkflow(workflow_id=wf))
    assert (view.stage, view.awaiting_approval) == ("review", True)


@pytest.mark.parametrize("verb", ["submit_scope", "submit_plan", "approve", "request_changes", "take_note",
                                  "record_baseline", "add_review_comment", "complete_review", "get_artifacts"])
@pytest.mark.parametrize("payload", [
    b"garbage",
    b"[]",
    b'{"workflow_id": "not-a-uuid"}',
    b'{"workflow_id": "00000000-0000-4000-8000-000000000000", "path": "sideways", "feedback": "",'
    b' "plan": {"pulses": []}, "scope": {"title": 5}}',
])
async def test_garbage_on_lifecycle_subjects_is_a_bad_request(nc, orchestrator, verb, payload):
    msg = await nc.request(subjects.request("orchestrator", verb), payload, timeout=2)
    # The last payload is a well-formed get_artifacts (unknown fields are ignored) of a missing workflow.
    well_formed = verb == "get_artifacts" and b"sideways" in payload
    assert msg.headers["Autarch-Error"] == (ErrorCode.NOT_FOUND if well_formed else ErrorCode.BAD_REQUEST)
