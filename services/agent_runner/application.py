"""The runner's eventsourcing application: where sessions are recorded and read back."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.utils import Environment

from autarch.runtime.aggregates import created_ids, project, topic_of

from .domainmodel import Session

__all__ = ["SYNCHRONOUS_ENV", "SessionApplication"]

log = logging.getLogger(__name__)

SYNCHRONOUS_ENV = "SQLITE_SYNCHRONOUS"
"""Environment key (ours, not eventsourcing's) for the SQLite ``synchronous`` pragma of the store."""

_STARTED_TOPIC = topic_of(Session.Started)


class SessionApplication(Application[UUID]):
    """Records agent sessions; every method is a pure function of the event store."""

    name = "agent_runner"

    def construct_factory(self, env: Environment) -> InfrastructureFactory:
        factory = super().construct_factory(env)
        synchronous = (env.get(SYNCHRONOUS_ENV) or "").upper()
        pool = getattr(getattr(factory, "datastore", None), "pool", None)
        if synchronous and pool is not None and hasattr(pool, "_create_connection"):
            _set_synchronous(pool, synchronous)
        return factory

    def get_session(self, session_id: str) -> Session:
        """Rebuild one session from its events."""
        return self.repository.get(UUID(session_id), projector_func=project)

    def session_ids(self) -> Iterator[str]:
        """Every recorded session id, in creation order, read from the notification log."""
        return created_ids(self.recorder, _STARTED_TOPIC)


def _set_synchronous(pool: Any, level: str) -> None:
    if level not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"agent_store_synchronous must be NORMAL, FULL, EXTRA or OFF, got {level!r}")
    create = pool._create_connection

    # In WAL mode NORMAL skips the fsync of each commit: a killed process loses nothing, a power cut may
    # lose the last commits. It takes a model step's two commits from ~10 ms to well under 1 ms here.
    def create_connection() -> Any:
        connection = create()
        connection._sqlite_conn.execute(f"PRAGMA synchronous={level}")
        return connection

    pool._create_connection = create_connection


