"""The Swarm aggregate: a workflow's epic (seed 002) — its bead graph, its workers, their attempts and leases.

Read this file and you know every event a swarm records. Commands check their rules first and raise
``SwarmError`` before anything is recorded; the ``@event`` methods only apply state, so replaying them rebuilds
the graph, the claims and the leases exactly. A claim is a conditional write: the command checks the bead is
ready and unclaimed, and the event store refuses the save if another writer recorded anything since the
aggregate was read (optimistic concurrency); the writer then reads again and re-checks (``SwarmBook.change``).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate, event

from autarch.contracts.beads import (
    REQUIRED_FIELDS,
    BeadErrorCode,
    BeadStatus,
    ConflictRecord,
    Dependency,
    DependencyType,
    HandoffEntry,
    LeaseMode,
    SwarmMode,
    TddSteps,
    TestingMode,
    VerificationEvidence,
    WorkerStatus,
)
from autarch.contracts.errors import ErrorCode
from autarch.runtime.aggregates import recorded_as

from ..refusal import Refusal

__all__ = [
    "Attempt",
    "Bead",
    "HandoffDocument",
    "LeaseRecord",
    "ScopeRequest",
    "Swarm",
    "SwarmError",
    "SwarmMode",
    "Worker",
    "missing_fields",
    "swarm_id_for",
]

_SWARMS = uuid.UUID("3c2b8e7a-51f4-4d09-9b6e-7a1e2f4c8d90")
_ATTEMPTS = uuid.UUID("9e4d1a6b-2f3c-4b8e-a7d5-c0f1e2b3a4d5")

AttemptEnd = Literal["merged", "reopened", "no_change"]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def swarm_id_for(workflow_id: str) -> UUID:
    """The swarm of one workflow: deterministic, so the epic of a workflow is found without an index."""
    return uuid.uuid5(_SWARMS, str(uuid.UUID(workflow_id)))


def attempt_session_id(workflow_id: str, bead_id: str, attempt: int, generation: int = 0) -> str:
    """The agent session of one attempt at one bead (a repeated start opens one session); ``generation`` counts
    the fresh sessions handoffs started for the same attempt."""
    suffix = f":g{generation}" if generation else ""
    return str(uuid.uuid5(_ATTEMPTS, f"{workflow_id}:{bead_id}:{attempt}{suffix}"))


_T = TypeVar("_T")

OWNED = "_owned_ids"
"""The attribute naming the beads and attempts (by ``id``) a :class:`Swarm` copied for itself since it was last
copied; one of its ``transient_attributes``, so it is never written into a snapshot."""


class SwarmError(Refusal):
    """An epic's command refused in the swarm's current state (nothing is recorded)."""


class Bead(msgspec.Struct, kw_only=True):
    id: str
    title: str
    description: str = ""
    status: BeadStatus = "open"
    dependencies: list[Dependency] = []
    files: list[str] = []
    verify: list[str] = []
    verification_evidence: str | None = None
    testing_mode: TestingMode = "standard"
    tdd_steps: TddSteps | None = None
    decision_refs: list[str] = []
    learning_refs: list[str] = []
    priority: int = 2
    assignee: str | None = None
    attempt: int = 0
    close_reason: str | None = None
    bounce_reason: str | None = None
    commit: str | None = None
    conflicts: list[ConflictRecord] = []
    created_by: Literal["plan", "user"] = "plan"
    created_at: str = ""
    updated_at: str = ""
    ready_since: str | None = None
    """When its last blocker closed (its creation when it had none): staleness counts from here."""

    def blockers(self) -> list[str]:
        return [d.bead_id for d in self.dependencies if d.type == "blocks"]


def missing_fields(bead: Bead) -> list[str]:
    """The required fields ``bead`` lacks (seed 002: bounce, never guess)."""
    missing = [f for f in REQUIRED_FIELDS if not getattr(bead, f)]
    if bead.testing_mode == "tdd-required" and bead.tdd_steps is None:
        missing.append("tdd_steps")
    return missing


class ScopeRequest(msgspec.Struct, kw_only=True):
    """A worker's request for files beyond its bead's (tool ``request_scope``) and the coordinator's answer."""

    request_id: str
    worker: str
    paths: list[str]
    why: str
    at: str
    granted: bool | None = None
    """None until answered."""
    added: list[str] = []
    reason: str | None = None
    held_by: list[str] = []


