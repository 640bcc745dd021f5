"""The lifecycle verbs: stage artifacts, approval, and the tool commands the tools service forwards.

Each command runs under its workflow's lock (``WorkflowBook.change``): load, check, record, answer.
A refused command (``LifecycleError``) records nothing and answers a typed error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autarch.contracts import orchestrator_tools as fx
from autarch.contracts.errors import ErrorCode
from autarch.contracts.execution import AbandonWorkflow, AnswerQuestions, ApproveExtension, ResumeWorkflow, StopWorkflow
from autarch.contracts.workflows import (
    ApproveWorkflow,
    FinishExecution,
    ForkWorkflow,
    GetArtifacts,
    RequestChanges,
    SubmitPlan,
    SubmitResearch,
    SubmitScope,
    WorkflowArtifacts,
    WorkflowView,
)
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.micro import TypedService

from .cards import artifacts_of, scope_card_of
from .model import Workflow
from .state import ReviewVerdict, StageCard
from .views import view_of

if TYPE_CHECKING:
    from ..loop.book import LoopBook
    from .book import WorkflowBook
    from .driver import WorkflowDriver

__all__ = ["LIFECYCLE_VERBS", "register_lifecycle"]

LIFECYCLE_VERBS = (
    "submit_scope",
    "submit_research",
    "submit_plan",
    "approve",
    "request_changes",
    "finish_execution",
    "get_artifacts",
    "fork_workflow",
    *fx.ORCHESTRATOR_TOOL_VERBS,
    "stop_workflow",
    "resume_workflow",
    "abandon_workflow",
    "approve_extension",
    "answer_questions",
)


def register_lifecycle(service: TypedService, orch: WorkflowBook, controls: WorkflowDriver | None = None,
                       loops: LoopBook | None = None) -> None:
    """Add every lifecycle endpoint to ``service``.

    Args:
        orch: the workflows' book.
        controls: the driver the user's controls act through (None: this orchestrator records commands only,
            so the controls, which act on running agents, are ``unavailable``).
        loops: the loop sessions' book: a note from a loop iteration's agent is kept by its session.
    """

    def driver() -> WorkflowDriver:
        if controls is None:
            raise ServiceFailure(ErrorCode.UNAVAILABLE, "this orchestrator does not drive workflows")
        return controls

    async def submit(workflow_id: str, stage: str, card: StageCard, key: str | None) -> WorkflowView:
        workflow, _ = await orch.change(workflow_id, lambda wf: wf.submit_artifact(stage, card, key=key))
        return view_of(workflow)

    async def submit_scope(cmd: SubmitScope) -> WorkflowView:
        return await submit(cmd.workflow_id, "scoping", cmd.scope, cmd.idempotency_key)

    async def submit_research(cmd: SubmitResearch) -> WorkflowView:
        return await submit(cmd.workflow_id, "research", cmd.research, cmd.idempotency_key)

    async def submit_plan(cmd: SubmitPlan) -> WorkflowView:
        return await submit(cmd.workflow_id, "planning", cmd.plan, cmd.idempotency_key)

    async def approve(cmd: ApproveWorkflow) -> WorkflowView:
        workflow, _ = await orch.change(cmd.workflow_id, lambda wf: wf.approve(
            cmd.path, source=cmd.source, card_version=cmd.card_version))
        return view_of(workflow)

    async def request_changes(cmd: RequestChanges) -> WorkflowView:
        if cmd.fix is False:
            workflow, _ = await orch.change(cmd.workflow_id, lambda wf: wf.request_changes(
                cmd.feedback, source=cmd.source, card_version=cmd.card_version))
        else:
            chosen = None if cmd.fix is True else cmd.fix
            workflow, _ = await orch.change(cmd.workflow_id, lambda wf: wf.request_fix(
                cmd.feedback, chosen, limit=orch.review_fix_rounds))
        return view_of(workflow)

    async def finish_execution(cmd: FinishExecution) -> WorkflowView:
        workflow, _ = await orch.change(cmd.workflow_id, Workflow.finish_execution)
        return view_of(workflow)

    async def get_artifacts(query: GetArtifacts) -> WorkflowArtifacts:
        return artifacts_of(await orch.read(query.workflow_id))

    async def take_note(cmd: fx.TakeNote) -> fx.NoteTaken:
        if loops is not None and loops.is_loop(cmd.run_id):
            # A loop iteration's agent: the note is kept for the session's later iterations.
            _, note_id = await loops.change(cmd.run_id, lambda s: s.take_note(
                agent_session_id=cmd.session_id, note=cmd.note, key=cmd.idempotency_key))
            return fx.NoteTaken(note_id=note_id)
        _, note_id = await orch.change(
            cmd.run_id,
            lambda wf: wf.take_note(session_id=cmd.session_id, note=cmd.note, key=cmd.idempotency_key),
        )
        return fx.NoteTaken(note_id=note_id)

    async def record_baseline(cmd: fx.RecordBaseline) -> fx.BaselineRecorded:
        baseline = {"issue_type": cmd.issue_type, "source": cmd.source, "pattern": cmd.pattern,
                    "file_path": cmd.file_path, "description": cmd.description}
        _, baseline_id = await orch.change(
            cmd.workflow_id, lambda wf: wf.record_baseline(baseline, key=cmd.idempotency_key)
        )
        return fx.BaselineRecorded(baseline_id=baseline_id)

    async def get_scope_card(query: fx.GetScopeCard) -> fx.ScopeCard:
        card = scope_card_of(await orch.read(query.workflow_id))
        if card is None:
            raise ServiceFailure.not_found(f"workflow {query.workflow_id} has no approved scope card",
                                           workflow_id=query.workflow_id)
        return card

    async def add_review_comment(cmd: fx.AddReviewComment) -> fx.ReviewCommentAdded:
        if cmd.kind in ("line", "file") and not cmd.file_path:
            raise ServiceFailure.bad_request(f"a {cmd.kind} comment needs file_path", field="file_path")
        if cmd.kind == "line" and cmd.start_line is None:
            raise ServiceFailure.bad_request("a line comment needs start_line", field="start_line")
        comment = {"kind": cmd.kind, "severity": cmd.severity, "category": cmd.category,
                   "description": cmd.description, "file_path": cmd.file_path, "start_line": cmd.start_line,
                   "end_line": cmd.end_line}
        _, comment_id = await orch.change(
            cmd.workflow_id, lambda wf: wf.add_review_comment(comment, key=cmd.idempotency_key)
        )
        return fx.ReviewCommentAdded(comment_id=comment_id)

    async def complete_review(cmd: fx.CompleteReview) -> fx.ReviewCompleted:
        card = ReviewVerdict(recommendation=cmd.recommendation, summary=cmd.summary)
        await orch.change(cmd.workflow_id, lambda wf: wf.submit_artifact("review", card, key=cmd.idempotency_key))
        return fx.ReviewCompleted(recommendation=cmd.recommendation)

    async def stop_workflow(cmd: StopWorkflow) -> WorkflowView:
        return view_of(await driver().stop_workflow(cmd.workflow_id, cmd.reason))

    async def resume_workflow(cmd: ResumeWorkflow) -> WorkflowView:
        return view_of(await driver().resume_workflow(cmd.workflow_id, cmd.message, source=cmd.source,
                                                      halt_version=cmd.halt_version))

    async def abandon_workflow(cmd: AbandonWorkflow) -> WorkflowView:
        return view_of(await driver().abandon_workflow(cmd.workflow_id, cmd.version, cmd.reason, cmd.source))

    async def approve_extension(cmd: ApproveExtension) -> WorkflowView:
        return view_of(await driver().approve_extension(cmd.workflow_id, cmd.message))

    async def answer_questions(cmd: AnswerQuestions) -> WorkflowView:
        return view_of(await driver().answer_questions(cmd.workflow_id, cmd.answers))

    service.endpoint("stop_workflow", StopWorkflow, stop_workflow)
    service.endpoint("resume_workflow", ResumeWorkflow, resume_workflow)
    service.endpoint("abandon_workflow", AbandonWorkflow, abandon_workflow)
    service.endpoint("approve_extension", ApproveExtension, approve_extension)
    service.endpoint("answer_questions", AnswerQuestions, answer_questions)
    service.endpoint("submit_scope", SubmitScope, submit_scope)
    service.endpoint("submit_research", SubmitResearch, submit_research)
    service.endpoint("submit_plan", SubmitPlan, submit_plan)
    service.endpoint("approve", ApproveWorkflow, approve)
    service.endpoint("request_changes", RequestChanges, request_changes)
    service.endpoint("finish_execution", FinishExecution, finish_execution)
    service.endpoint("get_artifacts", GetArtifacts, get_artifacts)
    # A fork records a new workflow from the store alone; its driver cuts its branch (``forks.py``).
    service.endpoint("fork_workflow", ForkWorkflow, orch.fork_workflow)
    service.endpoint(fx.TAKE_NOTE_VERB, fx.TakeNote, take_note)
    service.endpoint(fx.RECORD_BASELINE_VERB, fx.RecordBaseline, record_baseline)
    service.endpoint(fx.GET_SCOPE_CARD_VERB, fx.GetScopeCard, get_scope_card)
    service.endpoint(fx.ADD_REVIEW_COMMENT_VERB, fx.AddReviewComment, add_review_comment)
    service.endpoint(fx.COMPLETE_REVIEW_VERB, fx.CompleteReview, complete_review)
