"""Epics' commands and queries (the bead verbs): one command per epic at a time, conditional writes for claims.

The bead verbs (``list_beads`` … ``close_bead``) are served here, for people and for the swarm driver alike.
Every change goes through :meth:`SwarmBook.change`: read the swarm, run the command (which checks its rules),
save what it recorded. The save is conditional on the version read; if another writer (an orchestrator
instance sharing the store) recorded something meanwhile, the store refuses it and the command runs again
on a fresh read. That is what makes a claim atomic: two workers never get the same bead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec

from autarch.contracts.beads import (
    AddDependency,
    BeadErrorCode,
    BeadList,
    BeadView,
    CloseBead,
    CreateBead,
    EditBead,
    EvidenceList,
    GetBead,
    GetEvidence,
    GetHandoffs,
    GetSwarm,
    HandoffManifest,
    LeaseView,
    ListBeads,
    ReadyBeads,
    ReadyList,
    SwarmView,
)
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.micro import TypedService

from ..application import WorkflowApplication
from ..book import Book, ignore
from ..writer import BatchedWriter
from .model import Bead, Swarm, SwarmError, swarm_id_for
from .rank import critical_path, rank_ready
from .views import bead_view, swarm_view

__all__ = ["SwarmBook", "register_beads"]

log = logging.getLogger("orchestrator.beads")

R = TypeVar("R")


def _no_epic(epic_id: str) -> Swarm:
    raise ServiceFailure(BeadErrorCode.NO_EPIC, f"workflow {epic_id} has no epic: beads exist once a bead plan is "
                         "approved and execution starts", {"epic_id": epic_id})


@dataclass
class SwarmBook:
    """Handles each epic's commands one at a time; answers the bead queries from the store."""

    app: WorkflowApplication
    writer: BatchedWriter
    active: set[str] = field(default_factory=set)
    """Epics not finished: the ones the lease watch looks at (a finished epic holds no lease)."""
    kick: Callable[[str], None] = ignore
    """Wakes the epic's workflow's driver once the epic changed (``ignore``: nobody drives it)."""
    live_leases: Callable[[str], Any] | None = None
    """Epic → the live lease table's leases (an awaitable); None when no lease table is reachable."""
    book: Book[Swarm] = field(init=False)

    def __post_init__(self) -> None:
        # Each epic's latest state is kept between commands (``latest.py``; a command changes its own copy,
        # ``Swarm.copy_for_change``): rebuilding an epic of hundreds of beads for every command grew with the epic.
        self.book = Book(app=self.app, writer=self.writer, kind=Swarm, noun="epic", id_field="epic_id",
                         aggregate_id=swarm_id_for, absent=_no_epic, on_change=self._changed, keep=1024,
                         inline_reads=self.writer.inline, log=log)

    def _changed(self, swarm: Swarm) -> None:
        if swarm.finished:
            self.active.discard(swarm.workflow_id)
        self.kick(swarm.workflow_id)

    def load(self, owns: Callable[[str], bool] = lambda _: True) -> list[str]:
        """Remember every recorded epic ``owns`` (this partition's; by default all); the ones not finished."""
        unfinished = []
        for workflow_id in filter(owns, self.app.swarm_workflow_ids()):
            if not self.book.load(workflow_id).finished:
                unfinished.append(workflow_id)
        self.active = set(unfinished)
        return unfinished

    async def find(self, epic_id: str) -> Swarm | None:
        return await self.book.find(epic_id)

    async def read(self, epic_id: str) -> Swarm:
        return await self.book.read(epic_id)

    async def create(self, swarm: Swarm) -> Swarm:
        """Save a new epic (a repeat is answered with the recorded one)."""
        async with self.book.lock(swarm.workflow_id):
            existing = await self.book.find(swarm.workflow_id)
            if existing is not None:
                return existing
            await self.book.save(swarm.workflow_id, swarm)
            self.active.add(swarm.workflow_id)
        return swarm

    async def change(self, epic_id: str, command: Callable[[Swarm], R]) -> tuple[Swarm, R]:
        """Run ``command`` on the epic and save what it recorded, conditionally on the version read."""
        return await self.book.change(epic_id, command)

    # --- verbs ---------------------------------------------------------------------------------------

    async def list_beads(self, query: ListBeads) -> BeadList:
        swarm = await self.read(query.epic_id)
        beads = [bead_view(b, swarm.workflow_id) for b in swarm.beads.values()
                 if query.status is None or b.status == query.status]
        return BeadList(epic_id=swarm.workflow_id, beads=beads,
                        critical_path=critical_path([bead_view(b, swarm.workflow_id) for b in swarm.beads.values()]))

    async def get_bead(self, query: GetBead) -> BeadView:
        swarm = await self.read(query.epic_id)
        try:
            return bead_view(swarm.bead(query.bead_id), swarm.workflow_id)
        except SwarmError as exc:
            raise exc.failure(epic_id=query.epic_id) from None

    async def ready_beads(self, query: ReadyBeads) -> ReadyList:
        swarm = await self.read(query.epic_id)
        return ranked(swarm)

    async def get_swarm(self, query: GetSwarm) -> SwarmView:
        swarm = await self.read(query.epic_id)
        leases: list[LeaseView] | None = None
        if self.live_leases is not None:
            try:
                leases = await self.live_leases(swarm.workflow_id)
            except Exception as exc:  # the view still answers, from what the swarm recorded
                log.info("epic %s: live leases unavailable (%s)", swarm.workflow_id, exc)
        return swarm_view(swarm, leases)

    async def bead_evidence(self, query: GetEvidence) -> EvidenceList:
        swarm = await self.read(query.epic_id)
        try:
            swarm.bead(query.bead_id)
        except SwarmError as exc:
            raise exc.failure(epic_id=query.epic_id) from None
        found = [a.evidence for (b, _), a in sorted(swarm.attempts.items()) if b == query.bead_id and a.evidence]
        return EvidenceList(epic_id=swarm.workflow_id, bead_id=query.bead_id, evidence=found)

    async def bead_handoffs(self, query: GetHandoffs) -> HandoffManifest:
        swarm = await self.read(query.epic_id)
        return HandoffManifest(epic_id=swarm.workflow_id, handoffs=list(swarm.handoffs),
                               documents=[msgspec.to_builtins(d) for d in swarm.handoff_documents])

    async def create_bead(self, cmd: CreateBead) -> BeadView:
        fields = msgspec.to_builtins(cmd)
        fields.pop("epic_id")
        bead_id = fields.pop("id")

        def record(swarm: Swarm) -> str:
            chosen = bead_id or _next_user_id(swarm)
            bead = msgspec.convert({**fields, "id": chosen, "created_by": "user"}, Bead)
            swarm.add_bead(bead)
            return chosen

        swarm, chosen = await self.change(cmd.epic_id, record)
        return bead_view(swarm.beads[chosen], swarm.workflow_id)

    async def edit_bead(self, cmd: EditBead) -> BeadView:
        changes = {k: v for k, v in msgspec.to_builtins(cmd).items()
                   if k not in ("epic_id", "bead_id") and v is not None}
        swarm, _ = await self.change(cmd.epic_id, lambda s: s.edit_bead(cmd.bead_id, changes))
        return bead_view(swarm.beads[cmd.bead_id], swarm.workflow_id)

    async def add_dependency(self, cmd: AddDependency) -> BeadView:
        swarm, _ = await self.change(cmd.epic_id, lambda s: s.add_dependency(cmd.bead_id, cmd.depends_on, cmd.type))
        return bead_view(swarm.beads[cmd.bead_id], swarm.workflow_id)

    async def close_bead(self, cmd: CloseBead) -> BeadView:
        swarm, _ = await self.change(cmd.epic_id, lambda s: s.close_by_hand(cmd.bead_id, cmd.reason))
        return bead_view(swarm.beads[cmd.bead_id], swarm.workflow_id)


