"""Every event Autarch records, as one tagged union named as seed 003 names events.

An event's ``type`` is its seed name (``workflow:created``); its subject on the stream is
derived by :func:`event_subject`. Adding an event: a new Struct here, a member of
:data:`AnyEvent`, and a fixture in ``tests/contracts/fixtures/events``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import msgspec

from . import subjects

__all__ = [
    "AnyEvent",
    "Event",
    "SessionCompleted",
    "SessionError",
    "SessionEvent",
    "SessionStarted",
    "TurnCompleted",
    "TurnEvent",
    "TurnStarted",
    "TurnToolCompleted",
    "TurnToolStarted",
    "WorkflowApprovalNeeded",
    "WorkflowBaselineRecorded",
    "WorkflowChangesRequested",
    "WorkflowCompleted",
    "WorkflowCreated",
    "WorkflowError",
    "WorkflowEvent",
    "WorkflowNoteTaken",
    "WorkflowReviewCommentAdded",
    "WorkflowStageChanged",
    "event_subject",
]


class Event(msgspec.Struct, kw_only=True, tag_field="type"):
    """Fields every event carries."""

    aggregate_kind: ClassVar[str]
    workflow_id: str
    """The workflow the event belongs to (``_`` for none)."""
    occurred_at: datetime

    @property
    def aggregate_id(self) -> str:
        return self.workflow_id


class WorkflowEvent(Event, kw_only=True):
    """Events of the Workflow aggregate (its id is the workflow id)."""

    aggregate_kind = "workflow"


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


class WorkflowStageChanged(WorkflowEvent, tag="workflow:stage_changed", kw_only=True):
    """The workflow moved on (on approval, or automatically from execution to review)."""

    from_stage: str
    to_stage: str
    path: str | None = None
    """``quick`` or ``full``, chosen at scope approval."""


class WorkflowCompleted(WorkflowEvent, tag="workflow:completed", kw_only=True):
    """The user approved the review: the workflow is done."""

    recommendation: str | None = None


class WorkflowChangesRequested(WorkflowEvent, tag="workflow:changes_requested", kw_only=True):
    """The user sent the waiting card back; the agent revises and resubmits."""

    stage: str
    feedback: str


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


class SessionEvent(Event, kw_only=True):
    """An agent session's event: its subject carries the session id, so one wildcard follows one session."""

    aggregate_kind = "session"
    session_id: str

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
    ``complete_review``), ``end_turn``, ``cancelled``, ``error`` or ``budget_exceeded``.
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


AnyEvent = (
    WorkflowCreated
    | WorkflowError
    | WorkflowApprovalNeeded
    | WorkflowStageChanged
    | WorkflowCompleted
    | WorkflowChangesRequested
    | WorkflowNoteTaken
    | WorkflowBaselineRecorded
    | WorkflowReviewCommentAdded
    | SessionStarted
    | SessionCompleted
    | SessionError
    | TurnStarted
    | TurnToolStarted
    | TurnToolCompleted
    | TurnCompleted
)
"""The union every consumer decodes with."""

EVENT_TYPES: dict[str, type[Event]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in (
        WorkflowCreated,
        WorkflowError,
        WorkflowApprovalNeeded,
        WorkflowStageChanged,
        WorkflowCompleted,
        WorkflowChangesRequested,
        WorkflowNoteTaken,
        WorkflowBaselineRecorded,
        WorkflowReviewCommentAdded,
        SessionStarted,
        SessionCompleted,
        SessionError,
        TurnStarted,
        TurnToolStarted,
        TurnToolCompleted,
        TurnCompleted,
    )
}


def event_subject(event: Event) -> str:
    """The stream subject of ``event``."""
    name = type(event).__struct_config__.tag.split(":", 1)[1]  # type: ignore[union-attr]
    return subjects.event(event.workflow_id, event.aggregate_kind, event.aggregate_id, name)
