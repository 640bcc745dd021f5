"""The user's controls of a running workflow: stop, resume, approve an extension, answer questions, abandon.

Each is a command to the orchestrator (``stop_workflow``, ``resume_workflow``, ``approve_extension``,
``answer_questions``, ``abandon_workflow``) answered with the workflow. None is retried by the gateway: a lost
reply followed by a second resume could let the workflow go on past the next halt too. A workflow in the wrong state
for the command is a 409 whose ``code`` says why: ``not_running`` (stop while no agent works),
``not_halted`` (nothing to resume), ``wrong_halt`` (halted for another reason: resume while questions
wait for answers), ``finished`` (the workflow is done or abandoned).
"""

from __future__ import annotations

from litestar import Response, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody

from autarch.contracts.errors import ErrorReply
from autarch.contracts.execution import (
    AbandonBody,
    AbandonWorkflow,
    AnswerQuestions,
    AnswerQuestionsBody,
    ApproveExtension,
    ApproveExtensionBody,
    ResumeBody,
    ResumeWorkflow,
    StopBody,
    StopWorkflow,
)
from autarch.contracts.workflows import WorkflowView

from .params import error_responses
from .workflow_routes import lifecycle, not_found, workflow_id_of

__all__ = ["CONTROL_ROUTES"]

_RESPONSES = error_responses(400, 404, 409)


@post("/api/workflows/{workflow_id:str}/stop", status_code=200, summary="Stop the running agent and halt",
      tags=["workflows"], responses=_RESPONSES)
async def stop_workflow(
    workflow_id: FromPath[str], state: State, data: JSONBody[StopBody | None] = None
) -> WorkflowView | Response[ErrorReply]:
    """Stop whatever agent works for the workflow; the workflow halts with reason ``stopped``
    (``workflow:halted``). A running pulse ends ``stopped`` with a recovery checkpoint of its changes. A swarm
    (bead plan) stops every worker at once: their turns are cancelled and their sessions closed, their leases
    released, and each bead in progress reopened (``bead:reopened``, reason ``stopped: …``); a bead already
    verified or committed is left to land on resume, so nothing is half-merged.
    Optional body ``{"reason": "..."}`` (default ``stopped by user``). Continue with ``/resume``.
    409 ``not_running`` when no agent works (awaiting approval, already halted), ``finished`` when the
    workflow is done or abandoned."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    command = StopWorkflow(workflow_id=wf, reason=data.reason) if data else StopWorkflow(workflow_id=wf)
    return await lifecycle(state, "stop_workflow", command, WorkflowView, idempotent=False)


@post("/api/workflows/{workflow_id:str}/resume", status_code=200, summary="Continue a halted workflow",
      tags=["workflows"], responses=_RESPONSES)
async def resume_workflow(
    workflow_id: FromPath[str], state: State, data: JSONBody[ResumeBody | None] = None
) -> WorkflowView | Response[ErrorReply]:
    """Continue a workflow halted for ``unresolved_issues``, ``pulse_failed``, ``stopped`` or ``error``
    (``workflow:resumed``). Optional body ``{"message": "..."}``: guidance handed to the agent that continues.
    409 ``not_halted`` when the workflow is not halted; ``wrong_halt`` when it waits for an extension approval
    or answers (continue it with ``/extension/approve`` or ``/answers``); ``finished`` once done or abandoned."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    command = ResumeWorkflow(workflow_id=wf, message=data.message if data else None)
    return await lifecycle(state, "resume_workflow", command, WorkflowView, idempotent=False)


@post("/api/workflows/{workflow_id:str}/extension/approve", status_code=200,
      summary="Let the agent that asked for more time continue", tags=["workflows"], responses=_RESPONSES)
async def approve_extension(
    workflow_id: FromPath[str], state: State, data: JSONBody[ApproveExtensionBody | None] = None
) -> WorkflowView | Response[ErrorReply]:
    """The agent called ``request_extension`` and the workflow halted with reason ``extension_requested``;
    this lets it continue in a new turn. Optional body ``{"message": "..."}``. 409 ``not_halted`` or
    ``wrong_halt`` when no extension request is waiting."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    command = ApproveExtension(workflow_id=wf, message=data.message if data else None)
    return await lifecycle(state, "approve_extension", command, WorkflowView, idempotent=False)


@post("/api/workflows/{workflow_id:str}/answers", status_code=200, summary="Answer the agent's questions",
      tags=["workflows"], responses=_RESPONSES)
async def answer_questions(
    workflow_id: FromPath[str], state: State, data: JSONBody[AnswerQuestionsBody]
) -> WorkflowView | Response[ErrorReply]:
    """The agent called ``ask_questions`` and the workflow halted with reason ``questions`` (the questions
    are in ``halt.details``). Body ``{"answers": ["...", ...]}``: one non-empty answer per question, in the
    order asked (for a choice, the option's text). 409 ``not_halted`` or ``wrong_halt`` when no questions
    are waiting."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    command = AnswerQuestions(workflow_id=wf, answers=list(data.answers))
    return await lifecycle(state, "answer_questions", command, WorkflowView, idempotent=False)


@post("/api/workflows/{workflow_id:str}/abandon", status_code=200,
      summary="End a workflow that waits for the user, for good", tags=["workflows"], responses=_RESPONSES)
async def abandon_workflow(workflow_id: FromPath[str], state: State,
                           data: JSONBody[AbandonBody]) -> WorkflowView | Response[ErrorReply]:
    """End a workflow waiting at a card or a halt (``workflow:abandoned``, final): its agent sessions are closed
    and its worktree removed; its branch stays. Body ``{"version": n, "reason"?}``: ``n`` names where it waits
    (the card's ``card_version``, or the halt's ``version``), so a decision taken on an old card does not end a
    workflow that moved on (409 ``card_moved_on``). The Stop of an action link does the same. 409 ``finished``
    once done or abandoned."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    command = AbandonWorkflow(workflow_id=wf, version=data.version, reason=data.reason)
    return await lifecycle(state, "abandon_workflow", command, WorkflowView, idempotent=False)


CONTROL_ROUTES = [stop_workflow, resume_workflow, approve_extension, answer_questions, abandon_workflow]
