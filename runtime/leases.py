"""File leases of swarm workers (seed 002's reservations): one compare-and-set lease table per workflow.

The table of a scope (the workflow id) is ONE key of the JetStream key-value bucket ``AUTARCH_LEASES``, its
value the scope's whole table as JSON. A glob lease and a path lease can only be conflict-checked atomically
if they live in the same value: every change reads the key, decides against the table as read, and writes
with ``Nats-Expected-Last-Subject-Sequence`` set to the revision it read (a compare-and-set). Of two holders
racing for overlapping files exactly one write lands; the other is retried against the new table and refused.

Expiry is two-layered, on purpose:

- Each lease carries ``expires_at`` (wall-clock seconds) inside the table. That is the rule every check
  applies: per lease, sub-second, decided in the same compare-and-set as the rest. A worker renews while its
  turn runs; a dead worker stops renewing and its leases lapse ``lease_ttl`` later without anyone deleting them.
- The key also gets a per-message TTL (``Nats-TTL``) past the latest ``expires_at`` plus a grace, so a scope
  nobody touches again (the workflow ended, every worker died) disappears from the bucket by itself. The
  message TTL alone could not do the job: it is per key (the whole table), in whole seconds, and would drop
  live leases of one holder with the expiry of another's. Set past every lease's expiry it never removes a
  live lease; the grace covers clock skew between writers and the server.

Times in the table are the writer's clock, read after the table was read: since every write is based on the
latest revision, the times of successive revisions never go backwards on one clock, so "valid from the
grant's ``at`` until its expiry or release" windows of conflicting leases never overlap.

Patterns are paths or globs relative to the worktree root, matched with :mod:`autarch.runtime.globs`. A
literal path also covers everything beneath it (a leased directory). See :func:`patterns_overlap`.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import TypeVar

import msgspec
from nats.aio.client import Client
from nats.js.errors import APIError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from autarch.contracts.beads import LeaseMode, LeaseOrigin, LeaseView

from .bus import open_key_value
from .globs import Segment, compile_glob, glob_segments, literal_segment, segments_overlap

__all__ = [
    "BUCKET",
    "LeaseGrant",
    "LeaseRefusal",
    "LeaseTable",
    "TableWrite",
    "bead_scope",
    "blocking_lease",
    "describe_lease",
    "in_scope",
    "lease_covers",
    "normalize_pattern",
    "patterns_overlap",
]

BUCKET = "AUTARCH_LEASES"
_SUBJECT_PREFIX = f"$KV.{BUCKET}."
_WRONG_LAST_SEQUENCE = (10071, 10164)
_SCOPE = re.compile(r"^[-_=.A-Za-z0-9]+\Z")
T = TypeVar("T")


# --- results -------------------------------------------------------------------------------------------


class LeaseGrant(msgspec.Struct, kw_only=True, frozen=True):
    """Every requested pattern is now the holder's, until ``expires_at`` of each (renew to keep them)."""

    scope: str
    holder: str
    leases: list[LeaseView]
    at: float
    """Table time (epoch seconds) of the grant: the leases are valid from this instant."""


class LeaseRefusal(msgspec.Struct, kw_only=True, frozen=True):
    """Nothing was granted: ``conflicts`` are the other holders' leases overlapping the request."""

    scope: str
    holder: str
    requested: list[str]
    conflicts: list[LeaseView]
    at: float

    @property
    def holders(self) -> list[str]:
        return sorted({lease.holder for lease in self.conflicts})

    @property
    def message(self) -> str:
        held = "; ".join(describe_lease(lease) for lease in self.conflicts)
        return f"Files {', '.join(self.requested)} overlap leases of other workers: {held}"


@dataclass(frozen=True)
class TableWrite:
    """A write of the table that landed: its revision in the bucket and its table time."""

    revision: int
    at: float


def describe_lease(lease: LeaseView) -> str:
    """``'src/**' held by w2 (exclusive, bead b3) until 2026-11-25T08:31:09Z``, for messages to agents."""
    bead = f", bead {lease.bead_id}" if lease.bead_id else ""
    until = f" until {lease.expires_at.strftime('%Y-%m-%dT%H:%M:%SZ')}" if lease.expires_at else ""
    return f"'{lease.pattern}' held by {lease.holder} ({lease.mode}{bead}){until}"


