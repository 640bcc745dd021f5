"""An aggregate's history copied under a new id: what a fork of a workflow or of a loop session starts from."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from .application import WorkflowApplication


def copied_history(app: WorkflowApplication, original_id: str, copy_id: str, version: int) -> Any:
    """The aggregate made of copies of ``original_id``'s first ``version`` events under ``copy_id``, with those copies
    as its pending events (blocking: it reads the store)."""
    stored = app.recorder.select_events(UUID(original_id), lte=version)
    # The stored bytes as recorded, under the new id: the copy's store gets chain links of its own when saved.
    copies = [StoredEvent(originator_id=UUID(copy_id), originator_version=e.originator_version, topic=e.topic,
                          state=e.state) for e in stored]
    events: list[Any] = [app.mapper.to_domain_event(e) for e in copies]
    aggregate: Any = None
    for e in events:
        aggregate = e.mutate(aggregate)
    aggregate.pending_events.extend(events)
    return aggregate
