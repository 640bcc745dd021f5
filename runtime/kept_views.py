"""The views of settled aggregates (the orchestrator's workflows and loop sessions, the agent runner's sessions),
kept on disk so that a start-up does not replay them.

A start-up used to rebuild every workflow and loop session ever recorded from its events, to make its view
(what the lists and ``get`` answer) and to learn whether the driver still has a step for it: with 10,000
finished workflows behind it, the orchestrator spent minutes replaying work that will never change again. Here
the view of each aggregate that is settled (finished, nothing left for a driver) is written, with the version it
was made at, to a table of the embedded event store's own file. A start-up takes a kept view only when the
aggregate's last recorded version is still that version (one indexed lookup, in the query that reads the views):
anything recorded since (a crash
between an event and its view, a command on a finished workflow) sends that aggregate back to the full rebuild.
No view is ever dropped: any change of an aggregate records an event, which moves its version past its kept view's.
The events stay the only truth; the table is a cache that may be missing, late or unreadable, and then the
aggregates are rebuilt as before. A networked store (PostgreSQL) keeps none (``path`` None).

The agent runner keeps the same way, under the kind ``session``, a summary of each session that has no turn
running (``services/agent_runner/kept.py``): its start-up rebuilds only the sessions whose turn was running.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate

from autarch.runtime.snapshots import shape_of

__all__ = ["KeptViews", "kept_views_for", "view_shape"]

log = logging.getLogger("kept_views")

V = TypeVar("V", bound=msgspec.Struct)

_SCHEMA = ("CREATE TABLE IF NOT EXISTS kept_views (kind TEXT NOT NULL, id TEXT NOT NULL, oid TEXT NOT NULL, "
           "version INTEGER NOT NULL, shape TEXT NOT NULL, view BLOB NOT NULL, PRIMARY KEY (kind, id)) WITHOUT ROWID")
_EVENTS = "stored_events"
"""eventsourcing's events table in SQLite, whose ``originator_id`` is the aggregate's id in hex."""


def view_shape(*made_by: Any) -> str:
    """A fingerprint of the code a view is made by (the modules of the view function, the view type and the
    aggregate, and the aggregate's own shape): a view kept by other code is not taken, its aggregate is rebuilt."""
    digest = hashlib.sha256()
    for thing in made_by:
        if inspect.isclass(thing) and issubclass(thing, Aggregate):
            digest.update(shape_of(thing).encode())
        module = sys.modules[thing.__module__]
        try:
            digest.update(inspect.getsource(module).encode())
        except (OSError, TypeError):
            digest.update(module.__name__.encode())
    return digest.hexdigest()[:32]


class KeptViews:
    """The kept views of one service's store, in its SQLite file ``path`` (None: none are kept, every start-up
    rebuilds)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._encode = msgspec.json.Encoder().encode
        if path is not None:
            try:
                # Partitions of one orchestrator share the store, and so this file: a writer waits its turn.
                db = sqlite3.connect(path, timeout=10, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # a lost write only means a rebuild at the next start
                db.execute(_SCHEMA)
                self._db = db
            except sqlite3.Error as exc:
                log.warning("views not kept (%s: %s): each start-up rebuilds every aggregate", path, exc)

    def put(self, kind: str, key: str, version: int, shape: str, view: msgspec.Struct) -> None:
        """Keep ``view`` of the settled aggregate ``key`` at ``version``, made by code of ``shape``
        (:func:`view_shape`); best effort (a failure is logged)."""
        if self._db is None:
            return
        try:
            data = self._encode(view)
            with self._lock:
                self._db.execute("INSERT OR REPLACE INTO kept_views VALUES (?,?,?,?,?,?)",
                                 (kind, key, UUID(key).hex, version, shape, data))
        except (sqlite3.Error, TypeError, ValueError) as exc:
            log.info("view of %s %s not kept (%s)", kind, key, exc)

    def current(self, kind: str, view_type: type[V], shape: str) -> dict[str, V]:
        """The kept views of ``kind`` made by code of ``shape`` whose aggregate's last recorded version is the one
        they were made at; any other (stale, unreadable) is left out, so its aggregate is rebuilt."""
        if self._db is None:
            return {}
        try:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT k.id, k.view FROM kept_views k WHERE k.kind=? AND k.shape=? AND k.version = "
                    f"(SELECT MAX(e.originator_version) FROM {_EVENTS} e WHERE e.originator_id = k.oid)",
                    (kind, shape)).fetchall()
        except sqlite3.Error as exc:
            log.warning("kept views unreadable (%s); rebuilding every %s", exc, kind)
            return {}
        decode = msgspec.json.Decoder(view_type).decode
        found: dict[str, V] = {}
        for key, data in rows:
            try:
                found[key] = decode(data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # written by another version of the view: rebuilt instead
        return found

    def of_every(self, kind: str, view_type: type[V], shape: str,
                 topics: list[str]) -> list[tuple[str, V | None]] | None:
        """Every aggregate whose first event has one of ``topics`` (its id, hyphenated), in creation order, with its
        kept view of ``kind`` when it is current (as :meth:`current` takes it), else None: one query where
        :meth:`current` and ``created_ids`` make two passes over every aggregate (a start-up's largest cost in the
        agent runner, with 80,000 sessions). None when no views are kept (or the table cannot be read): the caller
        reads the ids another way."""
        if self._db is None:
            return None
        marks = ",".join("?" * len(topics))
        hyphenated = ("substr(c.originator_id,1,8)||'-'||substr(c.originator_id,9,4)||'-'||substr(c.originator_id,13,4)"
                      "||'-'||substr(c.originator_id,17,4)||'-'||substr(c.originator_id,21)")
        try:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT {hyphenated}, k.view FROM {_EVENTS} c LEFT JOIN kept_views k ON k.kind=? "
                    f"AND k.id={hyphenated} AND k.shape=? AND k.version = "
                    f"(SELECT MAX(e.originator_version) FROM {_EVENTS} e WHERE e.originator_id = c.originator_id) "
                    f"WHERE c.originator_version = 1 AND c.topic IN ({marks}) ORDER BY c.rowid",
                    (kind, shape, *topics)).fetchall()
        except sqlite3.Error as exc:
            log.warning("kept views unreadable (%s); reading every %s's id from the events", exc, kind)
            return None
        decode = msgspec.json.Decoder(view_type).decode
        found: list[tuple[str, V | None]] = []
        for key, data in rows:
            view = None
            if data is not None:
                try:
                    view = decode(data)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    pass  # written by another version of the view: rebuilt instead
            found.append((key, view))
        return found

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def kept_views_for(env: dict[str, Any]) -> KeptViews:
    """The kept views of an embedded store (a table of its file); none for another store."""
    dbname = env.get("SQLITE_DBNAME")
    if not dbname or dbname == ":memory:" or "mode=memory" in dbname:
        return KeptViews(None)
    return KeptViews(Path(dbname))
