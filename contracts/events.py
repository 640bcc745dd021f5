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


class WorkflowCreated(Event, tag="workflow:created", kw_only=True):
    """A user asked for a change; the workflow starts in the scoping stage."""

    aggregate_kind = "workflow"
    title: str
    request: str
    repo: str
    base_branch: str


class WorkflowError(Event, tag="workflow:error", kw_only=True):
    """Something failed; the workflow stays in its current stage."""

    aggregate_kind = "workflow"
    stage: str
    message: str


class WorkflowApprovalNeeded(Event, tag="workflow:approval_needed", kw_only=True):
    """An agent submitted the card of ``stage``; the workflow waits for the user to approve or request changes.

    ``artifact`` is the card as the agent submitted it (for ``review``: the recommendation and summary;
    its comments came as ``workflow:review_comment_added``).
    """

    aggregate_kind = "workflow"
    stage: str
    artifact: dict[str, Any]


class WorkflowStageChanged(Event, tag="workflow:stage_changed", kw_only=True):
    """The workflow moved on (on approval, or automatically from execution to review)."""

    aggregate_kind = "workflow"
    from_stage: str
    to_stage: str
    path: str | None = None
    """``quick`` or ``full``, chosen at scope approval."""


class WorkflowCompleted(Event, tag="workflow:completed", kw_only=True):
    """The user approved the review: the workflow is done."""

    aggregate_kind = "workflow"
    recommendation: str | None = None


class WorkflowChangesRequested(Event, tag="workflow:changes_requested", kw_only=True):
    """The user sent the waiting card back; the agent revises and resubmits."""

    aggregate_kind = "workflow"
    stage: str
    feedback: str


class WorkflowNoteTaken(Event, tag="workflow:note_taken", kw_only=True):
    """An agent stored a note for the stage it works in (``take_note``)."""

    aggregate_kind = "workflow"
    note_id: str
    stage: str
    session_id: str
    note: str


class WorkflowBaselineRecorded(Event, tag="workflow:baseline_recorded", kw_only=True):
    """Preflight recorded a pre-existing build/lint/test issue, so pulses are not blamed for it."""

    aggregate_kind = "workflow"
    baseline_id: str
    issue_type: str
    source: str
    pattern: str
    file_path: str | None = None
    description: str | None = None


class WorkflowReviewCommentAdded(Event, tag="workflow:review_comment_added", kw_only=True):
    """The review agent commented on a line, a file or the whole change."""

    aggregate_kind = "workflow"
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
