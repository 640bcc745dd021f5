"""Every event Autarch records, as one tagged union named as seed 003 names events.

An event's ``type`` is its seed name (``workflow:created``); its subject on the stream is
derived by :func:`event_subject`. Adding an event: a new Struct here, a member of
:data:`AnyEvent`, and a fixture in ``tests/contracts/fixtures/events``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, TypeVar

import msgspec

from . import subjects
from .beads import BeadView, ConflictRecord, LeaseMode, VerificationEvidence, WorkerStatus
from .loops import AnchorStrategy, ContextStrategy, CreatedBy, IterationStatus, NotifyTarget, Signal
from .mail import MailMessage
from .workflows import FixPulseView

__all__ = [
    "MAIL_EVENTS",
    "SWARM_EVENTS",
    "AnyEvent",
    "BeadBounced",
    "BeadClaimed",
    "BeadClosed",
    "BeadCreated",
    "BeadEvidenceRecorded",
    "BeadReopened",
    "BeadScopeRefused",
    "BeadScopeRequested",
    "BeadUpdated",
    "BeadWidened",
    "Event",
    "LeaseConflicted",
    "LeaseGranted",
    "LeaseReleased",
    "LoopAborted",
    "LoopBlocked",
    "LoopCompleted",
    "LoopEvent",
    "LoopFailed",
    "LoopIterationCompleted",
    "LoopIterationStarted",
    "LoopPaused",
    "LoopResumed",
    "LoopStarted",
    "MailPosted",
    "PreflightCompleted",
    "PreflightEvent",
    "PreflightStarted",
    "PulseCompleted",
    "PulseCompletionRejected",
    "PulseEvent",
    "PulseStarted",
    "SessionCompleted",
    "SessionError",
    "SessionEvent",
    "SessionStarted",
    "SwarmEvent",
    "SwarmFinished",
    "SwarmStarted",
    "TurnCompleted",
    "TurnEvent",
    "TurnStarted",
    "TurnToolCompleted",
    "TurnToolStarted",
    "WorkerHandedOff",
    "WorkerJoined",
    "WorkerStatusChanged",
    "WorkflowAbandoned",
    "WorkflowApprovalNeeded",
    "WorkflowBaselineRecorded",
    "WorkflowChangesRequested",
    "WorkflowCompleted",
    "WorkflowCreated",
    "WorkflowError",
    "WorkflowEvent",
    "WorkflowFixRoundOpened",
    "WorkflowHalted",
    "WorkflowNoteTaken",
    "WorkflowResumed",
    "WorkflowReviewCommentAdded",
    "WorkflowSessionAssigned",
    "WorkflowStageChanged",
    "current_shape",
    "decode_as",
    "decode_event",
    "event_subject",
    "upcast",
]


class Event(msgspec.Struct, kw_only=True, tag_field="type"):
    """Fields every event carries. Which run it belongs to (the first token of its subject, :attr:`run_id`) each
    family names for itself: ``workflow_id`` for a workflow's events (its swarm's too), ``session_id`` for a loop
    session's, ``run_id`` (a workflow or a loop session, as in ``contracts.git``) for an agent session's."""

    aggregate_kind: ClassVar[str]
    occurred_at: datetime
    schema_version: int = 1
    """The version of this event type's schema (``$id`` of docs/contracts/schemas/events.<Name>.json): within
    a version fields are only added, with defaults; anything else is a new version (docs/contracts/README.md).
    Defaulted, so events stored before the field existed decode as version 1."""

    @property
    def run_id(self) -> str:
        """The run (workflow, loop session, or ``_`` for none) whose stream the event is on."""
        raise NotImplementedError  # every family below says which of its fields it is

    @property
    def aggregate_id(self) -> str:
        return self.run_id


class WorkflowEvent(Event, kw_only=True):
    """Events of the Workflow aggregate (its id is the workflow id)."""

    aggregate_kind = "workflow"
    workflow_id: str
    """The workflow the event belongs to."""

    @property
    def run_id(self) -> str:
        return self.workflow_id


class WorkflowCreated(WorkflowEvent, tag="workflow:created", kw_only=True):
    """A user asked for a change; the workflow starts in the scoping stage."""

    title: str
    request: str
    repo: str
    base_branch: str


class WorkflowError(WorkflowEvent, tag="workflow:error", kw_only=True):
    """Something failed; the workflow stays in its current stage."""

    stage: str
    message: str


class WorkflowApprovalNeeded(WorkflowEvent, tag="workflow:approval_needed", kw_only=True):
    """An agent submitted the card of ``stage``; the workflow waits for the user to approve or request changes.

    ``artifact`` is the card as the agent submitted it (for ``review``: the recommendation and summary;
    its comments came as ``workflow:review_comment_added``).
    """

    stage: str
    artifact: dict[str, Any]
    version: int | None = None
    """The workflow's version with this card recorded: what an action link names to answer this card only."""