class Attempt(msgspec.Struct, kw_only=True):
    """One claim of one bead by one worker, from the claim to the merge (or the reopen)."""

    bead_id: str
    number: int
    worker: str
    session_id: str
    claimed_at: str
    base_commit: str | None = None
    leased: bool = False
    leases_released: bool = False
    session_started: bool = False
    kickoff_turn_id: str | None = None
    summary: str | None = None
    """The worker's ``complete_pulse`` summary: the implementation is done and waits for verification."""
    verified: bool = False
    """The runner's fresh verification passed when the worker closed the bead (``evidence``)."""
    evidence: VerificationEvidence | None = None
    pending_message: str | None = None
    """A message for the worker's session that is not delivered yet (a failed verification, a nudge)."""
    message_count: int = 0
    nudges: int = 0
    committed: bool = False
    commit: str | None = None
    files_changed: list[str] = []
    ended: AttemptEnd | None = None
    end_reason: str | None = None
    session_closed: bool = False
    stopped: bool = False
    """Reopened because the user stopped the swarm: not a failure of the bead (it does not count towards a bounce)."""
    generation: int = 0
    """Sessions after the first (each handoff at the context limit starts a fresh one for the same attempt)."""
    stale_sessions: list[str] = []
    """Sessions a handoff left behind, until they are closed."""
    scope_requests: list[ScopeRequest] = []
    """The worker's requests for more files during this attempt, with their answers."""
    handoff_mail: str | None = None
    """A session that handed off and is still to send its ``[HANDOFF]`` mail (worker mode): the next session starts
    once its mail turn ended."""
    handoff_mail_asked: bool = False

    @property
    def open(self) -> bool:
        return self.ended is None


class Worker(msgspec.Struct, kw_only=True):
    name: str
    nickname: str
    status: WorkerStatus = "idle"
    worktree_path: str | None = None
    bead_id: str | None = None
    attempt: int = 0
    beads_closed: list[str] = []


class HandoffRuntime(msgspec.Struct, kw_only=True):
    """Who the paused worker is in the swarm (a standalone worker's handoff has none)."""

    runtime_nickname: str
    agent_mail_name: str
    epic_id: str
    epic_topic: str
    coordinator_agent_name: str


class HandoffContext(msgspec.Struct, kw_only=True):
    tokens_used_pct: float
    last_bead_closed: str | None


class HandoffTransfer(msgspec.Struct, kw_only=True):
    status: str
    completed: list[str]
    in_flight: list[str]
    blockers: list[str]
    resume_notes: list[str]


class HandoffPayload(msgspec.Struct, kw_only=True, omit_defaults=True):
    runtime: HandoffRuntime | None = None
    context_snapshot: HandoffContext
    transfer: HandoffTransfer
    verification_evidence_paths: list[str]


class HandoffDocument(msgspec.Struct, kw_only=True):
    """A worker's handoff as written into its worktree (seed 002's schema 2.0, ``handoffs.handoff_document``),
    in the document's own field order."""

    schema_version: str
    handoff_id: str
    owner_type: str
    owner_id: str
    skill: str
    feature: str
    phase: str
    status: str
    paused_at: str
    reason: str
    next_action: str
    read_first: list[str]
    summary: str
    payload: HandoffPayload


class LeaseRecord(msgspec.Struct, kw_only=True):
    """A lease as the swarm recorded it (the live table is the JetStream key-value bucket)."""

    holder: str
    patterns: list[str]
    bead_id: str
    attempt: int
    mode: LeaseMode = "exclusive"


def _bead(data: dict[str, Any]) -> Bead:
    return msgspec.convert(data, Bead)


