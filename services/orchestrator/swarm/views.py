"""Wire views of a swarm (``BeadView``, ``SwarmView``) and the ``bead:*``/``worker:*``/``lease:*`` events."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec
from eventsourcing.domain import DomainEvent

from autarch.contracts.beads import (
    BeadView,
    ConflictRecord,
    LeaseView,
    SwarmView,
    VerificationEvidence,
    WorkerView,
)
from autarch.contracts.events import (
    BeadBounced,
    BeadClaimed,
    BeadClosed,
    BeadCreated,
    BeadEvidenceRecorded,
    BeadReopened,
    BeadScopeRefused,
    BeadScopeRequested,
    BeadUpdated,
    BeadWidened,
    Event,
    LeaseConflicted,
    LeaseGranted,
    LeaseReleased,
    SwarmFinished,
    SwarmStarted,
    WorkerHandedOff,
    WorkerJoined,
    WorkerStatusChanged,
)

from .model import Bead, Swarm

__all__ = ["bead_view", "swarm_to_contract", "swarm_view"]


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def bead_view(bead: Bead, epic_id: str) -> BeadView:
    return BeadView(
        id=bead.id, epic_id=epic_id, title=bead.title, description=bead.description, status=bead.status,
        dependencies=list(bead.dependencies), files=list(bead.files), verify=list(bead.verify),
        verification_evidence=bead.verification_evidence, testing_mode=bead.testing_mode, tdd_steps=bead.tdd_steps,
        decision_refs=list(bead.decision_refs), learning_refs=list(bead.learning_refs), priority=bead.priority,
        assignee=bead.assignee, attempt=bead.attempt, close_reason=bead.close_reason,
        bounce_reason=bead.bounce_reason, commit=bead.commit, conflicts=list(bead.conflicts),
        created_by=bead.created_by, created_at=_time(bead.created_at), updated_at=_time(bead.updated_at))


def swarm_view(swarm: Swarm, leases: list[LeaseView] | None = None) -> SwarmView:
    """The swarm now; ``leases`` from the live table when given, else as the swarm recorded them."""
    epic = swarm.workflow_id
    workers = []
    for w in swarm.workers.values():
        a = swarm.current_attempt(w.name)
        workers.append(WorkerView(name=w.name, nickname=w.nickname, status=w.status, bead_id=w.bead_id,
                                  attempt=w.attempt, session_id=a.session_id if a else None,
                                  worktree_path=w.worktree_path, beads_closed=list(w.beads_closed)))
    if leases is None:
        leases = [LeaseView(pattern=p, holder=r.holder, mode=r.mode, bead_id=r.bead_id)
                  for r in swarm.leases.values() for p in r.patterns]
    evidence = [a.evidence for _, a in sorted(swarm.attempts.items(), key=lambda kv: kv[1].claimed_at)
                if a.evidence is not None]
    return SwarmView(epic_id=epic, mode="standalone" if swarm.mode == "standalone" else "swarm",
                     max_workers=swarm.max_workers, workers=workers, leases=leases,
                     beads=[bead_view(b, epic) for b in swarm.beads.values()], merged=list(swarm.merged),
                     evidence=evidence, handoffs=list(swarm.handoffs))


Rebuild = Callable[[DomainEvent], Swarm]
"""The swarm as of one of its events (for the events whose wire form is the bead after the change)."""


def swarm_to_contract(e: DomainEvent, epic_of: Callable[[str], str], at_event: Rebuild,
                      worker_of: Callable[[DomainEvent], str] | None = None) -> Event | None:
    """The wire event for a Swarm event; None for one that is not distributed. ``worker_of``: the worker of a merged
    bead's attempt when known without a rebuild (by default read from the swarm as of the event)."""
    epic = epic_of(str(e.originator_id))
    base: dict[str, Any] = {"workflow_id": epic, "occurred_at": e.timestamp}
    if isinstance(e, Swarm.Started):
        return SwarmStarted(**base, mode=e.mode, max_workers=e.max_workers, beads=len(e.beads))
    if isinstance(e, Swarm.Finished):
        return SwarmFinished(**base, merged=list(at_event(e).merged))
    if isinstance(e, Swarm.BeadAdded):
        return BeadCreated(**base, bead=bead_view(msgspec.convert(e.bead, Bead), epic))
    if isinstance(e, Swarm.BeadEdited | Swarm.DependencyAdded):
        return BeadUpdated(**base, bead=bead_view(at_event(e).beads[e.bead_id], epic))
    if isinstance(e, Swarm.BeadBounced):
        return BeadBounced(**base, bead_id=e.bead_id, reason=e.reason, missing=list(e.missing))
    if isinstance(e, Swarm.BeadClosedByHand):
        return BeadClosed(**base, bead_id=e.bead_id, reason=e.reason)
    if isinstance(e, Swarm.BeadClaimed):
        return BeadClaimed(**base, bead_id=e.bead_id, worker=e.worker, attempt=e.attempt, session_id=e.session_id)
    if isinstance(e, Swarm.BeadMerged):
        worker = worker_of(e) if worker_of is not None else at_event(e).attempts[(e.bead_id, e.attempt)].worker
        return BeadClosed(**base, bead_id=e.bead_id, reason=e.reason, commit=e.commit, worker=worker)
    if isinstance(e, Swarm.BeadReopened):
        conflict = e.conflict
        return BeadReopened(**base, bead_id=e.bead_id, attempt=e.attempt, reason=e.reason,
                            conflict=msgspec.convert(conflict, ConflictRecord) if conflict else None)
    if isinstance(e, Swarm.BeadStopped):
        return BeadReopened(**base, bead_id=e.bead_id, attempt=e.attempt, reason=e.reason)
    if isinstance(e, Swarm.EvidenceRecorded):
        return BeadEvidenceRecorded(**base, bead_id=e.bead_id,
                                    evidence=msgspec.convert(e.evidence, VerificationEvidence))
    if isinstance(e, Swarm.HandedOff):
        return WorkerHandedOff(**base, worker=str(e.handoff["owner_id"]).removeprefix("worker-"), bead_id=e.bead_id,
                               owner_file=e.owner_file, handoff=dict(e.handoff))
    if isinstance(e, Swarm.LeaseConflicted):
        return LeaseConflicted(**base, holder=e.worker, bead_id=e.bead_id, files=list(e.files),
                               held_by=list(e.held_by))
    if isinstance(e, Swarm.WorkerJoined):
        return WorkerJoined(**base, worker=e.name, nickname=e.nickname, worktree_path=e.worktree_path)
    if isinstance(e, Swarm.WorkerWaiting):
        return WorkerStatusChanged(**base, worker=e.name, status="waiting")
    if isinstance(e, Swarm.WorkerRetired):
        return WorkerStatusChanged(**base, worker=e.name, status="retired")
    if isinstance(e, Swarm.ScopeRequested):
        return BeadScopeRequested(**base, bead_id=e.bead_id, worker=e.worker, attempt=e.attempt,
                                  request_id=e.request_id, paths=list(e.paths), why=e.why)
    if isinstance(e, Swarm.BeadWidened):
        after = at_event(e)
        return BeadWidened(**base, bead_id=e.bead_id, worker=after.attempts[(e.bead_id, e.attempt)].worker,
                           request_id=e.request_id, added=list(e.added), files=list(after.beads[e.bead_id].files))
    if isinstance(e, Swarm.ScopeRefused):
        return BeadScopeRefused(**base, bead_id=e.bead_id,
                                worker=at_event(e).attempts[(e.bead_id, e.attempt)].worker, request_id=e.request_id,
                                reason=e.reason, held_by=list(e.held_by))
    if isinstance(e, Swarm.LeasesGranted):
        return LeaseGranted(**base, holder=e.worker, patterns=list(e.patterns), mode=e.mode, bead_id=e.bead_id)
    if isinstance(e, Swarm.LeasesReleased):
        return LeaseReleased(**base, holder=e.worker, patterns=list(e.patterns), reason=e.reason, bead_id=e.bead_id)
    return None