class WorkflowStageChanged(WorkflowEvent, tag="workflow:stage_changed", kw_only=True):
    """The workflow moved on (on approval, or automatically from execution to review)."""

    from_stage: str
    to_stage: str
    path: str | None = None
    """``quick`` or ``full``, chosen at scope approval."""
    source: str | None = None
    """For a move made by the user's approval: where it came from (``api``, or the channel of an action link:
    ``telegram``, ``slack``, …); None for an automatic move and in events recorded before sources were."""


class WorkflowCompleted(WorkflowEvent, tag="workflow:completed", kw_only=True):
    """The user approved the review: the workflow is done."""

    recommendation: str | None = None


class WorkflowChangesRequested(WorkflowEvent, tag="workflow:changes_requested", kw_only=True):
    """The user sent the waiting card back; the agent revises and resubmits (``fix`` false), or, at review, the
    work goes back to execution to fix the review's comments (``fix`` true: ``workflow:fix_round_opened`` says
    how)."""

    stage: str
    feedback: str
    fix: bool = False
    source: str | None = None
    """Where the user's request came from (as for ``workflow:stage_changed``); None when the plan check sent the
    plan back, and in events recorded before sources were."""


class WorkflowFixRoundOpened(WorkflowEvent, tag="workflow:fix_round_opened", kw_only=True):
    """A change request at review sent the work back: these fix pulses run in execution (the stage change
    follows), each one commit on the workflow branch, then the review runs again."""

    round: int
    """1 for the workflow's first fix round, then 2, …"""
    feedback: str
    comment_ids: list[str]
    """The review comments sent back to be fixed."""
    pulses: list[FixPulseView]
    """The fix pulses, in the order they run: each fixes the comments on one file (the last, with no file, those
    on no file)."""


class WorkflowNoteTaken(WorkflowEvent, tag="workflow:note_taken", kw_only=True):
    """An agent stored a note for the stage it works in (``take_note``)."""

    note_id: str
    stage: str
    session_id: str
    note: str


class WorkflowBaselineRecorded(WorkflowEvent, tag="workflow:baseline_recorded", kw_only=True):
    """Preflight recorded a pre-existing build/lint/test issue, so pulses are not blamed for it."""

    baseline_id: str
    issue_type: str
    source: str
    pattern: str
    file_path: str | None = None
    description: str | None = None


class WorkflowReviewCommentAdded(WorkflowEvent, tag="workflow:review_comment_added", kw_only=True):
    """The review agent commented on a line, a file or the whole change."""

    comment_id: str
    kind: str
    severity: str
    category: str
    description: str
    file_path: str | None = None
    start_line: int | None = None
    end_line: int | None = None


class WorkflowSessionAssigned(WorkflowEvent, tag="workflow:session_assigned", kw_only=True):
    """The orchestrator opened an agent session for one step of the workflow.

    ``step`` is ``scoping``, ``research``, ``planning``, ``preflight``, ``review`` or a pulse run's id;
    follow the session's ``session:*``/``turn:*`` events by its id.
    """

    step: str
    session_id: str
    role: str


class WorkflowHalted(WorkflowEvent, tag="workflow:halted", kw_only=True):
    """Orchestration waits for a person: ``reason`` is ``unresolved_issues``, ``pulse_failed``, ``stopped``,
    ``extension_requested``, ``questions``, ``error`` or ``disk_full`` (``details.path``: what could not be
    written; it resumes by itself once that has room); ``details`` holds the questions, the request…"""

    stage: str
    reason: str
    message: str
    pulse_id: str | None = None
    details: dict[str, Any] = {}
    version: int | None = None
    """The workflow's version with this halt recorded: what a Resume or Stop action link names to answer this halt
    only."""


