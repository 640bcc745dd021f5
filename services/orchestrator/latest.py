"""The latest recorded state of each aggregate, kept between commands and checked against the store on every read.

The workflow driver reads a workflow several times per event it handles (each ``_advance`` pass, each action) and
every command reads it again before changing it. Rebuilding it from its events each time was the orchestrator's
largest cost under 20 concurrent workflows (the replay's SQLite read and decoding, and the hop to a worker
thread for it). Here the last state read or saved is kept, and a read asks the store only whether anything was
recorded after that version (one indexed lookup): another writer of the same store (a second orchestrator, a
tool run against the database) is seen at once, and the aggregate is then rebuilt from the store as before.
Measured with ``tests/benchmarks/workflows.py`` (20 workflows, three runs each, alternated): the orchestrator
spent 1.15-1.4 CPU seconds per run instead of 2.0-2.2.

A kept aggregate is shared by every reader and never changed in place: :meth:`Latest.copy_for_change` gives a
command its own copy, and only a copy whose events were saved replaces the kept one. A kept aggregate found
changed anyway (its version is not the one it was kept at: a reader called a command on it) is dropped and
rebuilt from the store, so such a slip cannot leak unsaved state into later reads.
"""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from eventsourcing.domain import Aggregate

__all__ = ["Latest"]

A = TypeVar("A", bound=Aggregate)


class Latest(Generic[A]):
    """The latest state of up to ``capacity`` aggregates of one book (least recently read dropped first).

    Args:
        load: rebuilds an aggregate from the store (``AggregateNotFoundError`` when there is none).
        recorded_after: whether the store holds an event of the aggregate after the given version.
    """

    def __init__(self, *, load: Callable[[str], A], recorded_after: Callable[[str, int], bool],
                 capacity: int = 1024) -> None:
        self._load = load
        self._recorded_after = recorded_after
        self.capacity = capacity
        self._kept: OrderedDict[str, tuple[int, A]] = OrderedDict()
        # Reads of a networked store run in worker threads: the dictionary's check-then-update steps are guarded.
        self._lock = threading.Lock()

    def get(self, key: str) -> A:
        """The aggregate as the store holds it now; shared, so read it only (``AggregateNotFoundError``)."""
        with self._lock:
            entry = self._kept.get(key)
        if entry is not None:
            version, aggregate = entry
            if aggregate.version == version and not self._recorded_after(key, version):
                with self._lock:
                    if key in self._kept:
                        self._kept.move_to_end(key)
                return aggregate
        aggregate = self._load(key)
        self.keep(key, aggregate)
        return aggregate

    def keep(self, key: str, aggregate: A) -> None:
        """Remember ``aggregate`` as the latest state: just rebuilt from the store, or its events just saved."""
        with self._lock:
            entry = self._kept.get(key)
            if entry is not None and entry[0] > aggregate.version:
                return  # a later state was kept meanwhile (a slower read of an older one finishing last)
            self._kept[key] = (aggregate.version, aggregate)
            self._kept.move_to_end(key)
            while len(self._kept) > self.capacity:
                self._kept.popitem(last=False)

    @staticmethod
    def copy_for_change(aggregate: A) -> A:
        """A private copy a command may change: the aggregate's own ``copy_for_change`` when it has one (a copy
        that shares what its events never change in place), else a pickle round trip (a third of the cost of
        ``deepcopy``)."""
        own = getattr(aggregate, "copy_for_change", None)
        if own is not None:
            return own()
        return pickle.loads(pickle.dumps(aggregate, pickle.HIGHEST_PROTOCOL))
