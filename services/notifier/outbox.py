"""The notifier's outbox: every delivery intent, its attempts and its outcome, in SQLite under
``<data dir>/notifier/``, and how far the Telegram bot's messages have been read.

An intent is written before its stream message is acknowledged and keyed by its delivery id, so a message
handed out again (a crash between write and ack, a redelivery) records nothing new, and a notifier killed
after the ack still finds every pending delivery here when it starts again. The answer to a Telegram command
and the bot's next ``getUpdates`` offset are written in one transaction: a restart neither reads a handled
message again nor skips one.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autarch.contracts.loops import NotifyTarget
from autarch.contracts.notifications import Delivery

from .messages import Intent

__all__ = ["LinkRow", "Outbox", "Pending"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    delivery_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    session_id TEXT NOT NULL, event TEXT NOT NULL, kind TEXT NOT NULL, url TEXT NOT NULL, chat_id TEXT,
    text TEXT NOT NULL, body TEXT NOT NULL, occurred_at TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
    last_status INTEGER, last_error TEXT, created_at REAL NOT NULL, delivered_at REAL
);
CREATE INDEX IF NOT EXISTS deliveries_by_session ON deliveries (session_id, seq);
CREATE INDEX IF NOT EXISTS deliveries_by_state ON deliveries (state, seq);
CREATE TABLE IF NOT EXISTS telegram_offsets (bot_id TEXT PRIMARY KEY, next_offset INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS action_links (
    nonce TEXT PRIMARY KEY, delivery_id TEXT NOT NULL, run_id TEXT NOT NULL, token TEXT NOT NULL, chat_id TEXT,
    created_at REAL NOT NULL
);
"""
_ADDED_COLUMNS = ("discord_thread_id", "phone_number")
"""Columns added after the first outboxes were written (added to an older file when it is opened)."""
_COLUMNS = "kind, url, chat_id, discord_thread_id, phone_number"
_RENAMED_COLUMNS = (("action_links", "workflow_id", "run_id"),)
"""Columns renamed since the first outboxes were written (table, old name, new name), renamed in an older file when
it is opened: an action link's ``run_id`` was ``workflow_id`` before issue 33 (a blocked loop's link held its loop
session's id there)."""


@dataclass(frozen=True, kw_only=True)
class LinkRow:
    """An action link sent as a Telegram button: the button carries ``act:<nonce>``, the token stays here."""

    nonce: str
    delivery_id: str
    run_id: str
    """The workflow, or the loop session of a blocked loop's Stop (``ActionLink.run_id``)."""
    token: str
    chat_id: str | None


@dataclass(frozen=True, kw_only=True)
class Pending:
    """A delivery still to make."""

    delivery_id: str
    target: NotifyTarget
    body: dict[str, Any]
    attempts: int


