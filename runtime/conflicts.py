"""A write conflict: the store refused an aggregate's events because another writer recorded those versions first.

Every service saves an aggregate conditionally on the version it read (eventsourcing's optimistic concurrency: the
events table's key is (aggregate, version)). When two writers share a store (an orchestrator's partitions, a
standby agent runner that took over while its paused predecessor still had a turn in flight) the second save of a
version is refused. That refusal is not a failure of the command: the writer reads the aggregate again and decides
once more (``services/orchestrator/book.py``, ``services/agent_runner/service.py``), or finds the other writer
recorded exactly what it meant to (:func:`recorded_already`).

The stores spell the refusal differently: eventsourcing wraps the driver's error in its own ``IntegrityError``
(legacy name ``RecordConflictError``) on SQLite and on PostgreSQL, but the driver's class is what a write outside
eventsourcing's wrapping raises (``sqlite3.IntegrityError``, psycopg's ``UniqueViolation``). :func:`is_write_conflict`
is the one test for all of them, so every writer tells a conflict from a real failure alike.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import RecordConflictError

__all__ = ["WriteConflict", "is_write_conflict", "recorded_already"]

_UNIQUE_VIOLATION = "23505"
"""PostgreSQL's SQLSTATE of a duplicate key (psycopg's ``UniqueViolation``)."""


def is_write_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a store refusing events whose versions another writer recorded first.

    An integrity error of the driver that is no duplicate key (a NOT NULL or CHECK violation: a bug, not a race)
    is not a conflict, whichever wrapper carries it.
    """
    wrapped = False
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.IntegrityError):
            return str(current).startswith("UNIQUE constraint failed")
        sqlstate = getattr(current, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate.startswith("23"):  # psycopg's class 23: integrity violations
            return sqlstate == _UNIQUE_VIOLATION
        wrapped = wrapped or isinstance(current, RecordConflictError)
        current = current.__cause__ or current.__context__
    # eventsourcing's own refusal with no driver error under it (its in-memory recorder raises it bare).
    return wrapped


def recorded_already(app: Application[Any], events: Sequence[Any]) -> bool:
    """Whether the store holds exactly ``events`` (one aggregate's, in order) at their versions: a write refused as
    a conflict that an earlier try of the same save (its answer lost) or another writer made alike. Compared as
    stored (topic and encoded state, timestamps included), so an event of the same kind but other content is no
    match; blocking."""
    if not events:
        return True
    first = events[0]
    stored = app.recorder.select_events(first.originator_id, gt=first.originator_version - 1,
                                        lte=events[-1].originator_version)
    mine = [app.mapper.to_stored_event(e) for e in events]
    return len(stored) == len(mine) and all(
        (s.originator_version, s.topic, s.state) == (m.originator_version, m.topic, m.state)
        for s, m in zip(stored, mine, strict=True))


class WriteConflict(Exception):
    """Another writer recorded the next version of an aggregate first, and not what this one meant to: nothing of
    this save was recorded, and the aggregate in memory holds events the store does not. The writer reads the
    aggregate again and decides once more."""

    def __init__(self, aggregate_id: str, version: int) -> None:
        super().__init__(f"another writer recorded version {version} of {aggregate_id} first")
        self.aggregate_id = aggregate_id
        self.version = version
