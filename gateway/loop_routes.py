"""Pulse Protocol loop sessions over HTTP, as seed 001 lists them (``/api/pulse``).

Bodies use the seed's camelCase (``projectName``, ``maxIterations``, …); replies are the orchestrator's
``LoopView`` / ``LoopList``. A session's events are on ``/api/events?workflow=<session id>`` with the usual
resume rules. Controls are not retried by the gateway: a lost reply followed by a second resume could let a
session run on past its next block.

The handlers keep the seed's ``pulse`` names: they are the operations of its ``/api/pulse`` API, and the OpenAPI
document's operation ids are made from them.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from litestar import Response, get, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody, QueryParameter

from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.contracts.git import GitErrorCode
from autarch.contracts.loops import (
    ITERATIONS_PER_VIEW,
    AbortLoop,
    AbortLoopBody,
    ForkLoop,
    ForkLoopBody,
    GetLoop,
    ListLoops,
    LoopErrorCode,
    LoopList,
    LoopStatus,
    LoopView,
    PauseLoop,
    ResumeLoop,
    ResumeLoopBody,
    StartLoop,
    StartLoopBody,
)
from autarch.runtime.errors import RemoteError

from .errors import STATUS_OF, error_response
from .orchestrator_client import ask_orchestrator
from .params import canonical_uuid, error_responses

__all__ = ["LOOP_ROUTES"]

_STATUS = {
    **STATUS_OF,
    **dict.fromkeys(LoopErrorCode.CONFLICTS, 409),
    LoopErrorCode.UNKNOWN_ANCHOR: 400,
    LoopErrorCode.NOT_A_REPOSITORY: 400,
    LoopErrorCode.MEMORY_UNAVAILABLE: 503,
    LoopErrorCode.ITERATION_OUT_OF_RANGE: 400,
    GitErrorCode.BASE_BRANCH_MISSING: 400,
    GitErrorCode.INVALID_BRANCH_NAME: 400,
    GitErrorCode.BRANCH_EXISTS: 409,
}
"""Loop codes: "not in this state" is 409; a start naming a bad repository, branch or anchor is 400."""

_START_RESPONSES = error_responses(400, 409)
_CONTROL_RESPONSES = error_responses(404, 409)


async def _ask(state: State, verb: str, payload: Any, reply_type: type, *, idempotent: bool) -> Any:
    try:
        return await ask_orchestrator(state, verb, payload, reply_type, idempotent=idempotent)
    except RemoteError as exc:
        return error_response(exc.reply, _STATUS.get(exc.code, 500))


def _not_found(given: str) -> Response[ErrorReply]:
    return error_response(ErrorReply(code=ErrorCode.NOT_FOUND, message=f"no loop session {given}"))


@post("/api/pulse/start", status_code=201, summary="Create a loop session and start its first iteration",
      tags=["pulse"], responses=_START_RESPONSES)
async def start_pulse(state: State, data: JSONBody[StartLoopBody]) -> LoopView | Response[ErrorReply]:
    """Body: ``projectName``, ``projectPath`` (the top of a git repository), ``goal``, ``maxIterations``
    (default 10), and optionally ``anchorTurnId``, ``branchName`` (default ``autarch/loop-<id>``),
    ``baseBranch`` (default: the repository's checked-out branch), ``contextStrategy``
    (``none``/``prefetch``/``mcp``/``hybrid``), ``notify`` (``[{"kind": "webhook", "url": …}]``; ``slack`` with
    ``url``, ``discord`` with ``url`` or ``discordThreadId``, ``telegram`` with ``chatId``, ``sms`` with
    ``phoneNumber``), ``maxTokens``, ``maxCostUsd``, ``createdBy`` (``telegram``/``sms``/``api``/``cli``/``mcp``)
    and ``sessionId`` (send the same one to retry a start safely). The session answered is ``pending``: its
    first iteration is being prepared.
    400 for a path that is not a repository, an unknown anchor or base branch, a bad branch name, a notify target
    without its address or an absurd ``maxIterations``; 409 when the branch exists or ``sessionId`` names a
    session with other fields."""
    session_id = data.session_id or str(uuid.uuid4())
    command = StartLoop(
        session_id=session_id, project_name=data.project_name, project_path=data.project_path, goal=data.goal,
        max_iterations=data.max_iterations, anchor_turn_id=data.anchor_turn_id, branch_name=data.branch_name,
        base_branch=data.base_branch, context_strategy=data.context_strategy, notify=list(data.notify),
        created_by=data.created_by, script=data.script, max_tokens=data.max_tokens, max_cost_usd=data.max_cost_usd)
    # Idempotent on the session id: retried while the orchestrator restarts, recorded once.
    return await _ask(state, "start_loop", command, LoopView, idempotent=True)


@get("/api/pulse/{session_id:str}", summary="A loop session with its iterations", tags=["pulse"],
     responses=error_responses(404))
async def get_pulse(
    session_id: FromPath[str],
    state: State,
    iterations_from: Annotated[int | None, QueryParameter(
        ge=1, description="The first iteration (its number) to include; default: the latest ones")] = None,
    iterations_limit: Annotated[int, QueryParameter(
        ge=1, le=1000, description="How many iterations to include")] = ITERATIONS_PER_VIEW,
) -> LoopView | Response[ErrorReply]:
    """The session (status, current iteration, last signal, progress log, commits, tokens) and its iterations
    (prompt, signal, output, commit, files, anchor, slice, tokens, cost): the latest 100 by default (a long
    session's every iteration would not fit one reply), ``?iterations_from=N&iterations_limit=M`` for others;
    ``iterations_total`` says how many there are."""
    sid = canonical_uuid(session_id)
    if sid is None:
        return _not_found(session_id)
    query = GetLoop(session_id=sid, iterations_from=iterations_from, iterations_limit=iterations_limit)
    return await _ask(state, "get_loop", query, LoopView, idempotent=True)


@get("/api/pulse", summary="List loop sessions", tags=["pulse"], responses=error_responses(400))
async def list_pulse(
    state: State,
    status: Annotated[LoopStatus | None, QueryParameter(description="Only sessions with this status")] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=10_000)] = 1000,
    offset: Annotated[int, QueryParameter(ge=0)] = 0,
) -> LoopList | Response[ErrorReply]:
    """Sessions in creation order, ``?status=running`` (or pending, complete, blocked, failed, aborted, paused)
    to keep one status."""
    return await _ask(state, "list_loops", ListLoops(status=status, limit=limit, offset=offset), LoopList,
                      idempotent=True)


@post("/api/pulse/{session_id:str}/pause", status_code=200, summary="Pause after the current iteration",
      tags=["pulse"], responses=_CONTROL_RESPONSES)
async def pause_pulse(session_id: FromPath[str], state: State) -> LoopView | Response[ErrorReply]:
    """The running iteration finishes and is recorded, then the session is ``paused`` (at once between
    iterations). 409 ``loop_not_running`` when the session is not running, ``loop_finished`` once it ended."""
    sid = canonical_uuid(session_id)
    if sid is None:
        return _not_found(session_id)
    return await _ask(state, "pause_loop", PauseLoop(session_id=sid), LoopView, idempotent=False)


@post("/api/pulse/{session_id:str}/resume", status_code=200, summary="Resume a blocked or paused session",
      tags=["pulse"], responses=_CONTROL_RESPONSES)
async def resume_pulse(
    session_id: FromPath[str], state: State, data: JSONBody[ResumeLoopBody | None] = None
) -> LoopView | Response[ErrorReply]:
    """Optional body ``{"message": "..."}``: shown to the next iteration (the API key you added, the decision
    it asked for). 409 ``loop_not_resumable`` unless blocked or paused, ``loop_finished`` once it ended."""
    sid = canonical_uuid(session_id)
    if sid is None:
        return _not_found(session_id)
    command = ResumeLoop(session_id=sid, message=data.message if data else None)
    return await _ask(state, "resume_loop", command, LoopView, idempotent=False)


@post("/api/pulse/{session_id:str}/abort", status_code=200, summary="Stop a session now", tags=["pulse"],
      responses=_CONTROL_RESPONSES)
async def abort_pulse(
    session_id: FromPath[str], state: State, data: JSONBody[AbortLoopBody | None] = None
) -> LoopView | Response[ErrorReply]:
    """The running turn is cancelled at once; its work is kept as a recovery commit on the iteration's pulse
    branch. Optional body ``{"reason": "..."}``. 409 ``loop_finished`` once the session ended."""
    sid = canonical_uuid(session_id)
    if sid is None:
        return _not_found(session_id)
    command = AbortLoop(session_id=sid, reason=data.reason) if data else AbortLoop(session_id=sid)
    return await _ask(state, "abort_loop", command, LoopView, idempotent=False)


@post("/api/pulse/{session_id:str}/fork", status_code=201,
      summary="Fork the session after one of its iterations into a new session that goes on from there",
      tags=["pulse"], responses=error_responses(400, 404, 409))
async def fork_pulse(
    session_id: FromPath[str], state: State, data: JSONBody[ForkLoopBody]
) -> LoopView | Response[ErrorReply]:
    """Body: ``atIteration`` (K), optionally ``branchName`` (default ``autarch/loop-<new id>``), ``sessionId``
    (send the same one to retry safely). The new session's history is this one's up to the end of iteration K;
    its branch is cut from the commit this session's branch had then, in a worktree of its own, and it goes on
    with iteration K+1, anchored on iteration K's hint (the chained anchor). ``forked_from`` and
    ``forked_at_iteration`` say where it came from; this session is never changed.
    404 for an unknown session; 400 ``iteration_out_of_range`` when iteration K has not ended or is the last the
    session allows, or for a bad branch name; 409 when the branch exists or ``sessionId`` names another session.
    A refused fork records nothing."""
    sid = canonical_uuid(session_id)
    if sid is None:
        return _not_found(session_id)
    command = ForkLoop(session_id=data.session_id or str(uuid.uuid4()), forked_from=sid,
                       at_iteration=data.at_iteration, branch_name=data.branch_name, script=data.script)
    return await _ask(state, "fork_loop", command, LoopView, idempotent=True)


LOOP_ROUTES = [start_pulse, get_pulse, list_pulse, pause_pulse, resume_pulse, abort_pulse, fork_pulse]