def ranked(swarm: Swarm) -> ReadyList:
    """The swarm's ready beads ranked by impact (``bead_rank``); staleness counts from when each became ready.

    The closed beads go by id only: a view of each (some microseconds) at every step of the driver made the ranking
    of a wide epic cost more the more beads it had closed (21 ms a step once 3,000 were)."""
    views = []
    closed = []
    for b in swarm.beads.values():
        if b.status == "closed":
            closed.append(b.id)
            continue
        view = bead_view(b, swarm.workflow_id)
        if b.ready_since:
            view.updated_at = datetime.fromisoformat(b.ready_since)
        views.append(view)
    return rank_ready(views, now=datetime.now(UTC), closed=closed,
                      epic_id=swarm.workflow_id if swarm.beads else None)


def _next_user_id(swarm: Swarm) -> str:
    n = 1
    while f"u{n}" in swarm.beads:
        n += 1
    return f"u{n}"


def register_beads(service: TypedService, book: SwarmBook) -> None:
    """Add the bead verbs to the orchestrator's service."""
    service.endpoint("list_beads", ListBeads, book.list_beads)
    service.endpoint("get_bead", GetBead, book.get_bead)
    service.endpoint("ready_beads", ReadyBeads, book.ready_beads)
    service.endpoint("get_swarm", GetSwarm, book.get_swarm)
    service.endpoint("create_bead", CreateBead, book.create_bead)
    service.endpoint("edit_bead", EditBead, book.edit_bead)
    service.endpoint("add_dependency", AddDependency, book.add_dependency)
    service.endpoint("close_bead", CloseBead, book.close_bead)
    service.endpoint("bead_evidence", GetEvidence, book.bead_evidence)
    service.endpoint("bead_handoffs", GetHandoffs, book.bead_handoffs)
