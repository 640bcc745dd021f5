"""The runner's eventsourcing application: where sessions are recorded and read back."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from uuid import UUID

from eventsourcing.application import Application

from autarch.runtime.aggregates import created_ids, load, topics_of

from .domainmodel import Session

__all__ = ["SessionApplication"]

log = logging.getLogger(__name__)

_STARTED_TOPICS = topics_of(Session.Started)


class SessionApplication(Application[UUID]):
    """Records agent sessions; every method is a pure function of the event store."""

    name = "agent_runner"

    def get_session(self, session_id: str) -> Session:
        """Rebuild one session from its events."""
        return load(self, UUID(session_id))

    started_topics = _STARTED_TOPICS
    """The topics a session's first event is recorded under (each name it was ever recorded by)."""

    def session_ids(self) -> Iterator[str]:
        """Every recorded session id, in creation order, read from the notification log."""
        return created_ids(self.recorder, _STARTED_TOPICS)
