"""The runner's eventsourcing application: where sessions are recorded and read back."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool
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
        if synchronous and isinstance(pool, SQLiteConnectionPool):
            _set_synchronous(pool, synchronous)
        return factory

    def get_session(self, session_id: str) -> Session:
        """Rebuild one session from its events."""
        return self.repository.get(UUID(session_id), projector_func=project)

    def session_ids(self) -> Iterator[str]:
        """Every recorded session id, in creation order, read from the notification log."""
        return created_ids(self.recorder, _STARTED_TOPIC)


def _set_synchronous(pool: SQLiteConnectionPool, level: str) -> None:
    """Run ``PRAGMA synchronous=<level>`` on every connection ``pool`` opens.

    The pragma holds per connection, and eventsourcing has no public hook for a new connection, so this
    wraps ``_create_connection``, the method its ``ConnectionPool`` has every pool class implement (the
    pragma itself goes through the public ``SQLiteConnection.cursor()``). pyproject.toml pins eventsourcing
    to the minor versions this was checked against; if the name moves, this fails at startup, saying so,
    and so does tests/unit/test_private_names.py.
    """
    if level not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"agent_store_synchronous must be NORMAL, FULL, EXTRA or OFF, got {level!r}")
    create = getattr(pool, "_create_connection", None)
    if create is None:
        raise RuntimeError(
            "eventsourcing's SQLiteConnectionPool no longer has _create_connection, so agent_store_synchronous "
            "cannot be applied: update _set_synchronous in services/agent_runner/application.py for this version"
        )

    # In WAL mode NORMAL skips the fsync of each commit: a killed process loses nothing, a power cut may
    # lose the last commits. It takes a model step's two commits from ~10 ms to well under 1 ms here.
    def create_connection() -> SQLiteConnection:
        connection = create()
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA synchronous={level}")
        return connection

    pool._create_connection = create_connection  # type: ignore[method-assign]