class Swarm(Aggregate):
    """A workflow's epic: beads, workers, attempts, leases."""

    transient_attributes: ClassVar[tuple[str, ...]] = (OWNED,)

    if TYPE_CHECKING:
        # The event classes the @event decorators below create when the class is built (mypy cannot see them).
        BeadAdded: ClassVar[type[Any]]
        BeadBounced: ClassVar[type[Any]]
        BeadClaimed: ClassVar[type[Any]]
        BeadClosedByHand: ClassVar[type[Any]]
        BeadEdited: ClassVar[type[Any]]
        BeadMerged: ClassVar[type[Any]]
        BeadReopened: ClassVar[type[Any]]
        BeadWidened: ClassVar[type[Any]]
        BeadStopped: ClassVar[type[Any]]
        DependencyAdded: ClassVar[type[Any]]
        EvidenceRecorded: ClassVar[type[Any]]
        Finished: ClassVar[type[Any]]
        HandedOff: ClassVar[type[Any]]
        HandoffMailAsked: ClassVar[type[Any]]
        HandoffMailTurnEnded: ClassVar[type[Any]]
        LeaseConflicted: ClassVar[type[Any]]
        LeasesGranted: ClassVar[type[Any]]
        LeasesReleased: ClassVar[type[Any]]
        ScopeRefused: ClassVar[type[Any]]
        ScopeRequested: ClassVar[type[Any]]
        Started: ClassVar[type[Any]]
        WorkerJoined: ClassVar[type[Any]]
        WorkerRetired: ClassVar[type[Any]]
        WorkerWaiting: ClassVar[type[Any]]

    @staticmethod
    def create_id(workflow_id: str, **_: object) -> UUID:
        return swarm_id_for(workflow_id)

    @event("Started")
    def __init__(self, *, workflow_id: str, mode: SwarmMode, max_workers: int, beads: list[dict[str, Any]],
                 at: str) -> None:
        self.workflow_id = workflow_id
        self.mode: SwarmMode = mode
        self.max_workers = max_workers
        self.beads: dict[str, Bead] = {}
        for data in beads:
            bead = _bead(data)
            self.beads[bead.id] = bead
        self._refresh_ready(at)
        self.workers: dict[str, Worker] = {}
        self.attempts: dict[tuple[str, int], Attempt] = {}
        self.leases: dict[str, LeaseRecord] = {}
        """Holder → the lease it holds (a worker holds one bead's files at a time)."""
        self.merged: list[str] = []
        self.handoffs: list[HandoffEntry] = []
        self.handoff_documents: list[HandoffDocument] = []
        self.seen: set[str] = set()
        """Turn ids already handled (a turn event may be delivered twice)."""
        self.finished = False
        self.updated_at = at

    # --- events -------------------------------------------------------------------------------------

    @event("BeadAdded")
    def _bead_added(self, *, bead: dict[str, Any], at: str) -> None:
        b = _bead(bead)
        self.beads[b.id] = self._owned(b)
        self._refresh_ready(at)

    @event("BeadEdited")
    def _bead_edited(self, *, bead_id: str, changes: dict[str, Any], at: str) -> None:
        bead = self.beads[bead_id]
        data = msgspec.to_builtins(bead)
        data.update(changes)
        updated = _bead(data)
        updated.updated_at = at
        if updated.status == "bounced" and not missing_fields(updated):
            updated.status = "open"
            updated.bounce_reason = None
        self.beads[bead_id] = self._owned(updated)
        self._refresh_ready(at)

    @event("DependencyAdded")
    def _dependency_added(self, *, bead_id: str, depends_on: str, type: DependencyType, at: str) -> None:
        bead = self._bead_w(bead_id)
        bead.dependencies = [*bead.dependencies, Dependency(bead_id=depends_on, type=type)]
        bead.updated_at = at
        self._refresh_ready(at)

    @event("BeadBounced")
    def _bead_bounced(self, *, bead_id: str, reason: str, missing: list[str], at: str) -> None:
        bead = self._bead_w(bead_id)
        bead.status = "bounced"
        bead.bounce_reason = reason
        bead.assignee = None
        bead.updated_at = at

    @event("BeadClosedByHand")
    def _closed_by_hand(self, *, bead_id: str, reason: str, at: str) -> None:
        bead = self._bead_w(bead_id)
        bead.status = "closed"
        bead.close_reason = reason
        bead.updated_at = at
        self._refresh_ready(at)

    @event("WorkerJoined")
    def _worker_joined(self, *, name: str, nickname: str, worktree_path: str, at: str) -> None:
        self.workers[name] = Worker(name=name, nickname=nickname, worktree_path=worktree_path)

    @event("WorkerWaiting")
    def _worker_waiting(self, *, name: str, at: str) -> None:
        self.workers[name].status = "waiting"

    @event("WorkerRetired")
    def _worker_retired(self, *, name: str, at: str) -> None:
        self.workers[name].status = "retired"

    @event("BeadClaimed")
    def _bead_claimed(self, *, bead_id: str, worker: str, attempt: int, session_id: str, at: str) -> None:
        bead = self._bead_w(bead_id)
        bead.status = "in_progress"
        bead.assignee = worker
        bead.attempt = attempt
        bead.updated_at = at
        w = self.workers[worker]
        w.status = "working"
        w.bead_id = bead_id
        w.attempt = attempt
        self.attempts[(bead_id, attempt)] = self._owned(Attempt(bead_id=bead_id, number=attempt, worker=worker,
                                                    session_id=session_id, claimed_at=at))

    @event("AttemptBegun")
    def _attempt_begun(self, *, bead_id: str, attempt: int, base_commit: str) -> None:
        self._attempt_w(bead_id, attempt).base_commit = base_commit

    @event("LeasesGranted")
    def _leases_granted(self, *, worker: str, bead_id: str, attempt: int, patterns: list[str], mode: LeaseMode,
                        at: str) -> None:
        self._attempt_w(bead_id, attempt).leased = True
        self.leases[worker] = LeaseRecord(holder=worker, patterns=list(patterns), bead_id=bead_id, attempt=attempt,
                                          mode=mode)

    @event("LeaseConflicted")
    def _lease_conflicted(self, *, worker: str, bead_id: str, attempt: int, files: list[str], held_by: list[str],
                          at: str) -> None:
        # The attempt never started work: the bead is ready again and the worker waits for a release.
        bead = self._bead_w(bead_id)
        bead.conflicts = [*bead.conflicts, ConflictRecord(kind="lease", attempt=attempt, files=list(files),
                                                          holder=", ".join(held_by),
                                                          at=datetime.fromisoformat(at))]
        self._end_attempt(bead_id, attempt, "reopened", f"files leased by {', '.join(held_by)}", at,
                          worker_status="waiting")
        self._attempt_w(bead_id, attempt).leases_released = True
        self._attempt_w(bead_id, attempt).session_closed = True

    @event("ScopeRequested")
    def _scope_requested(self, *, bead_id: str, attempt: int, worker: str, request_id: str, paths: list[str],
                         why: str, at: str) -> None:
        a = self._attempt_w(bead_id, attempt)
        a.scope_requests = [*a.scope_requests, ScopeRequest(request_id=request_id, worker=worker, paths=list(paths),
                                                            why=why, at=at)]

    @event("BeadWidened")
    def _bead_widened(self, *, bead_id: str, attempt: int, request_id: str, added: list[str], at: str) -> None:
        # The paths join the bead's files (a later attempt has them from its claim) and the worker's lease record.
        a = self._attempt_w(bead_id, attempt)
        bead = self._bead_w(bead_id)
        bead.files = [*bead.files, *(p for p in added if p not in bead.files)]
        bead.updated_at = at
        lease = self.leases.get(a.worker)
        if lease is not None and (lease.bead_id, lease.attempt) == (bead_id, attempt):
            # Replaced, not changed in place: a command's copy of the epic shares the record with the kept epic
            # (``copy_for_change`` copies the dict of leases, not each lease).
            self.leases[a.worker] = msgspec.structs.replace(
                lease, patterns=[*lease.patterns, *(p for p in added if p not in lease.patterns)])
        request = self._own_scope_request(a, request_id)
        request.granted = True
        request.added = list(added)

    @event("ScopeRefused")
    def _scope_refused(self, *, bead_id: str, attempt: int, request_id: str, reason: str, held_by: list[str],
                       at: str) -> None:
        request = self._own_scope_request(self._attempt_w(bead_id, attempt), request_id)
        request.granted = False
        request.reason = reason
        request.held_by = list(held_by)

    @staticmethod
    def _scope_request(a: Attempt, request_id: str) -> ScopeRequest:
        return next(r for r in a.scope_requests if r.request_id == request_id)

    @staticmethod
    def _own_scope_request(a: Attempt, request_id: str) -> ScopeRequest:
        """The request ``request_id`` of ``a``, to change: a copy put in its place in a new list. A command's copy of
        an attempt is shallow, and shares its list of requests, and the requests, with the kept epic."""
        found = Swarm._scope_request(a, request_id)
        copy = msgspec.structs.replace(found)
        a.scope_requests = [copy if r is found else r for r in a.scope_requests]
        return copy

    @event("SessionOpened")
    def _session_opened(self, *, bead_id: str, attempt: int, kickoff_turn_id: str | None) -> None:
        a = self._attempt_w(bead_id, attempt)
        a.session_started = True
        a.kickoff_turn_id = kickoff_turn_id

    @event("TurnHandled")
    def _turn_handled(self, *, turn_id: str, bead_id: str, attempt: int, outcome: str, summary: str | None,
                      nudge: str | None) -> None:
        self.seen.add(turn_id)
        a = self._attempt_w(bead_id, attempt)
        if summary is not None:
            a.summary = summary
        if nudge is not None:
            a.nudges += 1
            a.pending_message = nudge

    @event("EvidenceRecorded")
    def _evidence_recorded(self, *, bead_id: str, attempt: int, evidence: dict[str, Any]) -> None:
        a = self._attempt_w(bead_id, attempt)
        a.evidence = msgspec.convert(evidence, VerificationEvidence)
        a.verified = a.evidence.passed

    @event("HandedOff")
    def _handed_off(self, *, turn_id: str, bead_id: str, attempt: int, owner_file: str,
                    handoff: dict[str, Any]) -> None:
        self.seen.add(turn_id)
        a = self._attempt_w(bead_id, attempt)
        a.stale_sessions = [*a.stale_sessions, a.session_id]
        if self.mode == "swarm":
            # The seed's worker mode: the session that wrote the handoff notifies the coordinator itself.
            a.handoff_mail = a.session_id
            a.handoff_mail_asked = False
        a.generation += 1
        a.session_id = attempt_session_id(self.workflow_id, bead_id, attempt, a.generation)
        a.session_started = False
        a.kickoff_turn_id = None
        a.pending_message = None
        a.nudges = 0
        # The event keeps the document as written; the state is a typed copy.
        document = msgspec.convert(handoff, HandoffDocument)
        self.handoffs = [e for e in self.handoffs if e.owner_file != owner_file]
        self.handoffs.append(HandoffEntry(
            handoff_id=document.handoff_id, owner_id=document.owner_id, owner_file=owner_file,
            summary=document.summary, next_action=document.next_action,
            paused_at=datetime.fromisoformat(document.paused_at), status=document.status, bead_id=bead_id))
        self.handoff_documents.append(document)

    @event("HandoffMailAsked")
    def _handoff_mail_asked(self, *, bead_id: str, attempt: int, session_id: str) -> None:
        self._attempt_w(bead_id, attempt).handoff_mail_asked = True

    @event("HandoffMailTurnEnded")
    def _handoff_mail_turn_ended(self, *, bead_id: str, attempt: int, session_id: str, turn_id: str,
                                 outcome: str) -> None:
        self.seen.add(turn_id)
        a = self._attempt_w(bead_id, attempt)
        if a.handoff_mail == session_id:
            a.handoff_mail = None

    @event("StaleSessionClosed")
    def _stale_session_closed(self, *, bead_id: str, attempt: int, session_id: str) -> None:
        a = self._attempt_w(bead_id, attempt)
        if a.handoff_mail == session_id:
            a.handoff_mail = None
        a.stale_sessions = [s for s in a.stale_sessions if s != session_id]

    @event("MessageDelivered")
    def _message_delivered(self, *, bead_id: str, attempt: int) -> None:
        a = self._attempt_w(bead_id, attempt)
        a.pending_message = None
        a.message_count += 1

    @event("BeadCommitted")
    def _bead_committed(self, *, bead_id: str, attempt: int, commit: str | None, files: list[str], at: str) -> None:
        a = self._attempt_w(bead_id, attempt)
        a.committed = True
        a.commit = commit
        a.files_changed = list(files)

    @event("BeadMerged")
    def _bead_merged(self, *, bead_id: str, attempt: int, commit: str | None, reason: str, at: str) -> None:
        bead = self._bead_w(bead_id)
        bead.status = "closed"
        bead.commit = commit
        bead.close_reason = reason
        bead.updated_at = at
        self.merged.append(bead_id)
        worker = self.attempts[(bead_id, attempt)].worker
        self.workers[worker].beads_closed.append(bead_id)
        self._end_attempt(bead_id, attempt, "merged", reason, at)
        self._refresh_ready(at)

    @event("BeadReopened")
    def _bead_reopened(self, *, bead_id: str, attempt: int, reason: str, conflict: dict[str, Any] | None,
                       at: str) -> None:
        bead = self._bead_w(bead_id)
        if conflict is not None:
            bead.conflicts = [*bead.conflicts, msgspec.convert(conflict, ConflictRecord)]
        self._end_attempt(bead_id, attempt, "reopened", reason, at)

    @event("BeadStopped")
    def _bead_stopped(self, *, bead_id: str, attempt: int, reason: str, at: str) -> None:
        # A reopen the user caused: its own event, so the reopens recorded before stops existed keep their shape.
        self._attempt_w(bead_id, attempt).stopped = True
        self._end_attempt(bead_id, attempt, "reopened", reason, at)

    @event("LeasesReleased")
    def _leases_released(self, *, worker: str, bead_id: str, attempt: int, reason: str, patterns: list[str],
                         at: str) -> None:
        self._attempt_w(bead_id, attempt).leases_released = True
        lease = self.leases.get(worker)
        if lease is not None and (lease.bead_id, lease.attempt) == (bead_id, attempt):
            del self.leases[worker]

    @event("SessionClosed")
    def _session_closed(self, *, bead_id: str, attempt: int) -> None:
        self._attempt_w(bead_id, attempt).session_closed = True

    @event("Finished")
    def _finished(self, *, at: str) -> None:
        self.finished = True

    # --- helpers applied by events ---------------------------------------------------------------------

    def _end_attempt(self, bead_id: str, attempt: int, end: AttemptEnd, reason: str, at: str, *,
                     worker_status: WorkerStatus = "idle") -> None:
        a = self._attempt_w(bead_id, attempt)
        a.ended = end
        a.end_reason = reason
        bead = self.beads[bead_id]
        if end == "reopened" and bead.status == "in_progress" and bead.attempt == attempt:
            bead = self._bead_w(bead_id)
            bead.status = "open"
            bead.assignee = None
            bead.updated_at = at
            bead.ready_since = at
        w = self.workers[a.worker]
        if w.bead_id == bead_id and w.attempt == attempt:
            w.status = worker_status
            w.bead_id = None

    def _refresh_ready(self, at: str) -> None:
        """Stamp ``ready_since`` on beads that just became ready (staleness counts from then)."""
        for bead in self.beads.values():
            if bead.status == "open" and self.is_ready(bead.id):
                if bead.ready_since is None:
                    self._bead_w(bead.id).ready_since = at
            elif bead.status != "in_progress" and bead.ready_since is not None:
                self._bead_w(bead.id).ready_since = None

    # --- copy on write ------------------------------------------------------------------------------------------

    def _bead_w(self, bead_id: str) -> Bead:
        """The bead ``bead_id``, to change: this aggregate's own copy, made at its first change since the last
        :meth:`copy_for_change` (until then the kept epic and this copy share it). Only the events change beads,
        and only through this: a reference taken before an event may be the shared, unchanged one."""
        bead = self.beads[bead_id]
        if id(bead) not in self._own():
            bead = self.beads[bead_id] = self._owned(msgspec.structs.replace(bead))
        return bead

    def _attempt_w(self, bead_id: str, number: int) -> Attempt:
        """As :meth:`_bead_w`, for the attempt ``number`` of ``bead_id``."""
        attempt = self.attempts[(bead_id, number)]
        if id(attempt) not in self._own():
            attempt = self.attempts[(bead_id, number)] = self._owned(msgspec.structs.replace(attempt))
        return attempt

    def _own(self) -> set[int]:
        # Not state: kept out of snapshots (``transient_attributes``); an aggregate without it (rebuilt from events
        # or from a snapshot) owns nothing yet, and copies each bead or attempt once, at its first change.
        own: set[int] | None = self.__dict__.get(OWNED)
        if own is None:
            own = self.__dict__[OWNED] = set()
        return own

    def _owned(self, item: _T) -> _T:
        self._own().add(id(item))
        return item

    def copy_for_change(self) -> Swarm:
        """A copy a command may change while this one stays as it is (``latest.py``): its lists, dicts and sets,
        and each worker; the beads and attempts are shared until an event changes one (:meth:`_bead_w` and
        :meth:`_attempt_w` copy it then). Copying every bead and attempt for each command grew with the epic:
        7 to 19 ms a command once 3,000 beads had closed. Neither side owns a shared one afterwards."""
        self.__dict__.pop(OWNED, None)
        twin = object.__new__(type(self))
        twin.__dict__.update({name: value.copy() if type(value) in (list, dict, set) else value
                              for name, value in self.__dict__.items()})
        twin.workers = {key: msgspec.structs.replace(w, beads_closed=list(w.beads_closed))
                        for key, w in self.workers.items()}
        return twin

    # --- queries ------------------------------------------------------------------------------------------

    def is_ready(self, bead_id: str) -> bool:
        bead = self.beads[bead_id]
        if bead.status != "open":
            return False
        return all(self.beads.get(b) is not None and self.beads[b].status == "closed" for b in bead.blockers())

    def open_attempts(self) -> list[Attempt]:
        return [a for a in self.attempts.values() if a.open]

    def attempt_of_session(self, session_id: str) -> Attempt | None:
        for a in self.attempts.values():
            if a.session_id == session_id or session_id in a.stale_sessions:
                return a
        return None

    def current_attempt(self, worker: str) -> Attempt | None:
        w = self.workers[worker]
        if w.bead_id is None:
            return None
        return self.attempts.get((w.bead_id, w.attempt))

    def all_closed(self) -> bool:
        return bool(self.beads) and all(b.status == "closed" for b in self.beads.values())

    # --- commands (checked, then recorded) --------------------------------------------------------------

    def _check_open_epic(self) -> None:
        if self.finished:
            raise SwarmError(BeadErrorCode.NOT_EDITABLE, "the epic is finished: every bead landed and the workflow "
                             "went on to review", epic_id=self.workflow_id)

    def add_bead(self, bead: Bead, *, at: str | None = None) -> None:
        self._check_open_epic()
        if bead.id in self.beads:
            raise SwarmError(BeadErrorCode.DUPLICATE_BEAD, f"bead {bead.id} already exists", bead_id=bead.id)
        for dep in bead.dependencies:
            self._check_dependency(bead.id, dep.bead_id, dep.type)
        at = at or _now()
        bead.created_at = bead.updated_at = at
        self._bead_added(bead=msgspec.to_builtins(bead), at=at)
        missing = missing_fields(bead)
        if missing:
            self._bead_bounced(bead_id=bead.id, reason=f"missing {', '.join(missing)}", missing=missing, at=at)

    def edit_bead(self, bead_id: str, changes: dict[str, Any]) -> None:
        self._check_open_epic()
        bead = self.bead(bead_id)
        if bead.status not in ("open", "bounced"):
            raise SwarmError(BeadErrorCode.NOT_EDITABLE,
                             f"bead {bead_id} is {bead.status}: only open or bounced beads can be edited",
                             bead_id=bead_id, status=bead.status)
        if changes:
            self._bead_edited(bead_id=bead_id, changes=changes, at=_now())

    def add_dependency(self, bead_id: str, depends_on: str, type: DependencyType) -> None:
        self._check_open_epic()
        bead = self.bead(bead_id)
        if any(d.bead_id == depends_on and d.type == type for d in bead.dependencies):
            return
        if bead.status in ("closed",) and type == "blocks":
            raise SwarmError(BeadErrorCode.NOT_EDITABLE, f"bead {bead_id} is closed", bead_id=bead_id)
        self._check_dependency(bead_id, depends_on, type)
        self._dependency_added(bead_id=bead_id, depends_on=depends_on, type=type, at=_now())

    def _check_dependency(self, bead_id: str, depends_on: str, type: DependencyType) -> None:
        if depends_on not in self.beads:
            raise SwarmError(ErrorCode.NOT_FOUND, f"no bead {depends_on} in this epic", bead_id=depends_on)
        if depends_on == bead_id:
            raise SwarmError(BeadErrorCode.CYCLE, f"bead {bead_id} cannot depend on itself", bead_id=bead_id)
        if type != "blocks":
            return
        # A blocks edge bead_id → depends_on makes a cycle if depends_on already (transitively) waits on bead_id.
        stack, seen = [depends_on], set()
        while stack:
            current = stack.pop()
            if current == bead_id:
                raise SwarmError(BeadErrorCode.CYCLE, f"{bead_id} depending on {depends_on} makes a cycle",
                                 bead_id=bead_id, depends_on=depends_on)
            if current in seen or current not in self.beads:
                continue
            seen.add(current)
            stack.extend(self.beads[current].blockers())

    def close_by_hand(self, bead_id: str, reason: str) -> None:
        bead = self.bead(bead_id)
        if bead.status == "closed":
            return
        self._check_open_epic()
        if bead.status == "in_progress":
            raise SwarmError(BeadErrorCode.NOT_CLOSABLE,
                             f"bead {bead_id} is being worked by {bead.assignee}; it closes when its commit lands",
                             bead_id=bead_id, assignee=bead.assignee)
        self._closed_by_hand(bead_id=bead_id, reason=reason, at=_now())

    def claim(self, bead_id: str, worker: str) -> Attempt:
        """Give ``bead_id`` to ``worker`` if it is ready and unclaimed; ``SwarmError`` otherwise."""
        bead = self.bead(bead_id)
        w = self.workers.get(worker)
        if w is None or w.status not in ("idle", "waiting"):
            raise SwarmError(ErrorCode.CONFLICT, f"worker {worker} is not free", worker=worker)
        if not self.is_ready(bead_id):
            raise SwarmError(ErrorCode.CONFLICT, f"bead {bead_id} is not ready ({bead.status})", bead_id=bead_id,
                             status=bead.status, assignee=bead.assignee)
        number = bead.attempt + 1
        self._bead_claimed(bead_id=bead_id, worker=worker, attempt=number,
                           session_id=attempt_session_id(self.workflow_id, bead_id, number), at=_now())
        return self.attempts[(bead_id, number)]

    def bead(self, bead_id: str) -> Bead:
        bead = self.beads.get(bead_id)
        if bead is None:
            raise SwarmError(ErrorCode.NOT_FOUND, f"no bead {bead_id} in this epic", bead_id=bead_id)
        return bead

    def join(self, name: str, nickname: str, worktree_path: str) -> None:
        if name not in self.workers:
            self._worker_joined(name=name, nickname=nickname, worktree_path=worktree_path, at=_now())

    def wait(self, worker: str) -> None:
        if self.workers[worker].status != "waiting":
            self._worker_waiting(name=worker, at=_now())

    def retire(self, worker: str) -> None:
        if self.workers[worker].status != "retired":
            self._worker_retired(name=worker, at=_now())

    def begun(self, a: Attempt, base_commit: str) -> None:
        if a.base_commit is None:
            self._attempt_begun(bead_id=a.bead_id, attempt=a.number, base_commit=base_commit)

    def leased(self, a: Attempt, patterns: list[str]) -> None:
        if a.open and not a.leased:
            self._leases_granted(worker=a.worker, bead_id=a.bead_id, attempt=a.number, patterns=patterns,
                                 mode="exclusive", at=_now())

    def lease_conflict(self, a: Attempt, files: list[str], held_by: list[str]) -> None:
        if a.open and not a.leased:
            self._lease_conflicted(worker=a.worker, bead_id=a.bead_id, attempt=a.number, files=files,
                                   held_by=held_by, at=_now())

    def find_scope_request(self, request_id: str) -> tuple[Attempt, ScopeRequest] | None:
        for a in self.attempts.values():
            for request in a.scope_requests:
                if request.request_id == request_id:
                    return a, request
        return None

    def request_scope(self, worker: str, request_id: str, paths: list[str], why: str) -> tuple[Attempt, ScopeRequest]:
        """Record ``worker``'s request for ``paths`` on its current bead (once per ``request_id``)."""
        found = self.find_scope_request(request_id)
        if found is not None:
            return found
        if worker not in self.workers:
            raise SwarmError(ErrorCode.NOT_FOUND, f"no worker {worker} in this epic", worker=worker)
        a = self.current_attempt(worker)
        if a is None or not a.open or not a.session_started:
            raise SwarmError(ErrorCode.CONFLICT, f"worker {worker} has no bead in progress: there is no scope to "
                                                 "widen", worker=worker)
        self._scope_requested(bead_id=a.bead_id, attempt=a.number, worker=worker, request_id=request_id,
                              paths=list(paths), why=why, at=_now())
        a = self.attempts[(a.bead_id, a.number)]  # the event changed this epic's own copy of it
        return a, self._scope_request(a, request_id)

    def widen(self, a: Attempt, request_id: str, added: list[str]) -> None:
        if self._scope_request(a, request_id).granted is None:
            self._bead_widened(bead_id=a.bead_id, attempt=a.number, request_id=request_id, added=list(added),
                               at=_now())

    def refuse_scope(self, a: Attempt, request_id: str, reason: str, held_by: list[str]) -> None:
        if self._scope_request(a, request_id).granted is None:
            self._scope_refused(bead_id=a.bead_id, attempt=a.number, request_id=request_id, reason=reason,
                                held_by=list(held_by), at=_now())

    def session_opened(self, a: Attempt, kickoff_turn_id: str | None) -> None:
        if not a.session_started:
            self._session_opened(bead_id=a.bead_id, attempt=a.number, kickoff_turn_id=kickoff_turn_id)

    def turn_handled(self, a: Attempt, turn_id: str, outcome: str, *, summary: str | None,
                     nudge: str | None) -> None:
        if turn_id not in self.seen:
            self._turn_handled(turn_id=turn_id, bead_id=a.bead_id, attempt=a.number, outcome=outcome,
                               summary=summary, nudge=nudge)

    def evidence_recorded(self, a: Attempt, evidence: VerificationEvidence) -> None:
        if a.open and a.evidence is None:
            self._evidence_recorded(bead_id=a.bead_id, attempt=a.number, evidence=msgspec.to_builtins(evidence))

    def handed_off(self, a: Attempt, turn_id: str, owner_file: str, handoff: dict[str, Any]) -> None:
        if a.open and turn_id not in self.seen:
            self._handed_off(turn_id=turn_id, bead_id=a.bead_id, attempt=a.number, owner_file=owner_file,
                             handoff=handoff)

    def handoff_mail_asked(self, a: Attempt) -> None:
        if a.handoff_mail is not None and not a.handoff_mail_asked:
            self._handoff_mail_asked(bead_id=a.bead_id, attempt=a.number, session_id=a.handoff_mail)

    def handoff_mail_turn_ended(self, a: Attempt, turn_id: str, outcome: str) -> None:
        if a.handoff_mail is not None and turn_id not in self.seen:
            self._handoff_mail_turn_ended(bead_id=a.bead_id, attempt=a.number, session_id=a.handoff_mail,
                                          turn_id=turn_id, outcome=outcome)

    def stale_session_closed(self, a: Attempt, session_id: str) -> None:
        if session_id in a.stale_sessions:
            self._stale_session_closed(bead_id=a.bead_id, attempt=a.number, session_id=session_id)

    def message_delivered(self, a: Attempt) -> None:
        if a.pending_message is not None:
            self._message_delivered(bead_id=a.bead_id, attempt=a.number)

    def committed(self, a: Attempt, commit: str | None, files: list[str]) -> None:
        if not a.committed:
            self._bead_committed(bead_id=a.bead_id, attempt=a.number, commit=commit, files=files, at=_now())

    def merged_as(self, a: Attempt, commit: str | None) -> None:
        if a.open:
            reason = f"Completed: {a.summary}" if a.summary else "Completed"
            self._bead_merged(bead_id=a.bead_id, attempt=a.number, commit=commit, reason=reason, at=_now())

    def reopen(self, a: Attempt, reason: str, conflict: ConflictRecord | None = None) -> None:
        if a.open:
            self._bead_reopened(bead_id=a.bead_id, attempt=a.number, reason=reason,
                                conflict=msgspec.to_builtins(conflict) if conflict else None, at=_now())

    def stop(self, reason: str) -> list[Attempt]:
        """The user stopped the swarm: every attempt whose worker is still at work is reopened (its bead is ready
        again, its next attempt starts from the branch tip). One whose work is done — verified, or committed — is
        left as it is, to be committed and merged on resume: nothing lands half. Returns the attempts reopened."""
        stopped = [a for a in self.open_attempts() if not (a.verified or a.committed)]
        for a in stopped:
            self._bead_stopped(bead_id=a.bead_id, attempt=a.number, reason=f"stopped: {reason}", at=_now())
        return [self.attempts[(a.bead_id, a.number)] for a in stopped]  # as the events left them

    def bounce(self, bead_id: str, reason: str, missing: list[str] | None = None) -> None:
        bead = self.bead(bead_id)
        if bead.status != "bounced":
            self._bead_bounced(bead_id=bead_id, reason=reason, missing=list(missing or []), at=_now())

    def released(self, a: Attempt, reason: str) -> None:
        if not a.leases_released:
            lease = self.leases.get(a.worker)
            held = lease.patterns if lease is not None and (lease.bead_id, lease.attempt) == (a.bead_id, a.number) \
                else []
            self._leases_released(worker=a.worker, bead_id=a.bead_id, attempt=a.number, reason=reason,
                                  patterns=list(held), at=_now())

    def session_closed(self, a: Attempt) -> None:
        if not a.session_closed:
            self._session_closed(bead_id=a.bead_id, attempt=a.number)

    def finish(self) -> None:
        if not self.finished:
            self._finished(at=_now())


# Until this module moved here, its events were stored as events of ``swarm_model`` (their topics say so).
recorded_as(__name__, "autarch.services.orchestrator.swarm_model")

