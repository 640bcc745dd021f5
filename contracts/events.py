"""Every event Autarch records, as one tagged union named as seed 003 names events.

An event's ``type`` is its seed name (``workflow:created``); its subject on the stream is
derived by :func:`event_subject`. Adding an event: a new Struct here, a member of
:data:`AnyEvent`, and a fixture in ``tests/contracts/fixtures/events``.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import msgspec

from . import subjects

__all__ = ["AnyEvent", "Event", "WorkflowCreated", "WorkflowError", "event_subject"]


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


AnyEvent = WorkflowCreated | WorkflowError
"""The union every consumer decodes with."""

EVENT_TYPES: dict[str, type[Event]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in (WorkflowCreated, WorkflowError)
}


def event_subject(event: Event) -> str:
    """The stream subject of ``event``."""
    name = type(event).__struct_config__.tag.split(":", 1)[1]  # type: ignore[union-attr]
    return subjects.event(event.workflow_id, event.aggregate_kind, event.aggregate_id, name)