class WorkflowResumed(WorkflowEvent, tag="workflow:resumed", kw_only=True):
    """The user let a halted workflow continue (resume, extension approval or answers)."""

    stage: str
    reason: str
    message: str | None = None
    source: str | None = None
    """Where the resume came from (``api``, or the channel of an action link: ``telegram``, ``slack``, …); None
    for a halt lifted by itself (disk space freed) and in events recorded before sources were."""


class WorkflowAbandoned(WorkflowEvent, tag="workflow:abandoned", kw_only=True):
    """The workflow cannot go on (preflight failed or timed out), or the user ended it (an action link's Stop);
    its worktree is removed. Final."""

    stage: str
    reason: str
    source: str | None = None
    """Who ended it: the channel of the action link (or ``api``); None when the system abandoned it."""


class PreflightEvent(WorkflowEvent, kw_only=True):
    """Events of a workflow's preflight (subject kind ``preflight``, aggregate id the workflow id)."""

    aggregate_kind = "preflight"


class PreflightStarted(PreflightEvent, tag="preflight:started", kw_only=True):
    """Execution began: the workflow branch and worktree exist and the preflight agent sets up the environment."""

    branch: str
    worktree_path: str
    base_commit: str


class PreflightCompleted(PreflightEvent, tag="preflight:completed", kw_only=True):
    """Preflight ended: ``completed`` (pulses start) or ``failed`` (the workflow is abandoned)."""

    status: str
    summary: str | None = None
    setup_commands: list[str] = []
    build_success: bool | None = None
    baselines_recorded: int = 0
    error: str | None = None


class PulseEvent(WorkflowEvent, kw_only=True):
    """Events of one pulse run (subject kind ``pulse``, aggregate id the pulse run's id)."""

    aggregate_kind = "pulse"
    pulse_id: str

    @property
    def aggregate_id(self) -> str:
        return self.pulse_id


class PulseStarted(PulseEvent, tag="pulse:started", kw_only=True):
    """A pulse run began on its own branch off the workflow branch, with a fresh agent session."""

    planned_pulse_id: str
    attempt: int
    title: str
    pulse_branch: str
    base_commit: str
    fix_round: int | None = None
    """The fix round whose review comments this pulse fixes; None for a pulse of the plan."""


class PulseCompletionRejected(PulseEvent, tag="pulse:completion_rejected", kw_only=True):
    """``complete_pulse`` was refused because recent tool calls failed; the agent was told to fix them.

    ``escape_hatch`` is true once the rejection told the agent about ``unresolvedIssues``."""

    rejections: int
    failures: list[str]
    escape_hatch: bool = False


class PulseCompleted(PulseEvent, tag="pulse:completed", kw_only=True):
    """A pulse run ended: ``succeeded`` (checkpoint commit on the workflow branch), ``failed`` or ``stopped``
    (a recovery checkpoint on the kept pulse branch when there were changes)."""

    status: str
    commit: str | None = None
    diff_artifact_id: str | None = None
    description: str | None = None
    files_changed: list[str] = []
    has_unresolved_issues: bool = False
    unresolved_issues: list[dict[str, Any]] = []
    is_recovery_checkpoint: bool = False
    failure_reason: str | None = None


class SessionEvent(Event, kw_only=True):
    """An agent session's event: its subject carries the session id, so one wildcard follows one session.

    Version 2: the run is ``run_id``. Version 1 (before issue 33) carried it as ``workflow_id``, a loop session's id
    included; such an event, on the stream or in a file, is read in today's shape by :func:`decode_event` /
    :func:`upcast`."""

    aggregate_kind = "session"
    run_id: str  # a field here: what Event.run_id gives for every family
    """The run the session serves: a workflow, a loop session (an iteration's agent), or ``_`` for none (a channel
    discussion)."""
    session_id: str
    schema_version: int = 2

    @property
    def aggregate_id(self) -> str:
        return self.session_id


class TurnEvent(SessionEvent, kw_only=True):
    # Kind "turn" (aggregate id still the session) keeps turn:started apart from session:started on the
    # stream: the subject's last tokens read back as the seed name (subjects.event_type_from_subject).
    aggregate_kind = "turn"
    turn_id: str


