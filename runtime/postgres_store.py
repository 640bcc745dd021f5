"""The scale-out event store's recorder: eventsourcing's PostgreSQL recorder, chaining every event it records.

:mod:`.eventstore` names it (``APPLICATION_RECORDER_TOPIC``) beside ``PERSISTENCE_MODULE=eventsourcing.postgres``,
so an application on PostgreSQL records each event's link of the hash chain (``runtime/chain.py``) in
``<app>_events_chain``, in the transaction that inserts the event (after the events table's lock is taken, so
the previous link read is the one committed). Checkpoints go to ``<app>_events_checkpoints``.

eventsourcing's optional database function for inserts (``POSTGRES_ENABLE_DB_FUNCTIONS``) bypasses the path
the links are written on, so the recorder refuses to be built with it: events recorded unchained after chained
ones would read as inserted behind the store's back. The links are written from eventsourcing's
``_fetch_ids_after_insert_events`` (the one step of its insert that runs inside the transaction, after the
events' insert); ``tests/architecture/test_private_names.py`` says so if an upgrade moves it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import ProgrammingError, StoredEvent

from . import chain

__all__ = ["ChainedPostgresRecorder"]  # noqa: F822 - made on first use, by __getattr__


def __getattr__(name: str) -> Any:
    # psycopg is the ``postgres`` extra's: the class (whose base needs it) is made on first use, so this module
    # imports in a plain install, where the store is never PostgreSQL.
    if name == "ChainedPostgresRecorder":
        recorder = globals()[name] = _define()
        return recorder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _define() -> type:
    from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
    from psycopg.sql import SQL, Identifier

    class ChainedPostgresRecorder(PostgresApplicationRecorder):
        """eventsourcing's PostgreSQL application recorder, writing the hash chain beside the events."""

        def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events") -> None:
            if datastore.enable_db_functions:
                raise ProgrammingError("POSTGRES_ENABLE_DB_FUNCTIONS inserts events around the hash chain's recorder: "
                                       "unset it (docs/audit.md)")
            super().__init__(datastore, events_table_name=events_table_name)
            self.chain_table_name = f"{events_table_name}_chain"
            self.checkpoints_table_name = f"{events_table_name}_checkpoints"
            for name in (self.chain_table_name, self.checkpoints_table_name):
                self.check_identifier_length(name)
            schema = Identifier(datastore.schema)
            self._chain = SQL("{0}.{1}").format(schema, Identifier(self.chain_table_name))
            self._checkpoints = SQL("{0}.{1}").format(schema, Identifier(self.checkpoints_table_name))
            self._events = SQL("{0}.{1}").format(schema, Identifier(self.events_table_name))
            self.sql_create_statements.append(SQL(
                "CREATE TABLE IF NOT EXISTS {0} (originator_id {1} NOT NULL, originator_version bigint NOT NULL, "
                "digest bytea NOT NULL, PRIMARY KEY (originator_id, originator_version))"
            ).format(self._chain, Identifier(datastore.originator_id_type)))
            self.sql_create_statements.append(SQL(
                "CREATE TABLE IF NOT EXISTS {0} (seq bigint PRIMARY KEY, payload text NOT NULL, prev bytea NOT NULL, "
                "digest bytea NOT NULL)"
            ).format(self._checkpoints))
            self._chainer = chain.Chainer(self._read_link)
            self._pending = threading.local()

        def _read_link(self, curs: Any, originator_id: UUID | str, version: int) -> bytes | None:
            query = SQL("SELECT digest FROM {0} WHERE originator_id=%s AND originator_version=%s")
            curs.execute(query.format(self._chain), (originator_id, version))
            row = curs.fetchone()
            return bytes(row["digest"]) if row else None

        def _fetch_ids_after_insert_events(self, curs: Any, stored_events: Sequence[StoredEvent],
                                           **kwargs: Any) -> Sequence[int] | None:
            # Called inside the inserting transaction, with the events table locked and the events inserted: the
            # links go in with them or not at all.
            notification_ids = super()._fetch_ids_after_insert_events(curs, stored_events, **kwargs)
            links, pending = self._chainer.links(curs, stored_events)
            curs.executemany(SQL("INSERT INTO {0} (originator_id, originator_version, digest) VALUES (%s, %s, %s)"
                                 ).format(self._chain), links)
            self._pending.value = pending
            return notification_ids

        def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
            self._pending.value = None
            notification_ids = super().insert_events(stored_events, **kwargs)
            # Reached only once the transaction committed (a failed one raises): the kept heads may move.
            if self._pending.value:
                self._chainer.committed(self._pending.value)
            self._pending.value = None
            return notification_ids

        def chain_of(self, originator_id: UUID | str) -> dict[int, bytes]:
            with self.datastore.transaction(commit=False) as curs:
                query = SQL("SELECT originator_version, digest FROM {0} WHERE originator_id=%s")
                curs.execute(query.format(self._chain), (originator_id,))
                return {int(r["originator_version"]): bytes(r["digest"]) for r in curs.fetchall()}

        def chained_ids(self) -> list[str]:
            with self.datastore.transaction(commit=False) as curs:
                curs.execute(SQL("SELECT originator_id FROM {0} UNION SELECT originator_id FROM {1}").format(
                    self._events, self._chain))
                return sorted(chain.id_text(r["originator_id"]) for r in curs.fetchall())

        def links_between(self, first: int, last: int) -> dict[int, tuple[str, int, bytes]]:
            with self.datastore.transaction(commit=False) as curs:
                curs.execute(SQL(
                    "SELECT e.notification_id, e.originator_id, e.originator_version, k.digest FROM {0} e JOIN {1} k "
                    "ON k.originator_id=e.originator_id AND k.originator_version=e.originator_version "
                    "WHERE e.notification_id>=%s AND e.notification_id<=%s").format(self._events, self._chain),
                    (first, last))
                return {int(r["notification_id"]): (chain.id_text(r["originator_id"]), int(r["originator_version"]),
                                                    bytes(r["digest"])) for r in curs.fetchall()}

        def heads_between(self, after: int, upto: int) -> dict[str, tuple[int, str]]:
            with self.datastore.transaction(commit=False) as curs:
                curs.execute(SQL(
                    "SELECT h.originator_id, h.v, k.digest FROM (SELECT originator_id, MAX(originator_version) AS v "
                    "FROM {0} WHERE notification_id>%s AND notification_id<=%s GROUP BY originator_id) h "
                    "LEFT JOIN {1} k ON k.originator_id=h.originator_id AND k.originator_version=h.v").format(
                    self._events, self._chain), (after, upto))
                rows = [(r["originator_id"], r["v"], r["digest"]) for r in curs.fetchall()]
            return chain.heads_of(rows, lambda oid: oid)

        def checkpoints(self) -> list[chain.Checkpoint]:
            with self.datastore.transaction(commit=False) as curs:
                curs.execute(SQL("SELECT seq, payload, prev, digest FROM {0} ORDER BY seq").format(self._checkpoints))
                return [chain.checkpoint_from_row(r["seq"], r["payload"], r["prev"], r["digest"])
                        for r in curs.fetchall()]

        def last_checkpoint(self) -> chain.Checkpoint | None:
            with self.datastore.transaction(commit=False) as curs:
                curs.execute(SQL("SELECT seq, payload, prev, digest FROM {0} ORDER BY seq DESC LIMIT 1").format(
                    self._checkpoints))
                row = curs.fetchone()
                if row is None:
                    return None
                return chain.checkpoint_from_row(row["seq"], row["payload"], row["prev"], row["digest"])

        def insert_checkpoint(self, checkpoint: chain.Checkpoint) -> None:
            with self.datastore.transaction(commit=True) as curs:
                query = SQL("INSERT INTO {0} (seq, payload, prev, digest) VALUES (%s, %s, %s, %s)")
                curs.execute(query.format(self._checkpoints),
                             (checkpoint.seq, checkpoint.payload().decode(), checkpoint.prev, checkpoint.digest))

    ChainedPostgresRecorder.__qualname__ = "ChainedPostgresRecorder"
    return ChainedPostgresRecorder