# --- the stored table ----------------------------------------------------------------------------------


class _Entry(msgspec.Struct, kw_only=True):
    pattern: str
    holder: str
    mode: LeaseMode = "exclusive"
    bead_id: str | None = None
    expires_at: float
    origin: LeaseOrigin = "coordinator"

    def view(self) -> LeaseView:
        return LeaseView(pattern=self.pattern, holder=self.holder, mode=self.mode, bead_id=self.bead_id,
                         expires_at=datetime.fromtimestamp(self.expires_at, UTC), origin=self.origin)


class _Table(msgspec.Struct, kw_only=True):
    at: float = 0.0
    """Table time of the write that made this revision."""
    leases: list[_Entry] = []


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Table)


def _conflicts(mine: LeaseMode, other: LeaseMode) -> bool:
    return not (mine == "shared" and other == "shared")


# --- the table -----------------------------------------------------------------------------------------


class LeaseTable:
    """The lease tables of every scope, over one NATS connection. Open with :meth:`open`."""

    def __init__(self, kv: KeyValue, nc: Client, *, key_grace: float = 10.0) -> None:
        self._kv = kv
        self._js = nc.jetstream()
        self.key_grace = key_grace
        """Seconds a scope's key outlives its latest lease expiry (then the bucket forgets the scope)."""
        self.last_write: TableWrite | None = None
        """The last write of this instance that landed (for logs and for tests of the time windows)."""

    @classmethod
    async def open(cls, nc: Client, *, replicas: int = 1, key_grace: float = 10.0) -> LeaseTable:
        """Bind to ``AUTARCH_LEASES``, creating it if missing (safe from every service at once)."""
        # create_key_value sets allow_msg_ttl (per-key TTLs need nats-server 2.11+).
        kv = await open_key_value(nc, BUCKET, replicas=replicas, description="Swarm file leases")
        return cls(kv, nc, key_grace=key_grace)

    # -- verbs ----------------------------------------------------------------------------------------

    async def acquire(
        self,
        scope: str,
        holder: str,
        patterns: Iterable[str],
        *,
        mode: LeaseMode = "exclusive",
        bead_id: str | None = None,
        ttl: float,
        origin: LeaseOrigin = "coordinator",
    ) -> LeaseGrant | LeaseRefusal:
        """All of ``patterns`` or none. Re-acquiring a pattern the holder holds renews it (and sets its mode).

        ``origin`` says who asks: the coordinator for a worker's bead (the bead's scope) or the worker itself. A
        worker's own reservation of a pattern the coordinator already gave it keeps the coordinator's entry (the
        scope is not narrowed by a reservation), renewed.
        """
        _check_ttl(ttl)
        wanted = _unique(normalize_pattern(p) for p in patterns)
        if not wanted:
            raise ValueError("acquire needs at least one pattern")

        def change(entries: list[_Entry], now: float) -> tuple[list[_Entry] | None, LeaseGrant | LeaseRefusal]:
            conflicts = [e for e in entries if e.holder != holder and e.expires_at > now
                         and _conflicts(mode, e.mode) and any(patterns_overlap(p, e.pattern) for p in wanted)]
            if conflicts:
                return None, LeaseRefusal(scope=scope, holder=holder, requested=wanted,
                                          conflicts=[e.view() for e in conflicts], at=now)
            assigned = {e.pattern: e for e in entries if e.holder == holder and e.expires_at > now
                        and e.origin == "coordinator"}
            granted = [_Entry(pattern=p, holder=holder, mode=mode, bead_id=bead_id, expires_at=now + ttl,
                              origin=origin) if origin == "coordinator" or p not in assigned
                       else _Entry(pattern=p, holder=holder, mode=assigned[p].mode, bead_id=assigned[p].bead_id,
                                   expires_at=now + ttl, origin="coordinator")
                       for p in wanted]
            kept = [e for e in entries if e.expires_at > now and not (e.holder == holder and e.pattern in wanted)]
            return kept + granted, LeaseGrant(scope=scope, holder=holder, leases=[e.view() for e in granted], at=now)

        return await self._change(scope, change)

    async def renew(self, scope: str, holder: str, ttl: float) -> int:
        """Move every unexpired bead lease (origin ``coordinator``) of ``holder`` to ``now + ttl``; how many moved
        (0: it holds none). A worker's own reservations keep the TTL it gave them (it renews by reserving again)."""
        _check_ttl(ttl)

        def change(entries: list[_Entry], now: float) -> tuple[list[_Entry] | None, int]:
            # An expired lease is not revived: someone else may have been granted its files since.
            mine = [e for e in entries if e.holder == holder and e.expires_at > now and e.origin == "coordinator"]
            if not mine:
                return None, 0
            for entry in mine:
                entry.expires_at = now + ttl
            return [e for e in entries if e.expires_at > now], len(mine)

        return await self._change(scope, change)

    async def release(self, scope: str, holder: str, patterns: Iterable[str] | None = None, *,
                      origin: LeaseOrigin | None = None) -> list[LeaseView]:
        """Drop ``holder``'s leases on ``patterns`` (all of them when None), only those of ``origin`` when given;
        the live ones dropped."""
        which = None if patterns is None else set(_unique(normalize_pattern(p) for p in patterns))

        def change(entries: list[_Entry], now: float) -> tuple[list[_Entry] | None, list[LeaseView]]:
            gone = [e for e in entries if e.holder == holder and (which is None or e.pattern in which)
                    and (origin is None or e.origin == origin)]
            if not gone:
                return None, []
            kept = [e for e in entries if e.expires_at > now and not any(e is g for g in gone)]
            return kept, [e.view() for e in gone if e.expires_at > now]

        return await self._change(scope, change)

    async def expire(self, scope: str) -> list[LeaseView]:
        """Prune the expired leases of ``scope`` (a write, so watchers hear of the lapse); the ones pruned."""

        def change(entries: list[_Entry], now: float) -> tuple[list[_Entry] | None, list[LeaseView]]:
            lapsed = [e for e in entries if e.expires_at <= now]
            if not lapsed:
                return None, []
            return [e for e in entries if e.expires_at > now], [e.view() for e in lapsed]

        return await self._change(scope, change)

    async def leases(self, scope: str) -> list[LeaseView]:
        """The unexpired leases of ``scope``."""
        entries, _ = await self._read(scope)
        return _live(entries, time.time())

    async def blocking(self, scope: str, holder: str, path: str) -> LeaseView | None:
        """The lease that forbids ``holder`` to write ``path``; None when it may.

        An exclusive lease of another holder covering the path forbids it; so does a shared lease of
        another holder, unless ``holder`` has a lease of its own covering the path (it shares the file).
        """
        entries, _ = await self._read(scope)
        return blocking_lease(_live(entries, time.time()), holder, normalize_pattern(path))

    async def watch(self) -> AsyncIterator[str]:
        """Scopes whose table changes from now on (a release, a grant, a pruned lapse), as they change."""
        watcher = await self._kv.watch(">", meta_only=True)
        try:
            started = False
            async for entry in watcher:
                if entry is None:
                    started = True  # the current values came first: they are not changes
                    continue
                if started:
                    yield entry.key
        finally:
            await watcher.stop()

    # -- compare-and-set ------------------------------------------------------------------------------

    async def _read(self, scope: str) -> tuple[list[_Entry], int]:
        key = _key(scope)
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError as missing:
            # Never written, expired by its TTL (revision 0), or deleted by hand (the marker's revision).
            return [], (missing.entry.revision if missing.entry is not None else 0)
        table = _decoder.decode(entry.value) if entry.value else _Table()
        return table.leases, entry.revision or 0

    async def _change(
        self, scope: str, change: Callable[[list[_Entry], float], tuple[list[_Entry] | None, T]]
    ) -> T:
        """Read, decide, write if the decision changed the table, until a write lands on the revision read."""
        attempt = 0
        while True:
            entries, revision = await self._read(scope)
            now = time.time()  # after the read: table times never go backwards across revisions
            updated, result = change(entries, now)
            if updated is None:
                return result
            try:
                landed = await self._write(scope, updated, now, last=revision)
            except KeyWrongLastSequenceError:
                attempt += 1
                # Someone else wrote in between; a little jitter keeps many racers from colliding in step.
                await asyncio.sleep(random.uniform(0, 0.002 * min(attempt, 10)))
                continue
            self.last_write = TableWrite(revision=landed, at=now)
            return result

    async def _write(self, scope: str, entries: list[_Entry], now: float, *, last: int) -> int:
        latest = max((e.expires_at for e in entries), default=now)
        key_ttl = max(1, math.ceil(latest - now + self.key_grace))
        # KeyValue.update takes no msg_ttl in nats-py 2.16: publish as it does, with the TTL header added.
        try:
            ack = await self._js.publish(
                _SUBJECT_PREFIX + _key(scope),
                _encoder.encode(_Table(at=now, leases=entries)),
                headers={"Nats-Expected-Last-Subject-Sequence": str(last)},
                msg_ttl=key_ttl,
            )
        except APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                raise KeyWrongLastSequenceError(description=exc.description) from exc
            raise
        return ack.seq


