"""A write conflict is told from a real failure alike on every store: two writers of one aggregate on SQLite and on
PostgreSQL (when a server answers), and the drivers' own errors as a write outside eventsourcing's wrapping raises
them."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import IntegrityError

from autarch.runtime.conflicts import is_write_conflict, recorded_already
from autarch.runtime.eventstore import event_store_env
from autarch.runtime.settings import Settings

from ..conftest import postgres_dsn

DSN = postgres_dsn()


class Counter(Aggregate):
    @event("Created")
    def __init__(self) -> None:
        self.notes: list[str] = []

    @event("Noted")
    def note(self, text: str) -> None:
        self.notes.append(text)


class Counters(Application[uuid.UUID]):
    name = "counters"


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    monkeypatch.delenv("PERSISTENCE_MODULE", raising=False)
    if request.param == "sqlite":
        yield Settings(data_dir=str(tmp_path))
        return
    if DSN is None:
        pytest.skip("no PostgreSQL server answers (set AUTARCH_TEST_POSTGRES_URL); skipped")
    import psycopg

    schema = f"autarch_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield Settings(data_dir=str(tmp_path), postgres_url=f"{DSN}?schema={schema}")
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _refused(app: Counters, aggregate: Counter) -> Exception:
    try:
        app.save(aggregate)
    except Exception as exc:
        return exc
    raise AssertionError("the save was not refused")


def test_two_writers_of_one_version_the_second_is_refused_as_a_conflict(settings: Settings) -> None:
    first, second = (Counters(env=event_store_env(settings, "counters")) for _ in range(2))
    try:
        counter = Counter()
        first.save(counter)
        mine: Counter = first.repository.get(counter.id)
        theirs: Counter = second.repository.get(counter.id)
        theirs.note("theirs")
        second.save(theirs)
        mine.note("mine")
        pending = list(mine.pending_events)
        refused = _refused(first, mine)
        assert is_write_conflict(refused), repr(refused)
        # Not what this writer meant to record: it must decide again.
        assert not recorded_already(first, pending)
        # Decided again on what was recorded, it saves.
        again: Counter = first.repository.get(counter.id)
        again.note("mine")
        first.save(again)
        assert first.repository.get(counter.id).notes == ["theirs", "mine"]
    finally:
        first.close()
        second.close()


def test_a_save_whose_events_are_recorded_already_is_recognised(settings: Settings) -> None:
    first, second = (Counters(env=event_store_env(settings, "counters")) for _ in range(2))
    try:
        counter = Counter()
        first.save(counter)
        counter.note("once")
        pending = list(counter.pending_events)
        second.save(*pending)  # the same events, as an earlier try of this save whose answer was lost
        assert is_write_conflict(_refused(first, counter))
        assert recorded_already(first, pending)
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(("error", "conflict"), [
    (sqlite3.IntegrityError("UNIQUE constraint failed: stored_events.originator_id, stored_events.originator_version"),
     True),
    (sqlite3.IntegrityError("NOT NULL constraint failed: stored_events.state"), False),
    (IntegrityError("duplicate key"), True),
    (RuntimeError("disk I/O error"), False),
])
def test_what_is_a_conflict(error: Exception, conflict: bool) -> None:
    assert is_write_conflict(error) is conflict
    wrapped = IntegrityError(str(error))
    wrapped.__cause__ = error
    if isinstance(error, sqlite3.IntegrityError):  # eventsourcing's wrapping tells no more than its cause
        assert is_write_conflict(wrapped) is conflict


def test_a_postgres_integrity_error_is_a_conflict_only_as_a_duplicate_key() -> None:
    psycopg: Any = pytest.importorskip("psycopg", reason="the postgres extra is not installed; skipped")
    assert is_write_conflict(psycopg.errors.UniqueViolation("duplicate key value violates unique constraint"))
    assert not is_write_conflict(psycopg.errors.NotNullViolation("null value in column"))
