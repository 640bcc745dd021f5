"""The embedded event store: eventsourcing's SQLite (WAL) with group-synced durability.

eventsourcing leaves SQLite at ``synchronous=FULL``: every commit waits for an fsync of the write-ahead log
(0.29 ms of a 0.30 ms append on this project's reference machine). Here commits run at ``synchronous=NORMAL``
(the ``sqlite_synchronous`` setting; ``full`` restores the fsync per commit), which SQLite documents as safe for WAL
mode: a committed transaction survives any crash of the process, and the file is never corrupted; only an
operating-system crash or power loss can take the last commits back. So that nothing ever reaches the
stream that the store could lose, the relay calls :func:`make_durable` (one fsync of the log, for a whole
batch) before it publishes: every event a client has seen on the stream is on disk.

Select it with ``PERSISTENCE_MODULE=autarch.runtime.sqlite_store`` (what :mod:`.eventstore` sets).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple
from uuid import UUID

# Imported as a module: eventsourcing finds the factory as the one factory class among this module's names.
from eventsourcing import sqlite as es_sqlite
from eventsourcing.application import Application
from eventsourcing.persistence import Notification, StoredEvent

from . import chain

__all__ = ["MODULE", "SYNCHRONOUS_ENV", "ApplicationRecorder", "EventRows", "Factory", "commits_inline", "make_durable"]

MODULE = "autarch.runtime.sqlite_store"
"""The ``PERSISTENCE_MODULE`` naming this store."""
SYNCHRONOUS_ENV = "SQLITE_SYNCHRONOUS"
"""Environment key (ours, not eventsourcing's) of the ``synchronous`` level."""
MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


class EventRows(NamedTuple):
    """One aggregate's stored events as plain rows (see :meth:`ApplicationRecorder.select_event_rows`)."""

    originator_id: UUID | str
    rows: list[tuple[int, str, bytes]]


class ApplicationRecorder(es_sqlite.SQLiteApplicationRecorder):
    """eventsourcing's recorder, reading one aggregate's events faster and chaining every event it records.

    Every row of an aggregate has the same originator id: it is converted to a UUID once, not once per
    event (with 100,000 events that conversion was a fifth of a replay), and rows are read as plain tuples.

    Each event's link of the hash chain (``runtime/chain.py``) is a column of its own row (``digest``, added to a
    store made before chaining; NULL for the events recorded then): inserted with the event, in one statement, it
    costs a hash and 32 bytes. A table of links beside the events cost a third more per single-event commit (one
    more B-tree page written to the log each time). Checkpoints of the chain heads go to
    ``<events table>_checkpoints``.
    """

    def __init__(self, datastore: es_sqlite.SQLiteDatastore, events_table_name: str = "stored_events") -> None:
        self.checkpoints_table_name = f"{events_table_name}_checkpoints"
        super().__init__(datastore, events_table_name)
        self.insert_chained_statement = (f"INSERT INTO {self.events_table_name} "
                                         "(originator_id, originator_version, topic, state, digest) VALUES (?,?,?,?,?)")
        self._chainer = chain.Chainer(self._read_link)

    def construct_create_table_statements(self) -> list[str]:
        return [
            *super().construct_create_table_statements(),
            # Each aggregate's first event, by topic: what lists every aggregate of a kind reads (select_created),
            # without reading every event of every aggregate. One entry per aggregate, not per event. It holds the
            # aggregate's id (and its version, which SQLite needs to see to use it alone), so that the ids alone
            # (select_created_ids, a start-up's) are read from the index without a visit to each event's row: that
            # took 0.8 s for 80,000 sessions in a 770 MB store. It replaces an index of the topic alone.
            f"DROP INDEX IF EXISTS {self.events_table_name}_created",
            f"CREATE INDEX IF NOT EXISTS {self.events_table_name}_created_ids ON {self.events_table_name} "
            "(topic, originator_version, originator_id) WHERE originator_version = 1",
            f"CREATE TABLE IF NOT EXISTS {self.checkpoints_table_name} (seq INTEGER PRIMARY KEY, "
            "payload TEXT NOT NULL, prev BLOB NOT NULL, digest BLOB NOT NULL)",
        ]

    def _create_table(self, c: Any) -> None:
        super()._create_table(c)
        c.execute(f"PRAGMA table_info({self.events_table_name})")
        if "digest" not in {row[1] for row in c.fetchall()}:
            # A store from before chaining: its events keep a NULL link (reported unchained), new ones get theirs.
            try:
                c.execute(f"ALTER TABLE {self.events_table_name} ADD COLUMN digest BLOB")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # another process added it first
                    raise

    @staticmethod
    def _key(originator_id: UUID | str) -> str:
        return originator_id.hex if isinstance(originator_id, UUID) else originator_id

    def _read_link(self, c: Any, originator_id: UUID | str, version: int) -> bytes | None:
        c.execute(f"SELECT digest FROM {self.events_table_name} WHERE originator_id=? AND originator_version=?",
                  (self._key(originator_id), version))
        row = c.fetchone()
        return bytes(row[0]) if row and row[0] is not None else None

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        notification_ids = []
        with self.datastore.transaction(commit=True) as c:
            links, pending = self._chainer.links(c, stored_events)
            for event, (_, _, digest) in zip(stored_events, links, strict=True):
                c.execute(self.insert_chained_statement, (self._key(event.originator_id), event.originator_version,
                                                          event.topic, event.state, digest))
                notification_ids.append(c.lastrowid)
        # Only a committed insert moves the kept heads (a rolled-back one leaves them as they were).
        self._chainer.committed(pending)
        return notification_ids

    def select_created(self, topics: Sequence[str], *, start: int, limit: int) -> list[Notification]:
        """The first events (version 1) with one of ``topics``, from notification id ``start`` on, in order: what
        ``select_notifications(topics=…)`` answers for them, read through an index of first events only (that
        call reads the whole log, a start-up's largest cost once the store holds a million events)."""
        marks = ",".join("?" * len(topics))
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT rowid, originator_id, originator_version, topic, state FROM {self.events_table_name} "
                      f"WHERE originator_version = 1 AND topic IN ({marks}) AND rowid >= ? ORDER BY rowid LIMIT ?",
                      (*topics, start, limit))
            return [Notification(id=row[0], originator_id=self.convert_originator_id(row[1]),
                                 originator_version=row[2], topic=row[3], state=row[4]) for row in c.fetchall()]

    def select_created_ids(self, topics: Sequence[str]) -> list[str]:
        """The ids (hyphenated) of every aggregate whose first event has one of ``topics``, in creation order: read
        from the index of first events alone."""
        marks = ",".join("?" * len(topics))
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT originator_id FROM {self.events_table_name} "
                      f"WHERE originator_version = 1 AND topic IN ({marks}) ORDER BY rowid", tuple(topics))
            # The ids are stored as 32 hex digits: spelled with hyphens here, as str(UUID(…)) would (10x faster).
            return [f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}" if len(h) == 32 else str(UUID(h))
                    for (h,) in c.fetchall()]

    def chain_of(self, originator_id: UUID | str) -> dict[int, bytes]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT originator_version, digest FROM {self.events_table_name} WHERE originator_id=? "
                      "AND digest IS NOT NULL", (self._key(originator_id),))
            return {int(version): bytes(digest) for version, digest in c.fetchall()}

    def chained_ids(self) -> list[str]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT DISTINCT originator_id FROM {self.events_table_name}")
            return sorted(chain.id_text(self.convert_originator_id(row[0])) for row in c.fetchall())

    def links_between(self, first: int, last: int) -> dict[int, tuple[str, int, bytes]]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT rowid, originator_id, originator_version, digest FROM {self.events_table_name} "
                      "WHERE rowid>=? AND rowid<=? AND digest IS NOT NULL", (first, last))
            return {int(nid): (chain.id_text(self.convert_originator_id(oid)), int(version), bytes(digest))
                    for nid, oid, version, digest in c.fetchall()}

    def heads_between(self, after: int, upto: int) -> dict[str, tuple[int, str]]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT h.originator_id, h.v, k.digest FROM (SELECT originator_id, MAX(originator_version) v "
                      f"FROM {self.events_table_name} WHERE rowid>? AND rowid<=? GROUP BY originator_id) h "
                      f"JOIN {self.events_table_name} k ON k.originator_id=h.originator_id "
                      "AND k.originator_version=h.v", (after, upto))
            return chain.heads_of(c.fetchall(), self.convert_originator_id)

    def checkpoints(self) -> list[chain.Checkpoint]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT seq, payload, prev, digest FROM {self.checkpoints_table_name} ORDER BY seq")
            return [chain.checkpoint_from_row(*row) for row in c.fetchall()]

    def last_checkpoint(self) -> chain.Checkpoint | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT seq, payload, prev, digest FROM {self.checkpoints_table_name} ORDER BY seq DESC LIMIT 1")
            row = c.fetchone()
            return chain.checkpoint_from_row(*row) if row else None

    def insert_checkpoint(self, checkpoint: chain.Checkpoint) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(f"INSERT INTO {self.checkpoints_table_name} VALUES (?,?,?,?)",
                      (checkpoint.seq, checkpoint.payload().decode(), checkpoint.prev, checkpoint.digest))

    def select_events(self, originator_id: UUID | str, *, gt: int | None = None, lte: int | None = None,
                      desc: bool = False, limit: int | None = None) -> Sequence[StoredEvent]:
        oid, rows = self.select_event_rows(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
        return [StoredEvent(originator_id=oid, originator_version=version, topic=topic, state=state)
                for version, topic, state in rows]

    def select_event_rows(self, originator_id: UUID | str, *, gt: int | None = None, lte: int | None = None,
                          desc: bool = False, limit: int | None = None) -> EventRows:
        """What :meth:`select_events` selects, as ``(originator_version, topic, state)`` tuples beside the
        originator id they share: a replay that reads each row once needs no ``StoredEvent`` per event (a
        quarter of the time of replaying 100,000 events went to making them)."""
        statement = f"SELECT originator_version, topic, state FROM {self.events_table_name} WHERE originator_id=? "
        key = originator_id.hex if isinstance(originator_id, UUID) else originator_id
        params: list[Any] = [key]
        if gt is not None:
            statement += "AND originator_version>? "
            params.append(gt)
        if lte is not None:
            statement += "AND originator_version<=? "
            params.append(lte)
        statement += "ORDER BY originator_version " + ("DESC " if desc else "ASC ")
        if limit is not None:
            statement += "LIMIT ? "
            params.append(limit)
        with self.datastore.transaction(commit=False) as c:
            c.execute(statement, params)
            rows = c.fetchall()
        return EventRows(self.convert_originator_id(key) if rows else key, rows)


class Factory(es_sqlite.SQLiteFactory):
    """eventsourcing's SQLite factory, its connections opened at the chosen ``synchronous`` level."""

    application_recorder_class = ApplicationRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        mode = (self.env.get(SYNCHRONOUS_ENV) or "NORMAL").strip().upper()
        if mode not in MODES:
            raise OSError(f"SQLITE_SYNCHRONOUS must be one of {', '.join(MODES)}, got {mode!r}")
        self.synchronous = mode
        pool = self.datastore.pool
        # The pragma holds per connection and eventsourcing runs nothing public on a new one, so the pool's
        # _create_connection (which every eventsourcing pool class implements) is wrapped;
        # tests/architecture/test_private_names.py fails, naming it, if an upgrade moves it.
        create = pool._create_connection

        def create_at_level() -> es_sqlite.SQLiteConnection:
            connection = create()
            connection._sqlite_conn.execute(f"PRAGMA synchronous={mode}")
            return connection

        # Ignored below: eventsourcing offers no hook for a connection's pragmas; pinned by test_private_names
        pool._create_connection = create_at_level  # type: ignore[method-assign]
        self.wal_path = None if pool.is_sqlite_memory_mode else f"{pool.db_name}-wal"


def make_durable(app: Application) -> None:
    """Put every commit so far on disk (one fsync of the write-ahead log); a no-op for other stores."""
    factory = app.factory
    if not isinstance(factory, Factory) or factory.synchronous in ("FULL", "EXTRA") or factory.wal_path is None:
        return
    try:
        fd = os.open(factory.wal_path, os.O_RDONLY)
    except FileNotFoundError:
        return  # no log yet (or checkpointed away): everything is in the database file, synced at checkpoint
    try:
        # fdatasync, as SQLite itself uses on Linux: the log's data and its length, not its timestamps.
        os.fdatasync(fd)
    finally:
        os.close(fd)


def commits_inline(env: dict[str, str]) -> bool:
    """Whether a store configured by ``env`` commits faster than a trip to a worker thread and back.

    An embedded commit without fsync takes about 0.05 ms; handing it to a thread costs more than that (and two
    more task switches on a busy loop), so such writes are done on the event loop itself. A networked store, or
    an fsync per commit, goes to a thread.
    """
    level = (env.get(SYNCHRONOUS_ENV) or "NORMAL").upper()
    return env.get("PERSISTENCE_MODULE") == MODULE and level in ("NORMAL", "OFF")
