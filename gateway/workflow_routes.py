"""Workflow routes beyond create/list/get: approval, change requests, cards."""

from __future__ import annotations

import uuid
from typing import Any

from litestar import Response, get, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody

from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.contracts.workflows import (
    ApproveBody,
    ApproveWorkflow,
    ForkBody,
    ForkWorkflow,
    GetArtifacts,
    RequestChanges,
    RequestChangesBody,
    WorkflowArtifacts,
    WorkflowErrorCode,
    WorkflowView,
)
from autarch.runtime.errors import RemoteError

from .errors import STATUS_OF, error_response
from .input_rules import branch_name_problem
from .orchestrator_client import ask_orchestrator

__all__ = ["WORKFLOW_ROUTES", "lifecycle", "not_found", "workflow_id_of"]

_STATUS = {**STATUS_OF, WorkflowErrorCode.INVALID_PLAN: 400, WorkflowErrorCode.EVENT_OUT_OF_RANGE: 400,
           **dict.fromkeys(WorkflowErrorCode.CONFLICTS, 409)}
"""Lifecycle codes: "not in this state" is 409 whatever the precise code (the code says which)."""


def workflow_id_of(given: str) -> str | None:
    """The canonical workflow id, or None when ``given`` is not a UUID (answered 404)."""
    try:
        return str(uuid.UUID(given))
    except ValueError:
        return None


def not_found(given: str) -> Response[ErrorReply]:
    return error_response(ErrorReply(code=ErrorCode.NOT_FOUND, message=f"no workflow {given}"))


async def lifecycle(state: State, verb: str, payload: Any, reply_type: type, *, idempotent: bool) -> Any:
    """Ask the orchestrator; a typed error becomes its HTTP answer (conflicts 409, unknown codes 500)."""
    try:
        return await ask_orchestrator(state, verb, payload, reply_type, idempotent=idempotent)
    except RemoteError as exc:
        return error_response(exc.reply, _STATUS.get(exc.code, 500))


@post("/api/workflows/{workflow_id:str}/approve", status_code=200, summary="Approve the artifact awaiting approval",
      tags=["workflows"])
async def approve_workflow(
    workflow_id: FromPath[str], state: State, data: JSONBody[ApproveBody | None] = None
) -> WorkflowView | Response[ErrorReply]:
    """Move the workflow to its next stage. At scope approval, ``path`` chooses ``quick`` or ``full``
    (default: the scope card's ``recommended_path``). 409 when nothing awaits approval (``not_awaiting_approval``)
    or ``path`` is given at another stage (``wrong_stage``)."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    command = ApproveWorkflow(workflow_id=wf, path=data.path if data else None)
    # Not retried: a second approve after a lost reply would approve the next stage's card too.
    return await lifecycle(state, "approve", command, WorkflowView, idempotent=False)


@post("/api/workflows/{workflow_id:str}/request-changes", status_code=200,
      summary="Send the awaiting artifact back with feedback (at review, optionally the work itself)",
      tags=["workflows"])
async def request_changes(
    workflow_id: FromPath[str], state: State, data: JSONBody[RequestChangesBody]
) -> WorkflowView | Response[ErrorReply]:
    """Record the feedback; the stage's agent revises and resubmits its card.

    At review, ``fix`` sends the work back instead: the review card's comments (all of them, or the ids listed)
    become fix pulses in execution, one per file they name and one for the comments on no file, each one commit on
    the workflow branch; the review then runs again on the whole branch and its card awaits approval again
    (``workflow:changes_requested`` with ``fix: true``, ``workflow:fix_round_opened``, ``workflow:stage_changed``
    review → execution). Without ``fix`` the review agent reviews again with the feedback and the code is left
    as it is.

    409 ``not_awaiting_approval`` when nothing awaits approval; with ``fix``: ``wrong_stage`` outside review,
    ``no_review_comments`` when the card has none, ``unknown_comments`` for an id not on the card,
    ``fix_rounds_exhausted`` once ``review_fix_rounds`` fix rounds ran. A refused request changes nothing."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    command = RequestChanges(workflow_id=wf, feedback=data.feedback, fix=data.fix)
    return await lifecycle(state, "request_changes", command, WorkflowView, idempotent=False)


@get("/api/workflows/{workflow_id:str}/artifacts", summary="The workflow's cards, notes and baselines",
     tags=["workflows"])
async def get_artifacts(workflow_id: FromPath[str], state: State) -> WorkflowArtifacts | Response[ErrorReply]:
    """Scope, research, plan and review cards (the latest submission of each), pulses, notes, baselines."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    return await lifecycle(state, "get_artifacts", GetArtifacts(workflow_id=wf), WorkflowArtifacts,
                            idempotent=True)


@post("/api/workflows/{workflow_id:str}/fork", status_code=201,
      summary="Fork the workflow at one of its events into a new workflow that carries on from there",
      tags=["workflows"])
async def fork_workflow(
    workflow_id: FromPath[str], state: State, data: JSONBody[ForkBody]
) -> WorkflowView | Response[ErrorReply]:
    """Make a new workflow whose history is this one's first ``at`` events (its cards, approvals, pulses and
    commits up to there) and that goes on live from that point: a card that awaited approval there awaits it
    again, a step an agent was working on starts over with an agent of its own. When this workflow had a branch
    by then, the fork's branch is cut from the commit it had at that event, in a worktree of its own. This
    workflow is never changed. The new workflow's ``forked_from`` and ``forked_at`` say where it came from.

    404 for an unknown workflow; 400 ``event_out_of_range`` when ``at`` is past its ``version``; 409
    ``fork_unsupported`` inside a bead plan's swarm execution; 409 ``conflict`` for a ``fork_id`` that names
    another workflow. A refused fork records nothing."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    if data.branch is not None:
        problem = branch_name_problem(data.branch)
        if problem:
            return error_response(ErrorReply(code=ErrorCode.BAD_REQUEST, message=f"branch {data.branch!r} is not "
                                             f"a valid branch name: it {problem}", details={"field": "branch"}))
    command = ForkWorkflow(workflow_id=data.fork_id or str(uuid.uuid4()), forked_from=wf, at=data.at,
                           branch=data.branch, script=data.script)
    # Idempotent on the new id: a retry after a lost reply answers the fork it made.
    return await lifecycle(state, "fork_workflow", command, WorkflowView, idempotent=True)


WORKFLOW_ROUTES = [approve_workflow, request_changes, get_artifacts, fork_workflow]