def _live(entries: list[_Entry], now: float) -> list[LeaseView]:
    return [e.view() for e in entries if e.expires_at > now]


def blocking_lease(leases: list[LeaseView], holder: str, path: str) -> LeaseView | None:
    """Of unexpired ``leases``, the one that forbids ``holder`` to write ``path`` (see :meth:`LeaseTable.blocking`)."""
    covering = [lease for lease in leases if lease_covers(lease.pattern, path)]
    others = [lease for lease in covering if lease.holder != holder]
    for lease in others:
        if lease.mode == "exclusive":
            return lease
    if others and not any(lease.holder == holder for lease in covering):
        return others[0]
    return None


def bead_scope(leases: list[LeaseView], holder: str) -> list[str]:
    """The patterns ``holder`` may write: those the coordinator leased to it for its bead (origin ``coordinator``).

    A worker's own reservations are not in it: reserving keeps others off a file, it does not widen the bead."""
    return [lease.pattern for lease in leases if lease.holder == holder and lease.origin == "coordinator"]


def in_scope(scope: list[str], path: str) -> bool:
    """Whether ``path`` lies in a bead scope (a pattern of it covers the path)."""
    return any(lease_covers(pattern, path) for pattern in scope)


def _key(scope: str) -> str:
    if not _SCOPE.match(scope):
        raise ValueError(f"scope must be letters, digits, '-', '_', '=' or '.', got {scope!r}")
    return scope


