"""Beads (seed 002): the live graph a swarm works from, its workers and their file leases, on the wire.

An approved plan whose pulses carry bead fields becomes an epic (one per workflow, the epic id is the
workflow id) with one bead per pulse. Ready work is an ``open`` bead whose ``blocks`` dependencies are
all ``closed``; it is ranked by impact (:class:`RankedBead`). The orchestrator answers these on
``autarch.svc.orchestrator.<verb>``; the gateway serves them at ``/api/beads``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from .base import UUID_PATTERN, Command, Query, Reply
from .http import CLEAN_TEXT, TITLE, Reason

__all__ = [
    "BEAD_ID",
    "MAX_SCOPE_WAIT",
    "REQUEST_SCOPE_VERB",
    "REQUIRED_FIELDS",
    "AddDependency",
    "AddDependencyBody",
    "BeadErrorCode",
    "BeadList",
    "BeadStatus",
    "BeadView",
    "CloseBead",
    "CloseBeadBody",
    "ConflictRecord",
    "CreateBead",
    "CreateBeadBody",
    "Dependency",
    "DependencyType",
    "EditBead",
    "EditBeadBody",
    "EvidenceList",
    "GetBead",
    "GetEvidence",
    "GetHandoffs",
    "GetSwarm",
    "HandoffEntry",
    "HandoffManifest",
    "LeaseMode",
    "LeaseOrigin",
    "LeaseView",
    "ListBeads",
    "RankedBead",
    "ReadyBeads",
    "ReadyList",
    "RequestScope",
    "ScopeAnswer",
    "SwarmMode",
    "SwarmView",
    "TddSteps",
    "TddStepsBody",
    "TestingMode",
    "VerificationEvidence",
    "VerificationRun",
    "WorkerDiscipline",
    "WorkerStatus",
    "WorkerView",
]

BEAD_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$(?!\n)"
BeadId = Annotated[str, msgspec.Meta(pattern=BEAD_ID)]
EpicId = Annotated[str, msgspec.Meta(pattern=UUID_PATTERN)]
# Titles, descriptions and reasons reach agents and terminals: the HTTP API's text rules (contracts/http.py).
Title = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=TITLE)]
Text = Annotated[str, msgspec.Meta(max_length=100_000, pattern=CLEAN_TEXT)]
Path = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
CommandLine = Annotated[str, msgspec.Meta(min_length=1, max_length=10_000)]

# What a person sends over HTTP is held to more than the records: a blank verify command would pass every
# verification, a blank or control-character path leases nothing a worker writes (and reaches terminals raw).
_TRIMMED_LINE = r"^[^\s\x00-\x1f\x7f-\x9f](?:[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f])?$(?!\n)"
"""One line, no control character, neither starting nor ending with a space."""
BodyPath = Annotated[str, msgspec.Meta(min_length=1, max_length=1024, pattern=_TRIMMED_LINE)]
"""A file (or glob) of the repository, as a person gives it: visible, one line, no surrounding spaces."""
BodyCommand = Annotated[str, msgspec.Meta(min_length=1, max_length=10_000, pattern=TITLE)]
"""A shell command line, as a person gives it: one line with something visible, no control character."""
BodyRef = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=_TRIMMED_LINE)]
"""A decision id (``D1``) or a learning file, as a person gives it."""
Priority = Annotated[int, msgspec.Meta(ge=0, le=4)]

BeadStatus = Literal["open", "in_progress", "closed", "bounced"]
DependencyType = Literal["blocks", "parent-child"]
TestingMode = Literal["standard", "tdd-required"]
LeaseMode = Literal["exclusive", "shared"]
LeaseOrigin = Literal["coordinator", "worker"]
"""Who took a lease: the coordinator for a worker's bead (its scope), or the worker itself (a reservation)."""
SwarmMode = Literal["swarm", "standalone"]
"""``standalone``: preflight said a swarm is not safe, so one worker runs."""
WorkerStatus = Literal["idle", "working", "waiting", "retired"]
"""``waiting``: its next bead's files are leased by another holder; the release wakes it."""

REQUIRED_FIELDS: tuple[str, ...] = ("files", "verify")
"""Fields a bead cannot be worked without (seed 002: "do not guess from free-form prose"); a
``tdd-required`` bead needs ``tdd_steps`` too. A bead missing one is bounced back to planning."""


