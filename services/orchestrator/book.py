"""The one way the orchestrator reads and changes an aggregate: a :class:`Book` per aggregate kind.

A command runs on one aggregate at a time (a lock per aggregate): the book reads the aggregate, runs the command
(which checks its rules and raises a :class:`~.refusal.Refusal` before recording anything), and saves what it
recorded, conditionally on the version read. When another writer of the store recorded that version meanwhile
(an orchestrator instance sharing the store) the store refuses the save (``runtime/conflicts.py`` tells that
refusal from a real failure, on every store) and, if the book retries, the command runs again on a fresh read:
that is what makes a claim atomic. A refusal is answered as a typed error with nothing saved. Once a change is
saved, ``on_change`` is told (the context's read model, its driver's kick).

Every read of every book goes through :meth:`Book.load`, which answers the latest state kept between commands
(``latest.py``) for the books that ask for it, and every rebuild from the store through :meth:`Book.rebuild`: a
faster way to rebuild an aggregate (a snapshot and the events after it) is added there once, for every book.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Generic, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate

from autarch.runtime.aggregates import load_as
from autarch.runtime.conflicts import is_write_conflict
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.snapshots import Snapshots

from .latest import Latest
from .refusal import Refusal
from .writer import BatchedWriter

__all__ = ["Book", "ignore"]

A = TypeVar("A", bound=Aggregate)
R = TypeVar("R")


def ignore(_: Any) -> None:
    """An ``on_change`` (or a kick) that does nothing: a book nobody follows, as in unit tests."""


class Book(Generic[A]):
    """Reads, changes and saves the aggregates of one kind, one command per aggregate at a time.

    Args:
        app: the application whose store holds them.
        writer: saves what a command recorded (group commit).
        kind: the aggregate class; an id of another kind of aggregate is not found.
        noun: what an aggregate is called in errors and logs (``workflow``, ``epic``).
        id_field: the detail naming the aggregate in a typed error (``workflow_id``).
        aggregate_id: the aggregate's id from its key (the key itself when the two are one).
        canonical: a key in its one spelling; raises the typed error for a malformed one (by default
            ``not_found``: no aggregate has such an id).
        absent: what a command meets when the store holds no aggregate for a key: a typed error (by default
            ``not_found``), or a new aggregate to record the command in.
        on_change: told of each aggregate once its change is saved.
        conflict_retries: how often a command runs again after another writer won the save (0: the store's
            ``IntegrityError`` is raised at once).
        keep: how many aggregates' latest state is kept between reads (0: every read rebuilds from the store).
        inline_reads: read on the event loop rather than in a worker thread (an embedded store answers faster
            than a thread is reached).
        log: where a retried conflict is told.
    """

    def __init__(self, *, app: Application[UUID], writer: BatchedWriter, kind: type[A], noun: str, id_field: str,
                 aggregate_id: Callable[[str], UUID] = UUID, canonical: Callable[[str], str] | None = None,
                 absent: Callable[[str], A] | None = None, on_change: Callable[[A], None] = ignore,
                 conflict_retries: int = 20, keep: int = 0, inline_reads: bool = False,
                 log: logging.Logger | None = None) -> None:
        self.app = app
        self.writer = writer
        self.kind = kind
        self.noun = noun
        self.id_field = id_field
        self.aggregate_id = aggregate_id
        self._canonical = canonical or self._uuid_or_not_found
        self._absent = absent or self._not_found
        self._on_change = on_change
        self._retries = conflict_retries
        self._inline = inline_reads
        self._log = log or logging.getLogger("orchestrator.book")
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Not eventsourcing's own ``Application.snapshots`` (off here): ours, under its own name.
        snapshots = getattr(app, "snapshotter", None)
        self._snapshots = snapshots if isinstance(snapshots, Snapshots) else None
        self._latest = (Latest(load=self.rebuild, recorded_after=self._recorded_after, capacity=keep)
                        if keep > 0 else None)

    # --- keys -------------------------------------------------------------------------------------------

    def key(self, some_id: str) -> str:
        """``some_id`` in its one spelling (the tools service forwards ids verbatim)."""
        return self._canonical(some_id)

    def lock(self, some_id: str) -> asyncio.Lock:
        """The lock one aggregate's commands take turns with (whatever the spelling of its id)."""
        return self._locks[self.key(some_id)]

    def _uuid_or_not_found(self, some_id: str) -> str:
        try:
            return str(uuid.UUID(some_id))
        except ValueError:
            raise ServiceFailure.not_found(f"no {self.noun} {some_id}", **{self.id_field: some_id}) from None

    def _not_found(self, some_id: str) -> A:
        raise ServiceFailure.not_found(f"no {self.noun} {some_id}", **{self.id_field: some_id})

    # --- reading ----------------------------------------------------------------------------------------

    def load(self, key: str, *, version: int | None = None) -> A:
        """The aggregate of ``key`` as the store holds it (its first ``version`` events when given); blocking.

        Raises ``AggregateNotFoundError`` when the store holds none. The latest state is shared with every other
        reader: read it only (a change goes through :meth:`change`, which works on its own copy).
        """
        if self._latest is not None and version is None:
            return self._latest.get(key)
        return self.rebuild(key, version=version)

    def rebuild(self, key: str, *, version: int | None = None) -> A:
        """The aggregate of ``key`` rebuilt from the store, and not kept (a read at start that may never be
        followed by another); blocking. The one place an aggregate is rebuilt from its events: from its last
        snapshot and the events after it when the application keeps snapshots (``runtime/snapshots.py``)."""
        if self._snapshots is not None:
            return self._snapshots.load(self.kind, self.aggregate_id(key), version=version)
        return load_as(self.app, self.kind, self.aggregate_id(key), version=version)

    def _recorded_after(self, key: str, version: int) -> bool:
        return bool(self.app.recorder.select_events(self.aggregate_id(key), gt=version, limit=1))

    async def find(self, some_id: str) -> A | None:
        """The aggregate as the store holds it, or None when there is none."""
        key = self.key(some_id)
        try:
            return self.load(key) if self._inline else await asyncio.to_thread(self.load, key)
        except AggregateNotFoundError:
            return None

    async def read(self, some_id: str) -> A:
        """The aggregate as the store holds it; what ``absent`` makes of a key with none."""
        found = await self.find(some_id)
        return found if found is not None else self._absent(some_id)

    # --- changing ---------------------------------------------------------------------------------------

    async def change(self, some_id: str, command: Callable[[A], R]) -> tuple[A, R]:
        """Run ``command`` on the aggregate under its lock and save what it recorded; (aggregate, its result).

        A :class:`Refusal` becomes a typed error with nothing saved (the loaded copy is dropped).
        """
        key = self.key(some_id)
        for _ in range(self._retries + 1):
            async with self._locks[key]:
                found = await self.find(key)
                aggregate = found if found is not None else self._absent(some_id)
                if self._latest is not None:
                    aggregate = self._latest.copy_for_change(aggregate)
                before = aggregate.version
                try:
                    result = command(aggregate)
                except Refusal as exc:
                    raise exc.failure(**{self.id_field: some_id}) from None
                if aggregate.version == before:  # nothing recorded (a new aggregate is then not saved either)
                    return aggregate, result
                try:
                    await self.save(key, aggregate)
                except Exception as exc:
                    if not self._retries or not is_write_conflict(exc):
                        raise
                    self._log.info("%s %s changed under a command; reading it again", self.noun, key)
                    continue
            return aggregate, result
        raise ServiceFailure.conflict(f"{self.noun} {key} keeps changing; try again", **{self.id_field: key})

    async def save(self, key: str, aggregate: A) -> None:
        """Save what the aggregate of ``key`` recorded, conditionally on the version it was read at, then tell
        ``on_change``.

        A new aggregate is saved this way by whoever made it, holding :meth:`lock`. Raises the store's
        ``IntegrityError`` when another writer recorded a version this one was about to.
        """
        saved = len(aggregate.pending_events)
        await self.writer.save(aggregate)
        if self._latest is not None:
            self._latest.keep(self.key(key), aggregate)
        self._on_change(aggregate)
        if self._snapshots is not None and self._snapshots.due(aggregate, saved):
            # Written after the events, from the state they were saved from: a crash in between leaves the last
            # snapshot, and the next rebuild replays the events after it. Encoded off the event loop (a long
            # session's state takes milliseconds); the saved aggregate is only read from here on. Best effort:
            # ``take`` reports its own failures and never raises, so the saved change stands.
            await asyncio.to_thread(self._snapshots.take, aggregate)