class SessionStarted(SessionEvent, tag="session:started", kw_only=True):
    """An agent session was opened (by a workflow stage or a channel)."""

    role: str
    model: str
    root: str
    channel_id: str | None = None


class SessionCompleted(SessionEvent, tag="session:completed", kw_only=True):
    """The session was closed; it takes no more messages."""

    reason: str


class SessionError(SessionEvent, tag="session:error", kw_only=True):
    """A turn failed for a reason the model cannot fix (the model API refused, a bug); the session stays usable."""

    message: str
    turn_id: str | None = None


class TurnStarted(TurnEvent, tag="turn:started", kw_only=True):
    """A turn began with a user message (or the session's kickoff)."""

    index: int
    """0 for the kickoff turn, then 1, 2, …"""
    text: str


class TurnToolStarted(TurnEvent, tag="turn:tool_started", kw_only=True):
    """The runner is about to run one tool call of the model."""

    tool_use_id: str
    tool: str
    input: dict[str, Any]


class TurnToolCompleted(TurnEvent, tag="turn:tool_completed", kw_only=True):
    """A tool call finished; ``output`` is exactly what the model is given back."""

    tool_use_id: str
    tool: str
    output: str
    is_error: bool
    duration_ms: float


class TurnCompleted(TurnEvent, tag="turn:completed", kw_only=True):
    """A turn ended: the full text and thoughts (deltas may have been missed), usage, cost and outcome.

    ``outcome`` is ``block`` (``tool`` + ``arguments``: the block tool, e.g. ``submit_research``, or
    ``complete_review``), ``end_turn``, ``cancelled``, ``error``, ``budget_exceeded``, ``step_limit``,
    ``handoff``, ``refusal`` (``detail`` quotes the model) or ``context_overflow``.
    """

    text: str
    thoughts: str
    outcome: str
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    detail: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    model_calls: int = 0
    evidence: VerificationEvidence | None = None
    """A swarm worker's ``complete_pulse``: the fresh verification the runner ran before accepting it."""
    tokens_used_pct: float | None = None
    """``handoff``: the share of the context window the worker's last request used."""


class LoopEvent(Event, kw_only=True):
    """Events of a Pulse Protocol loop session (seed 001). The session id is the run token of their subject, so a
    client follows one session exactly as it follows one workflow (``/api/events?workflow=<session id>``).

    Version 2: the session's id is ``session_id``. Version 1 (before issue 33) carried it as ``workflow_id``; such
    an event, on the stream or in a file, is read in today's shape by :func:`decode_event` / :func:`upcast`."""

    aggregate_kind = "loop"
    session_id: str
    """The loop session."""
    schema_version: int = 2

    @property
    def run_id(self) -> str:
        return self.session_id


class LoopStarted(LoopEvent, tag="loop:started", kw_only=True):
    """A loop session was accepted (status ``pending``): its branch exists and its first iteration is being
    prepared; that iteration's ``loop:iteration_started`` makes it ``running``."""

    project_name: str
    project_path: str
    goal: str
    max_iterations: int
    branch_name: str
    created_by: CreatedBy
    context_strategy: ContextStrategy
    anchor_turn_id: str | None = None
    notify: list[NotifyTarget] = []


class LoopIterationStarted(LoopEvent, tag="loop:iteration_started", kw_only=True):
    """An iteration's context was built and its agent turn dispatched."""

    iteration_number: int
    max_iterations: int
    agent_session_id: str
    anchor_strategy: AnchorStrategy
    anchor_turn_id: str | None = None
    context_tokens: int = 0


class LoopIterationCompleted(LoopEvent, tag="loop:iteration_completed", kw_only=True):
    """An iteration ended (``status`` complete, failed or timeout) with its one signal."""

    iteration_number: int
    max_iterations: int
    status: IterationStatus
    signal: Signal
    signal_source: str
    output_summary: str
    reason: str | None = None
    commit_hash: str | None = None
    files_changed: list[str] = []
    tokens_used: int = 0
    cost_usd: float = 0.0
    anchor_hint_next: str | None = None
    notify: list[NotifyTarget] = []