class BeadErrorCode:
    """Error codes of the bead verbs, beside the shared ones (``not_found``, ``invalid_request``)."""

    NO_EPIC = "no_epic"
    """The workflow has no epic yet (its plan was not approved, or it runs pulses, not beads)."""
    DUPLICATE_BEAD = "duplicate_bead"
    CYCLE = "dependency_cycle"
    NOT_CLOSABLE = "not_closable"
    NOT_EDITABLE = "not_editable"


class Dependency(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    bead_id: BeadId
    """The bead this one depends on."""
    type: DependencyType = "blocks"
    """``blocks``: this bead is not ready until that one is closed; ``parent-child``: grouping only."""


class TddSteps(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    red: CommandLine
    """Run before production code: must fail."""
    green: CommandLine
    """Run after: must pass."""


class TddStepsBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """:class:`TddSteps` as a person sends them over HTTP (each a :data:`BodyCommand`)."""

    red: BodyCommand
    """Run before production code: must fail."""
    green: BodyCommand
    """Run after: must pass."""


class VerificationRun(msgspec.Struct, kw_only=True):
    """One command of a bead's verification, as the runner ran it when the worker asked to close the bead."""

    step: Literal["verify", "tdd-red", "tdd-green", "decisions"]
    """``decisions``: the bead's decision references checked against ``history/<feature>/CONTEXT.md`` when that
    file exists (a reference it does not define fails the close)."""
    command: str
    exit_code: int | None
    """None: it did not finish (timed out) or could not start."""
    passed: bool
    """``tdd-red``: it failed, as the red step must; the others: it exited 0."""
    output_excerpt: str = ""
    output_digest: str = ""
    """``sha256:<hex>`` of the whole output the tool returned (stdout, stderr)."""
    ran_at: datetime | None = None
    duration_ms: float = 0.0


class VerificationEvidence(msgspec.Struct, kw_only=True):
    """A fresh verification of one attempt at a bead: every run, and whether they all passed."""

    bead_id: str
    testing_mode: TestingMode = "standard"
    passed: bool
    runs: list[VerificationRun] = []
    attempt: int = 0
    path: str | None = None
    """Where it is written in the bead's commit (``history/<feature>/verification/<bead-id>.md``)."""
    recorded_at: datetime | None = None


class WorkerDiscipline(msgspec.Struct, kw_only=True):
    """What a worker's session must keep (seed 002): the runner enforces it on the session's tool calls."""

    bead_id: str
    verify: list[str]
    """Run fresh when the worker calls ``complete_pulse``; a failure refuses the close in the same turn."""
    testing_mode: TestingMode = "standard"
    tdd_steps: TddSteps | None = None
    """``tdd-required``: the red command must have failed in this session before a production file is edited."""
    read_first: list[str] = []
    """Files the session must read (``read_file``) before any write or edit: a resumed worker's handoff list."""
    handoff_at: float = 0.65
    """Share of the context window past which the worker stops after its current step and hands off."""
    bead_file: str | None = None
    """The bead's card in the worktree (``.pulse/beads/<id>.md``): after an in-turn compaction the worker must
    read it again (its scope and decisions) before any write or edit."""
    decision_refs: list[str] = []
    """The bead's locked decisions (``D1`` …): at the close each must be defined in ``context_file`` if it exists."""
    context_file: str | None = None
    """``history/<feature>/CONTEXT.md``, where the feature's locked decisions live (seed 002)."""


class GetEvidence(Query, kw_only=True):
    epic_id: EpicId
    bead_id: BeadId


class EvidenceList(Reply, kw_only=True):
    epic_id: str
    bead_id: str
    evidence: list[VerificationEvidence] = []
    """Each verification recorded for the bead, oldest first (the last passing one closed it)."""


class HandoffEntry(msgspec.Struct, kw_only=True):
    """One line of ``.pulse/handoffs/manifest.json`` (seed 002): where a handoff is and what it says to do."""

    handoff_id: str
    owner_id: str
    owner_file: str
    """``.pulse/handoffs/worker-<name>.json`` (``single-worker.json`` standalone)."""
    summary: str
    next_action: str
    paused_at: datetime
    status: str = "ready_to_resume"
    bead_id: str | None = None


class GetHandoffs(Query, kw_only=True):
    epic_id: EpicId


class HandoffManifest(Reply, kw_only=True):
    """An epic's handoffs: the manifest, and each handoff document as written (the seed's schema 2.0)."""

    epic_id: str
    handoffs: list[HandoffEntry] = []
    documents: list[dict[str, Any]] = []


class ConflictRecord(msgspec.Struct, kw_only=True):
    """Why an attempt did not land: a merge conflict or a lease held by another worker."""

    kind: Literal["merge", "lease"]
    attempt: int
    files: list[str]
    holder: str | None = None
    """``lease``: who held the files."""
    landed_since: list[str] = []
    """``merge``: the commits that landed since the attempt began."""
    at: datetime | None = None


class BeadView(Reply, kw_only=True):
    """One bead, as the graph holds it now."""

    id: str
    epic_id: str
    title: str
    description: str = ""
    status: BeadStatus
    dependencies: list[Dependency] = []
    files: list[str] = []
    verify: list[str] = []
    verification_evidence: str | None = None
    testing_mode: TestingMode = "standard"
    tdd_steps: TddSteps | None = None
    decision_refs: list[str] = []
    learning_refs: list[str] = []
    priority: int = 2
    """0 (critical) … 4 (backlog), as beads counts it."""
    assignee: str | None = None
    """The worker (its registered name) holding the claim while ``in_progress``."""
    attempt: int = 0
    """Claims so far; each claim is a new attempt (a fresh start from the workflow branch tip)."""
    close_reason: str | None = None
    bounce_reason: str | None = None
    commit: str | None = None
    """The commit on the workflow branch once closed by a merge."""
    conflicts: list[ConflictRecord] = []
    created_by: Literal["plan", "user"] = "plan"
    created_at: datetime | None = None
    updated_at: datetime | None = None


class BeadList(Reply, kw_only=True):
    epic_id: str
    beads: list[BeadView]
    critical_path: list[str] = []
    """The longest chain of ``blocks`` dependencies among beads not yet closed, first to last."""


class RankedBead(msgspec.Struct, kw_only=True):
    """A ready bead with its impact score and what the score is made of (as ``bv --robot-priority``)."""

    bead_id: str
    title: str
    score: float
    pagerank: float
    betweenness: float
    blocker_ratio: float
    """Share of the other open beads that wait on this one, directly or not."""
    staleness: float
    """0 … 1: how long it has been ready compared with the oldest ready bead."""
    priority: int
    on_critical_path: bool
    unblocks: list[str] = []
    """Beads that become ready (all their blockers closed) when this one closes."""


class ReadyList(Reply, kw_only=True):
    epic_id: str
    ready: list[RankedBead]
    critical_path: list[str] = []


class LeaseView(msgspec.Struct, kw_only=True):
    """One file reservation: a path or glob, relative to the worktree root."""

    pattern: str
    holder: str
    mode: LeaseMode = "exclusive"
    bead_id: str | None = None
    expires_at: datetime | None = None
    origin: LeaseOrigin = "coordinator"
    """``coordinator``: granted with a claim or a widening, the holder's bead scope (the only files its writes may
    change); ``worker``: the worker's own reservation (``file_reservation_paths``), which keeps others off the
    files but is no licence to write them."""


class WorkerView(msgspec.Struct, kw_only=True):
    name: str
    """The registered name: the identity used for claims, leases and mail."""
    nickname: str
    """The runtime nickname (``w1``, ``w2`` …)."""
    status: WorkerStatus
    bead_id: str | None = None
    attempt: int = 0
    session_id: str | None = None
    worktree_path: str | None = None
    beads_closed: list[str] = []


class SwarmView(Reply, kw_only=True):
    epic_id: str
    mode: SwarmMode
    """``standalone``: preflight said a swarm is not safe, so one worker runs."""
    max_workers: int
    workers: list[WorkerView] = []
    leases: list[LeaseView] = []
    beads: list[BeadView] = []
    merged: list[str] = []
    """Bead ids in the order they landed on the workflow branch."""
    evidence: list[VerificationEvidence] = []
    """Every verification recorded (the passing one of each landed bead among them), in claim order."""
    handoffs: list[HandoffEntry] = []
    """The manifest of the workers' handoffs at the context limit."""


# --- requests -----------------------------------------------------------------------------------------


class ListBeads(Query, kw_only=True):
    epic_id: EpicId
    status: BeadStatus | None = None


class GetBead(Query, kw_only=True):
    epic_id: EpicId
    bead_id: BeadId


class ReadyBeads(Query, kw_only=True):
    epic_id: EpicId


class GetSwarm(Query, kw_only=True):
    epic_id: EpicId


class CreateBead(Command, kw_only=True):
    """A bead made by a person (``created_by`` user): checked like a planned one."""

    epic_id: EpicId
    id: BeadId | None = None
    """None: the next free ``u<n>``."""
    title: Title
    description: Text = ""
    dependencies: list[Dependency] = []
    files: list[Path] = []
    verify: list[CommandLine] = []
    verification_evidence: Path | None = None
    testing_mode: TestingMode = "standard"
    tdd_steps: TddSteps | None = None
    decision_refs: list[str] = []
    learning_refs: list[str] = []
    priority: Priority = 2


class EditBead(Command, kw_only=True):
    """Change fields of an ``open`` or ``bounced`` bead (a bounced bead that gains its missing fields reopens)."""

    epic_id: EpicId
    bead_id: BeadId
    title: Title | None = None
    description: Text | None = None
    files: list[Path] | None = None
    verify: list[CommandLine] | None = None
    verification_evidence: Path | None = None
    testing_mode: TestingMode | None = None
    tdd_steps: TddSteps | None = None
    decision_refs: list[str] | None = None
    learning_refs: list[str] | None = None
    priority: Priority | None = None


class AddDependency(Command, kw_only=True):
    epic_id: EpicId
    bead_id: BeadId
    depends_on: BeadId
    type: DependencyType = "blocks"


class CloseBead(Command, kw_only=True):
    """Close a bead by hand (work done elsewhere, or dropped): it no longer blocks anything."""

    epic_id: EpicId
    bead_id: BeadId
    reason: Reason


# --- a worker's request for more files (its bead's scope) ----------------------------------------------

REQUEST_SCOPE_VERB = "request_scope"
MAX_SCOPE_WAIT = 90
"""Seconds a ``request_scope`` may wait for files another worker holds (the tool call's time bounds it)."""


class RequestScope(Command, kw_only=True):
    """A worker asks the coordinator to widen its current bead by ``paths`` (tool ``request_scope``).

    The request is recorded (``bead:scope_requested``), then answered: widened (``bead:widened``: the paths
    join the bead's files and the worker's bead lease) or refused (``bead:scope_refused``, with the reason).
    The same ``request_id`` twice records and answers once."""

    epic_id: EpicId
    worker: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    """The worker's registered name (the tools service sets it from the session, never the model)."""
    request_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    paths: Annotated[list[Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]],
                     msgspec.Meta(min_length=1, max_length=50)]
    why: Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
    wait_seconds: Annotated[int, msgspec.Meta(ge=0, le=MAX_SCOPE_WAIT)] = 0
    """How long to wait for paths another worker holds to be released (0: answer at once)."""


class ScopeAnswer(Reply, kw_only=True):
    """The coordinator's answer to a :class:`RequestScope`."""

    request_id: str
    granted: bool
    bead_id: str | None = None
    added: list[str] = []
    """Paths that joined the bead's files (empty when granted because all were in it already)."""
    files: list[str] = []
    """The bead's files after the answer: the worker's scope."""
    reason: str | None = None
    """Why it was refused."""
    held_by: list[str] = []
    """Workers holding paths of the request, when that is why it was refused."""


# --- HTTP bodies ---------------------------------------------------------------------------------------


class CreateBeadBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/beads``."""

    epic_id: EpicId
    id: BeadId | None = None
    title: Title
    description: Text = ""
    dependencies: list[Dependency] = []
    files: list[BodyPath] = []
    verify: list[BodyCommand] = []
    verification_evidence: BodyPath | None = None
    testing_mode: TestingMode = "standard"
    tdd_steps: TddStepsBody | None = None
    decision_refs: list[BodyRef] = []
    learning_refs: list[BodyRef] = []
    priority: Priority = 2


class EditBeadBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``PATCH /api/beads/{epic_id}/{bead_id}``."""

    title: Title | None = None
    description: Text | None = None
    files: list[BodyPath] | None = None
    verify: list[BodyCommand] | None = None
    verification_evidence: BodyPath | None = None
    testing_mode: TestingMode | None = None
    tdd_steps: TddStepsBody | None = None
    decision_refs: list[BodyRef] | None = None
    learning_refs: list[BodyRef] | None = None
    priority: Priority | None = None


class AddDependencyBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/beads/{epic_id}/{bead_id}/dependencies``."""

    depends_on: BeadId
    type: DependencyType = "blocks"


class CloseBeadBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/beads/{epic_id}/{bead_id}/close``."""

    reason: Reason
