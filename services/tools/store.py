"""The tools service's only state: per-session read hashes and recorded results of mutating calls.

Kept in SQLite under ``<data dir>/tools/`` (WAL mode, so several tools processes on one machine
share it), so a restarted service still knows what each session has read and still answers a
repeated mutating tool call with its recorded result.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from autarch.contracts.tools import FileAccess

__all__ = ["Claim", "SessionStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reads (
    session_id TEXT NOT NULL, root TEXT NOT NULL, path TEXT NOT NULL,
    sha256 TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (session_id, root, path)
);
CREATE TABLE IF NOT EXISTS access (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL, root TEXT NOT NULL, path TEXT NOT NULL, sha256 TEXT NOT NULL,
    start_line INTEGER, end_line INTEGER, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS access_by_session ON access (session_id, id);
CREATE TABLE IF NOT EXISTS calls (
    session_id TEXT NOT NULL, tool_call_id TEXT NOT NULL, tool TEXT NOT NULL, digest TEXT NOT NULL,
    state TEXT NOT NULL, owner TEXT NOT NULL, result BLOB, started_at REAL NOT NULL, finished_at REAL,
    PRIMARY KEY (session_id, tool_call_id)
);
"""


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming a tool call id for a run."""

    state: str
    """``new`` (run it), ``done`` (replay ``result``), ``running`` (someone else runs it) or ``mismatch``."""
    result: bytes | None = None
    started_at: float = 0.0
    tool: str = ""
    owner: str = ""
    """``host:pid:token`` of the process that claimed it."""


class SessionStore:
    """SQLite-backed per-session state; every method is synchronous and thread-safe."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- read-before-edit ---------------------------------------------------------------------

    def record_read(
        self, session_id: str, root: str, path: str, sha256: str, *, start_line: int | None, end_line: int | None
    ) -> None:
        now = time.time()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO reads VALUES (?, ?, ?, ?, ?)", (session_id, root, path, sha256, now)
            )
            self._db.execute(
                "INSERT INTO access (session_id, root, path, sha256, start_line, end_line, at) VALUES (?,?,?,?,?,?,?)",
                (session_id, root, path, sha256, start_line, end_line, now),
            )

    def update_hash(self, session_id: str, root: str, path: str, sha256: str) -> None:
        """After the session itself wrote the file: its own write counts as having read it."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO reads VALUES (?, ?, ?, ?, ?)", (session_id, root, path, sha256, time.time())
            )

    def read_hash(self, session_id: str, root: str, path: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT sha256 FROM reads WHERE session_id = ? AND root = ? AND path = ?", (session_id, root, path)
            ).fetchone()
        return row[0] if row else None

    def file_access(self, session_id: str) -> list[FileAccess]:
        with self._lock:
            rows = self._db.execute(
                "SELECT root, path, sha256, start_line, end_line, at FROM access WHERE session_id = ? ORDER BY id",
                (session_id,),
            ).fetchall()
        return [
            FileAccess(root=r[0], path=r[1], sha256=r[2], start_line=r[3], end_line=r[4], read_at=r[5]) for r in rows
        ]

    # -- idempotency --------------------------------------------------------------------------

    def claim(self, session_id: str, tool_call_id: str, tool: str, digest: str, owner: str) -> Claim:
        """Claim a call id for a run, or learn that it already ran (or is running)."""
        with self._lock:
            try:
                self._db.execute(
                    "INSERT INTO calls (session_id, tool_call_id, tool, digest, state, owner, started_at) "
                    "VALUES (?, ?, ?, ?, 'running', ?, ?)",
                    (session_id, tool_call_id, tool, digest, owner, time.time()),
                )
                return Claim(state="new")
            except sqlite3.IntegrityError:
                row = self._db.execute(
                    "SELECT tool, digest, state, result, started_at, owner FROM calls "
                    "WHERE session_id = ? AND tool_call_id = ?",
                    (session_id, tool_call_id),
                ).fetchone()
        known_tool, known_digest, state, result, started_at, known_owner = row
        if known_tool != tool or known_digest != digest:
            return Claim(state="mismatch", tool=known_tool)
        return Claim(state=state, result=result, started_at=started_at, tool=known_tool, owner=known_owner)

    def finish(self, session_id: str, tool_call_id: str, result: bytes) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE calls SET state = 'done', result = ?, finished_at = ? "
                "WHERE session_id = ? AND tool_call_id = ?",
                (result, time.time(), session_id, tool_call_id),
            )

    def finished(self, session_id: str, tool_call_id: str) -> bool:
        """Whether a result is recorded for the call (False: unknown, or still marked running)."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM calls WHERE session_id = ? AND tool_call_id = ? AND state = 'done'",
                (session_id, tool_call_id),
            ).fetchone()
        return row is not None

    def settle(self, session_id: str, tool_call_id: str, result: bytes) -> None:
        """Record ``result`` for a call that is still marked running (an interrupted run); no-op otherwise."""
        with self._lock:
            self._db.execute(
                "UPDATE calls SET state = 'done', result = ?, finished_at = ? "
                "WHERE session_id = ? AND tool_call_id = ? AND state = 'running'",
                (result, time.time(), session_id, tool_call_id),
            )

    def take_over(self, session_id: str, tool_call_id: str, *, dead_owner: str, owner: str) -> bool:
        """Claim a call still marked running by ``dead_owner`` (a process that died running it) for ``owner``.

        True when this caller now owns it; False when another caller took it over or settled it first.
        """
        with self._lock:
            cursor = self._db.execute(
                "UPDATE calls SET owner = ?, started_at = ? "
                "WHERE session_id = ? AND tool_call_id = ? AND state = 'running' AND owner = ?",
                (owner, time.time(), session_id, tool_call_id, dead_owner),
            )
        return cursor.rowcount == 1

    def release(self, session_id: str, tool_call_id: str, *, owner: str) -> None:
        """Forget ``owner``'s claim of a call it stopped running (its service is stopping): a retry runs it."""
        with self._lock:
            self._db.execute(
                "DELETE FROM calls WHERE session_id = ? AND tool_call_id = ? AND state = 'running' AND owner = ?",
                (session_id, tool_call_id, owner),
            )

    def prune(self, *, older_than: float) -> None:
        """Forget sessions' state older than ``older_than`` (Unix time)."""
        with self._lock:
            self._db.execute("DELETE FROM reads WHERE at < ?", (older_than,))
            self._db.execute("DELETE FROM access WHERE at < ?", (older_than,))
            self._db.execute("DELETE FROM calls WHERE started_at < ? AND state = 'done'", (older_than,))