class LoopPaused(LoopEvent, tag="loop:paused", kw_only=True):
    """The session paused after an iteration, as the user asked."""

    iteration_number: int


class LoopResumed(LoopEvent, tag="loop:resumed", kw_only=True):
    """A blocked or paused session runs again."""

    message: str | None = None


class LoopBlocked(LoopEvent, tag="loop:blocked", kw_only=True):
    """The session waits for a person, who may resume it: a BLOCKED signal, an iteration that failed (the model API
    refusing every retry, a refusal, a spent budget) or timed out, the no-progress breaker, a spent session budget,
    or a step another service refused."""

    reason: str
    iteration_number: int
    notify: list[NotifyTarget] = []


class LoopCompleted(LoopEvent, tag="loop:completed", kw_only=True):
    """The goal is reached (COMPLETE) or the iteration limit is: the session is over."""

    reason: str
    iterations: int
    commits: int
    notify: list[NotifyTarget] = []


class LoopFailed(LoopEvent, tag="loop:failed", kw_only=True):
    """The session cannot go on: its project repository is gone or no longer a git repository, or the git service
    no longer knows its branch. Final: the open iteration ended without a commit."""

    reason: str
    notify: list[NotifyTarget] = []
    iteration_number: int | None = None
    """The session's last iteration when it failed (0: it failed before its first one started); None in events
    sent before it was given."""


class LoopAborted(LoopEvent, tag="loop:aborted", kw_only=True):
    """The user stopped the session."""

    reason: str
    iteration_number: int


class SwarmEvent(Event, kw_only=True):
    """Events of a workflow's epic (seed 002 beads, workers, leases): ``workflow_id`` is the epic id."""

    aggregate_kind = "swarm"
    workflow_id: str

    @property
    def run_id(self) -> str:
        return self.workflow_id


class SwarmStarted(SwarmEvent, tag="swarm:started", kw_only=True):
    """The approved plan became an epic and execution's workers start."""

    mode: str
    """``swarm`` or ``standalone`` (preflight advised one worker)."""
    max_workers: int
    beads: int


class SwarmFinished(SwarmEvent, tag="swarm:finished", kw_only=True):
    """Every bead is closed; the workflow branch holds one commit per bead."""

    merged: list[str]


class BeadCreated(SwarmEvent, tag="bead:created", kw_only=True):
    bead: BeadView


class BeadUpdated(SwarmEvent, tag="bead:updated", kw_only=True):
    """A person edited the bead or added a dependency."""

    bead: BeadView


class BeadBounced(SwarmEvent, tag="bead:bounced", kw_only=True):
    """A bead lacks a field its worker needs; it goes back to planning (or to the person who made it)."""

    bead_id: str
    reason: str
    missing: list[str] = []


class BeadEvidenceRecorded(SwarmEvent, tag="bead:evidence", kw_only=True):
    """A worker's verification of its bead passed: the runs, as written into the bead's commit."""

    bead_id: str
    evidence: VerificationEvidence


class WorkerHandedOff(SwarmEvent, tag="worker:handoff", kw_only=True):
    """A worker's context passed its limit: it stopped after its step and left a handoff (the seed's schema
    2.0, in ``handoff``); a fresh session of the same worker resumes the bead from it."""

    worker: str
    bead_id: str
    owner_file: str
    handoff: dict[str, Any]


class BeadClaimed(SwarmEvent, tag="bead:claimed", kw_only=True):
    bead_id: str
    worker: str
    attempt: int
    session_id: str | None = None


class BeadReopened(SwarmEvent, tag="bead:reopened", kw_only=True):
    """An attempt did not land (a merge conflict, a lease that lapsed, a lease held by another) or the user stopped
    the swarm (``reason`` ``stopped: …``): ready again."""

    bead_id: str
    attempt: int
    reason: str
    conflict: ConflictRecord | None = None


class BeadScopeRequested(SwarmEvent, tag="bead:scope_requested", kw_only=True):
    """A worker asked for files beyond its bead's (tool ``request_scope``): the request as it made it."""

    bead_id: str
    worker: str
    attempt: int
    request_id: str
    paths: list[str]
    why: str


class BeadWidened(SwarmEvent, tag="bead:widened", kw_only=True):
    """The coordinator granted a scope request: ``added`` joined the bead's files and the worker's lease."""

    bead_id: str
    worker: str
    request_id: str
    added: list[str]
    files: list[str]
    """The bead's files after the widening."""