def _check_ttl(ttl: float) -> None:
    if not ttl > 0:
        raise ValueError(f"ttl must be positive, got {ttl}")


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --- patterns ------------------------------------------------------------------------------------------

_META = frozenset("*?[{\\")


def normalize_pattern(pattern: str) -> str:
    """A pattern relative to the worktree root: no ``./``, no leading or doubled ``/``; ``..`` is refused."""
    parts = [part for part in pattern.strip().split("/") if part not in ("", ".")]
    if not parts:
        raise ValueError(f"empty lease pattern: {pattern!r}")
    if ".." in parts:
        raise ValueError(f"a lease pattern must stay inside the worktree: {pattern!r}")
    return "/".join(parts)


def _is_glob(pattern: str) -> bool:
    return any(c in _META for c in pattern)


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return compile_glob(pattern)


def lease_covers(pattern: str, path: str) -> bool:
    """Whether a lease on ``pattern`` covers ``path``: a glob that matches it, or a literal path at or above it."""
    if _is_glob(pattern):
        return _compiled(pattern).match(path) is not None
    return path == pattern or path.startswith(pattern + "/")


def patterns_overlap(a: str, b: str) -> bool:
    """Whether some path could be covered by both patterns (conservative: True when unsure).

    Two literal paths overlap when one is at or above the other. Otherwise the patterns are compared
    segment by segment (``**`` spans whole segments, ``*``/``?``/classes stay inside one; a literal path
    is itself followed by ``/**``, for what lies beneath it), after expanding braces; whatever that does
    not model (escapes, huge expansions) counts as overlapping.
    """
    if not _is_glob(a) and not _is_glob(b):
        return lease_covers(a, b) or lease_covers(b, a)
    return _globs_overlap(a, b)


@lru_cache(maxsize=4096)
def _globs_overlap(a: str, b: str) -> bool:
    left, right = _alternatives(a), _alternatives(b)
    if left is None or right is None:
        return True
    return any(segments_overlap(x, y) for x in left for y in right)


def _alternatives(pattern: str) -> list[tuple[Segment, ...]] | None:
    """The alternatives of a pattern as segments: a literal path stands for itself and everything beneath it."""
    if not _is_glob(pattern):
        return [(*(literal_segment(part) for part in pattern.split("/")), "**")]
    return glob_segments(pattern)
