"""Beads over HTTP (``/api/beads``): an epic's graph, its ranked ready work, its swarm; people's edits.

The epic id is the workflow id of a bead plan's workflow; it exists once execution starts (404
``no_epic`` before). Replies are the orchestrator's ``BeadList``, ``ReadyList``, ``SwarmView`` and
``BeadView``. Changes are not retried by the gateway: a lost reply followed by a second create could make
two beads.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from litestar import Response, get, patch, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody, QueryParameter

from autarch.contracts.beads import (
    BEAD_ID,
    AddDependency,
    AddDependencyBody,
    BeadErrorCode,
    BeadList,
    BeadStatus,
    BeadView,
    CloseBead,
    CloseBeadBody,
    CreateBead,
    CreateBeadBody,
    EditBead,
    EditBeadBody,
    EvidenceList,
    GetBead,
    GetEvidence,
    GetHandoffs,
    GetSwarm,
    HandoffManifest,
    ListBeads,
    ReadyBeads,
    ReadyList,
    SwarmView,
)
from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.runtime.errors import RemoteError

from .errors import STATUS_OF, error_response
from .orchestrator_client import ask_orchestrator
from .params import canonical_uuid, error_responses

__all__ = ["BEAD_ROUTES"]

_STATUS = {
    **STATUS_OF,
    BeadErrorCode.NO_EPIC: 404,
    BeadErrorCode.DUPLICATE_BEAD: 409,
    BeadErrorCode.CYCLE: 409,
    BeadErrorCode.NOT_CLOSABLE: 409,
    BeadErrorCode.NOT_EDITABLE: 409,
}
"""A missing epic is 404; a change the graph refuses in its current state is 409."""

_QUERY = error_responses(400, 404)
_CHANGE = error_responses(400, 404, 409)


async def _ask(state: State, verb: str, payload: Any, reply_type: type, *, idempotent: bool) -> Any:
    try:
        return await ask_orchestrator(state, verb, payload, reply_type, idempotent=idempotent)
    except RemoteError as exc:
        return error_response(exc.reply, _STATUS.get(exc.code, 500))


def _no_epic(given: str) -> Response[ErrorReply]:
    return error_response(ErrorReply(code=ErrorCode.NOT_FOUND, message=f"no epic {given}: an epic id is a "
                                     "workflow id"))


EpicParam = Annotated[str, QueryParameter(description="The epic: the workflow id of a bead plan's workflow")]


@get("/api/beads", summary="An epic's beads", tags=["beads"], responses=_QUERY)
async def list_beads(state: State, epic_id: EpicParam,
                     status: Annotated[BeadStatus | None, QueryParameter(description="Only this status")] = None,
                     ) -> BeadList | Response[ErrorReply]:
    """Every bead of the epic (``?status=open`` … to keep one status) and the critical path of what is left."""
    epic = canonical_uuid(epic_id)
    if epic is None:
        return _no_epic(epic_id)
    return await _ask(state, "list_beads", ListBeads(epic_id=epic, status=status), BeadList, idempotent=True)


@get("/api/beads/ready", summary="Ready beads, ranked by impact", tags=["beads"], responses=_QUERY)
async def ready_beads(state: State, epic_id: EpicParam) -> ReadyList | Response[ErrorReply]:
    """Open beads whose blockers are all closed, highest impact first (PageRank, betweenness, blocker ratio,
    staleness, priority, critical path), each with the parts of its score."""
    epic = canonical_uuid(epic_id)
    if epic is None:
        return _no_epic(epic_id)
    return await _ask(state, "ready_beads", ReadyBeads(epic_id=epic), ReadyList, idempotent=True)


@get("/api/beads/swarm", summary="The epic's workers, leases and merge order", tags=["beads"], responses=_QUERY)
async def get_swarm(state: State, epic_id: EpicParam) -> SwarmView | Response[ErrorReply]:
    """Mode, workers (nickname, name, status, bead, session, worktree), the live file leases, the beads and
    the order their commits landed in."""
    epic = canonical_uuid(epic_id)
    if epic is None:
        return _no_epic(epic_id)
    return await _ask(state, "get_swarm", GetSwarm(epic_id=epic), SwarmView, idempotent=True)


@get("/api/beads/handoffs", summary="The epic's handoffs and their manifest", tags=["beads"], responses=_QUERY)
async def bead_handoffs(state: State, epic_id: EpicParam) -> HandoffManifest | Response[ErrorReply]:
    """Every handoff a worker wrote at its context limit (the seed's schema 2.0, as written to
    ``.pulse/handoffs/`` in its worktree) and the manifest entries: owner file, summary, next action."""
    epic = canonical_uuid(epic_id)
    if epic is None:
        return _no_epic(epic_id)
    return await _ask(state, "bead_handoffs", GetHandoffs(epic_id=epic), HandoffManifest, idempotent=True)


@post("/api/beads", status_code=201, summary="Create a bead", tags=["beads"], responses=_CHANGE)
async def create_bead(state: State, data: JSONBody[CreateBeadBody]) -> BeadView | Response[ErrorReply]:
    """A bead made by a person, in the epic ``epic_id``. Without ``files`` or ``verify`` (or ``tdd_steps`` for
    ``tdd-required``) it is recorded ``bounced`` until an edit supplies them. 409 ``duplicate_bead`` for a
    taken id, ``dependency_cycle`` for a dependency that would make one."""
    fields = {k: getattr(data, k) for k in data.__struct_fields__}
    return await _ask(state, "create_bead", CreateBead(**fields), BeadView, idempotent=False)


def _bead_path(epic_id: str, bead_id: str) -> tuple[str | None, Response[ErrorReply] | None]:
    epic = canonical_uuid(epic_id)
    if epic is None:
        return None, _no_epic(epic_id)
    if not re.match(BEAD_ID, bead_id):
        return None, error_response(ErrorReply(code=ErrorCode.NOT_FOUND, message=f"no bead {bead_id}"))
    return epic, None


@get("/api/beads/{epic_id:str}/{bead_id:str}", summary="One bead", tags=["beads"], responses=_QUERY)
async def get_bead(epic_id: FromPath[str], bead_id: FromPath[str], state: State) -> BeadView | Response[ErrorReply]:
    """Every field of the bead: status, dependencies, files, verify, testing mode, references, who holds it
    (``assignee``, ``attempt``), its commit once landed, and the conflicts of attempts that did not land."""
    epic, refused = _bead_path(epic_id, bead_id)
    if refused is not None:
        return refused
    assert epic is not None
    return await _ask(state, "get_bead", GetBead(epic_id=epic, bead_id=bead_id), BeadView, idempotent=True)


@patch("/api/beads/{epic_id:str}/{bead_id:str}", summary="Edit a bead", tags=["beads"], responses=_CHANGE)
async def edit_bead(epic_id: FromPath[str], bead_id: FromPath[str], state: State,
                    data: JSONBody[EditBeadBody]) -> BeadView | Response[ErrorReply]:
    """Fields given are replaced; an ``open`` or ``bounced`` bead only (409 ``not_editable`` while it is
    worked or once closed). A bounced bead that gains its missing fields is ``open`` again."""
    epic, refused = _bead_path(epic_id, bead_id)
    if refused is not None:
        return refused
    assert epic is not None
    fields = {k: getattr(data, k) for k in data.__struct_fields__}
    return await _ask(state, "edit_bead", EditBead(epic_id=epic, bead_id=bead_id, **fields), BeadView,
                      idempotent=False)


@post("/api/beads/{epic_id:str}/{bead_id:str}/dependencies", status_code=200, summary="Add a dependency",
      tags=["beads"], responses=_CHANGE)
async def add_dependency(epic_id: FromPath[str], bead_id: FromPath[str], state: State,
                         data: JSONBody[AddDependencyBody]) -> BeadView | Response[ErrorReply]:
    """``{"depends_on": "<bead>", "type": "blocks"}`` (or ``parent-child``, which only groups). 409
    ``dependency_cycle`` when it would make a cycle; 404 for an unknown bead."""
    epic, refused = _bead_path(epic_id, bead_id)
    if refused is not None:
        return refused
    assert epic is not None
    command = AddDependency(epic_id=epic, bead_id=bead_id, depends_on=data.depends_on, type=data.type)
    return await _ask(state, "add_dependency", command, BeadView, idempotent=True)


@post("/api/beads/{epic_id:str}/{bead_id:str}/close", status_code=200, summary="Close a bead by hand",
      tags=["beads"], responses=_CHANGE)
async def close_bead(epic_id: FromPath[str], bead_id: FromPath[str], state: State,
                     data: JSONBody[CloseBeadBody]) -> BeadView | Response[ErrorReply]:
    """``{"reason": "..."}``: done elsewhere or dropped; it no longer blocks anything. 409 ``not_closable``
    while a worker has it (it closes when its commit lands)."""
    epic, refused = _bead_path(epic_id, bead_id)
    if refused is not None:
        return refused
    assert epic is not None
    command = CloseBead(epic_id=epic, bead_id=bead_id, reason=data.reason)
    return await _ask(state, "close_bead", command, BeadView, idempotent=True)


@get("/api/beads/{epic_id:str}/{bead_id:str}/evidence", summary="A bead's verification evidence", tags=["beads"],
     responses=_QUERY)
async def bead_evidence(epic_id: FromPath[str], bead_id: FromPath[str],
                        state: State) -> EvidenceList | Response[ErrorReply]:
    """Each verification the runner ran when the bead's worker closed it: every command exactly as run (TDD's
    red and green steps included), exit code, output excerpt and digest, time, testing mode; the passing one
    is also in the bead's commit at ``verification_evidence``."""
    epic, refused = _bead_path(epic_id, bead_id)
    if refused is not None:
        return refused
    assert epic is not None
    return await _ask(state, "bead_evidence", GetEvidence(epic_id=epic, bead_id=bead_id), EvidenceList,
                      idempotent=True)


BEAD_ROUTES = [list_beads, ready_beads, get_swarm, bead_handoffs, create_bead, get_bead, edit_bead, add_dependency,
               close_bead, bead_evidence]