class BeadScopeRefused(SwarmEvent, tag="bead:scope_refused", kw_only=True):
    """The coordinator refused a scope request, with the reason (and who holds the files, when that is why)."""

    bead_id: str
    worker: str
    request_id: str
    reason: str
    held_by: list[str] = []


class BeadClosed(SwarmEvent, tag="bead:closed", kw_only=True):
    bead_id: str
    reason: str
    commit: str | None = None
    worker: str | None = None


class WorkerJoined(SwarmEvent, tag="worker:joined", kw_only=True):
    worker: str
    nickname: str
    worktree_path: str | None = None


class WorkerStatusChanged(SwarmEvent, tag="worker:status", kw_only=True):
    worker: str
    status: WorkerStatus
    bead_id: str | None = None


class LeaseGranted(SwarmEvent, tag="lease:granted", kw_only=True):
    holder: str
    patterns: list[str]
    mode: LeaseMode = "exclusive"
    bead_id: str | None = None


class LeaseReleased(SwarmEvent, tag="lease:released", kw_only=True):
    holder: str
    patterns: list[str]
    reason: str
    """``done`` (the bead landed), ``reopened``, ``expired`` (the holder stopped renewing)."""
    bead_id: str | None = None


class LeaseConflicted(SwarmEvent, tag="lease:conflict", kw_only=True):
    """A worker could not reserve its bead's files; the coordinator gives it other work or makes it wait."""

    holder: str
    bead_id: str
    files: list[str]
    held_by: list[str]


class MailPosted(SwarmEvent, tag="mail:posted", kw_only=True):
    """A message was posted to the epic's mailbox (coordination mail, seed 002 ``send_message``)."""

    # Its own kind, so the subject (``autarch.events.<epic>.mail.<epic>.posted``) reads back as ``mail:posted``.
    aggregate_kind = "mail"
    message: MailMessage


MAIL_EVENTS: tuple[type[SwarmEvent], ...] = (MailPosted,)
"""Events of an epic's mailbox: swarm events, kept apart from ``SWARM_EVENTS`` (the watch's swarm lines)."""


SWARM_EVENTS: tuple[type[SwarmEvent], ...] = (
    SwarmStarted, SwarmFinished, BeadCreated, BeadUpdated, BeadBounced, BeadClaimed, BeadEvidenceRecorded,
    BeadReopened, BeadClosed, BeadScopeRequested, BeadWidened, BeadScopeRefused,
    WorkerJoined, WorkerStatusChanged, WorkerHandedOff, LeaseGranted, LeaseReleased, LeaseConflicted)


AnyEvent = (
    WorkflowCreated
    | WorkflowError
    | WorkflowApprovalNeeded
    | WorkflowStageChanged
    | WorkflowCompleted
    | WorkflowChangesRequested
    | WorkflowFixRoundOpened
    | WorkflowNoteTaken
    | WorkflowBaselineRecorded
    | WorkflowReviewCommentAdded
    | WorkflowSessionAssigned
    | WorkflowHalted
    | WorkflowResumed
    | WorkflowAbandoned
    | PreflightStarted
    | PreflightCompleted
    | PulseStarted
    | PulseCompletionRejected
    | PulseCompleted
    | SessionStarted
    | SessionCompleted
    | SessionError
    | TurnStarted
    | TurnToolStarted
    | TurnToolCompleted
    | TurnCompleted
    | LoopStarted
    | LoopIterationStarted
    | LoopIterationCompleted
    | LoopPaused
    | LoopResumed
    | LoopBlocked
    | LoopCompleted
    | LoopFailed
    | LoopAborted
    | SwarmStarted
    | SwarmFinished
    | BeadCreated
    | BeadUpdated
    | BeadBounced
    | BeadClaimed
    | BeadEvidenceRecorded
    | BeadReopened
    | BeadClosed
    | BeadScopeRequested
    | BeadWidened
    | BeadScopeRefused
    | WorkerJoined
    | WorkerStatusChanged
    | WorkerHandedOff
    | LeaseGranted
    | LeaseReleased
    | LeaseConflicted
    | MailPosted
)
"""The union every consumer decodes with."""