class Outbox:
    """SQLite-backed record of deliveries; every method is synchronous and thread-safe."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        present = {row[1] for row in self._db.execute("PRAGMA table_info(deliveries)")}
        for column in _ADDED_COLUMNS:
            if column not in present:
                self._db.execute(f"ALTER TABLE deliveries ADD COLUMN {column} TEXT")
        for table, old, new in _RENAMED_COLUMNS:
            if old in {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}:
                self._db.execute(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def record(self, intents: list[Intent], links: list[LinkRow] | None = None) -> list[str]:
        """Write ``intents`` in one transaction; returns the ids that were new (a recorded one is left as it is).

        ``links``: the action links a Telegram button of these deliveries names by nonce (``callback_data`` holds
        64 bytes, a link more); kept only for the deliveries that were new, so a redelivered event's fresh links
        are dropped with it."""
        def write() -> list[str]:
            new = self._insert(intents)
            for link in links or []:
                if link.delivery_id in new:
                    self._db.execute("INSERT OR IGNORE INTO action_links (nonce, delivery_id, run_id, token, "
                                     "chat_id, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                                     (link.nonce, link.delivery_id, link.run_id, link.token, link.chat_id,
                                      time.time()))
            return new

        with self._lock:
            return self._transaction(write)

    def link(self, nonce: str) -> LinkRow | None:
        """The action link a Telegram button names."""
        with self._lock:
            row = self._db.execute("SELECT nonce, delivery_id, run_id, token, chat_id FROM action_links "
                                   "WHERE nonce = ?", (nonce,)).fetchone()
        return None if row is None else LinkRow(nonce=row[0], delivery_id=row[1], run_id=row[2], token=row[3],
                                                chat_id=row[4])

    def answer(self, intent: Intent | None, *, bot_id: str, next_offset: int) -> list[str]:
        """Record the answer to a Telegram command (if any) and the bot's next ``getUpdates`` offset at once;
        returns the answer's id when it was new."""
        def write() -> list[str]:
            new = self._insert([intent] if intent is not None else [])
            self._db.execute("INSERT INTO telegram_offsets (bot_id, next_offset) VALUES (?, ?) ON CONFLICT (bot_id) "
                             "DO UPDATE SET next_offset = MAX(next_offset, excluded.next_offset)",
                             (bot_id, next_offset))
            return new

        with self._lock:
            return self._transaction(write)

    def telegram_offset(self, bot_id: str) -> int | None:
        """The ``getUpdates`` offset to ask ``bot_id``'s messages from; None before its first message."""
        with self._lock:
            row = self._db.execute("SELECT next_offset FROM telegram_offsets WHERE bot_id = ?", (bot_id,)).fetchone()
        return None if row is None else int(row[0])

    def _transaction(self, write: Callable[[], list[str]]) -> list[str]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            result = write()
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return result

    def _insert(self, intents: list[Intent]) -> list[str]:
        new: list[str] = []
        now = time.time()
        for intent in intents:
            t = intent.target
            cur = self._db.execute(
                f"INSERT OR IGNORE INTO deliveries (delivery_id, seq, session_id, event, {_COLUMNS}, text, body, "
                "occurred_at, created_at) VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM deliveries), ?, ?, ?, "
                "?, ?, ?, ?, ?, ?, ?, ?)",
                (intent.delivery_id, intent.session_id, intent.event, t.kind, t.url or "", t.chat_id,
                 t.discord_thread_id, t.phone_number, intent.text, json.dumps(intent.body, ensure_ascii=False),
                 intent.occurred_at, now))
            if cur.rowcount:
                new.append(intent.delivery_id)
        return new

    def pending(self, delivery_ids: list[str] | None = None) -> list[Pending]:
        """The pending deliveries (of ``delivery_ids`` when given), oldest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT delivery_id, body, attempts, {_COLUMNS} FROM deliveries WHERE state = 'pending' "
                "ORDER BY seq").fetchall()
        wanted = None if delivery_ids is None else set(delivery_ids)
        return [Pending(delivery_id=r[0], body=json.loads(r[1]), attempts=r[2], target=_target(r[3:]))
                for r in rows if wanted is None or r[0] in wanted]

    def attempted(self, delivery_id: str, *, status: int | None, error: str | None, delivered: bool,
                  final: bool) -> None:
        """Record one attempt: delivered, failed for good (``final``), or still pending."""
        state = "delivered" if delivered else "failed" if final else "pending"
        with self._lock:
            self._db.execute(
                "UPDATE deliveries SET attempts = attempts + 1, last_status = ?, last_error = ?, state = ?, "
                "delivered_at = ? WHERE delivery_id = ? AND state = 'pending'",
                (status, error, state, time.time() if delivered else None, delivery_id))

    def give_up(self, delivery_id: str, reason: str) -> None:
        """Record a delivery that cannot be made at all (no attempt)."""
        with self._lock:
            self._db.execute("UPDATE deliveries SET state = 'failed', last_error = ? WHERE delivery_id = ? "
                             "AND state = 'pending'", (reason, delivery_id))

    def count_pending(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM deliveries WHERE state = 'pending'").fetchone()[0])

    def list(self, *, session_id: str | None = None, state: str | None = None, limit: int = 1000) -> list[Delivery]:
        """The recorded deliveries, oldest first."""
        where, args = [], []
        if session_id is not None:
            where.append("session_id = ?")
            args.append(session_id)
        if state is not None:
            where.append("state = ?")
            args.append(state)
        sql = ("SELECT delivery_id, session_id, event, kind, url, chat_id, text, state, attempts, last_status, "
               "last_error, created_at, delivered_at, discord_thread_id, phone_number FROM deliveries")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq LIMIT ?"
        with self._lock:
            rows = self._db.execute(sql, (*args, max(0, limit))).fetchall()
        return [Delivery(delivery_id=r[0], session_id=r[1], event=r[2], kind=r[3], url=r[4], chat_id=r[5], text=r[6],
                         state=r[7], attempts=r[8], last_status=r[9], last_error=r[10], created_at=_time(r[11]),
                         delivered_at=_time(r[12]) if r[12] is not None else None, discord_thread_id=r[13],
                         phone_number=r[14]) for r in rows]


def _target(row: tuple[Any, ...]) -> NotifyTarget:
    kind, url, chat_id, thread_id, phone = row
    return NotifyTarget(kind=kind, url=url or None, chat_id=chat_id, discord_thread_id=thread_id, phone_number=phone)


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