EVENT_TYPES: dict[str, type[Event]] = {
    cls.__struct_config__.tag: cls  # type: ignore[attr-defined, misc]  # the tuple is typed `object`; each is a Struct
    for cls in (
        WorkflowCreated,
        WorkflowError,
        WorkflowApprovalNeeded,
        WorkflowStageChanged,
        WorkflowCompleted,
        WorkflowChangesRequested,
        WorkflowFixRoundOpened,
        WorkflowNoteTaken,
        WorkflowBaselineRecorded,
        WorkflowReviewCommentAdded,
        WorkflowSessionAssigned,
        WorkflowHalted,
        WorkflowResumed,
        WorkflowAbandoned,
        PreflightStarted,
        PreflightCompleted,
        PulseStarted,
        PulseCompletionRejected,
        PulseCompleted,
        SessionStarted,
        SessionCompleted,
        SessionError,
        TurnStarted,
        TurnToolStarted,
        TurnToolCompleted,
        TurnCompleted,
        LoopStarted,
        LoopIterationStarted,
        LoopIterationCompleted,
        LoopPaused,
        LoopResumed,
        LoopBlocked,
        LoopCompleted,
        LoopFailed,
        LoopAborted,
        *SWARM_EVENTS,
        *MAIL_EVENTS,
    )
}


def event_subject(event: Event) -> str:
    """The stream subject of ``event``."""
    # Ignored below: every event class is a tagged Struct, so its config always has a tag
    name = type(event).__struct_config__.tag.split(":", 1)[1]  # type: ignore[union-attr]
    return subjects.event(event.run_id, event.aggregate_kind, event.aggregate_id, name)


# --- old shapes -------------------------------------------------------------------------------------------------

_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)
E = TypeVar("E")


def _renamed_in_v1(raw: dict[str, Any]) -> str | None:
    """The name a version 1 event's ``workflow_id`` has today (issue 33), or None when ``raw`` is no such event: a
    loop event's is ``session_id``, an agent session's or turn's (whose run may be a loop session) ``run_id``."""
    if "workflow_id" not in raw:
        return None
    family = str(raw.get("type", "")).split(":", 1)[0]
    if family == "loop":
        return None if "session_id" in raw else "session_id"
    if family in ("session", "turn"):
        return None if "run_id" in raw else "run_id"
    return None


def upcast(raw: dict[str, Any]) -> dict[str, Any]:
    """An event as JSON (a dict), in today's shape: the one place older shapes of an event are read.

    Today that is a version 1 loop event, whose ``workflow_id`` becomes ``session_id``, and a version 1 agent
    session or turn event, whose ``workflow_id`` becomes ``run_id`` (either's ``schema_version`` 2). Anything else is
    returned as it is.
    """
    new = _renamed_in_v1(raw)
    if new is not None:
        raw = {(new if k == "workflow_id" else k): v for k, v in raw.items()}
        raw["schema_version"] = 2
    return raw


def current_shape(data: bytes) -> bytes:
    """An event's JSON as it reads today (:func:`upcast`); the same bytes when it already does. What the gateway
    sends a client that replays the stream from before issue 33."""
    if b'"workflow_id"' not in data or not (b'"loop:' in data or b'"session:' in data or b'"turn:' in data):
        return data  # the common case, told without parsing
    raw = msgspec.json.decode(data)
    return msgspec.json.encode(upcast(raw)) if isinstance(raw, dict) and _renamed_in_v1(raw) else data


def decode_as(decoder: msgspec.json.Decoder[E], data: bytes) -> E:
    """Decode one event with ``decoder`` (of one event type, or a union) from any shape it ever had: today's at full
    speed, an older one the strict decode refuses through :func:`current_shape`. For a consumer that reads one type
    (the orchestrator's ``turn:completed`` consumer) and so does not use :func:`decode_event`."""
    try:
        return decoder.decode(data)
    except msgspec.ValidationError:
        upcast_data = current_shape(data)
        if upcast_data is data:
            raise
        return decoder.decode(upcast_data)


def decode_event(data: bytes) -> AnyEvent:
    """Decode one event recorded in any shape it ever had (see :func:`upcast`); the decoder every consumer uses."""
    return decode_as(_decoder, data)
