"""Group commit: aggregates saved by concurrent commands share one transaction (one fsync)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate

from autarch.runtime.cancel import cancel_and_wait
from autarch.runtime.storage import STORAGE, Reserve, StorageFull, StorageState, storage_full

__all__ = ["BatchedWriter"]

log = logging.getLogger(__name__)


@dataclass
class BatchedWriter:
    """Saves aggregates for many waiting commands at once; each caller learns its own outcome."""

    app: Application
    """The application whose ``save`` is called."""
    after_save: Callable[[], None] | None = None
    """Called after every successful transaction (wakes the relay)."""
    max_batch: int = 256
    inline: bool = False
    """Commit on the event loop instead of a worker thread (an embedded store's commit is cheaper than the trip:
    ``runtime.sqlite_store.commits_inline``)."""
    store_path: str = ""
    """What a storage problem of the store names (its SQLite file)."""
    reserve: Reserve | None = None
    """Room kept aside: given up when the store is full, so that a halt saying so can still be recorded."""
    storage: StorageState = STORAGE
    _queue: asyncio.Queue[tuple[list[Any], asyncio.Future[None]]] = field(default_factory=asyncio.Queue)
    _task: asyncio.Task[None] | None = None
    _idle: asyncio.Event = field(default_factory=asyncio.Event)

    def start(self) -> None:
        self._idle.set()
        self._task = asyncio.create_task(self._run(), name="batched-writer")

    async def stop(self) -> None:
        """Stop after the transaction in flight (cancelling would leave its thread writing to a closing store)."""
        if self._task is None:
            return
        await self._idle.wait()
        await cancel_and_wait([self._task])
        self._task = None

    async def save(self, aggregate: Aggregate) -> None:
        """Return once ``aggregate``'s pending events are durably recorded.

        Raises the store's ``IntegrityError`` when another writer recorded a version this one was about to.
        """
        # The events are taken from the aggregate here, once: saving an aggregate empties its pending list, so
        # a batch that failed could otherwise only be retried with nothing left to record (a false success).
        events: list[Any] = list(aggregate.collect_events())
        if not events:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.inline and self._queue.empty() and self._idle.is_set():
            # Nothing queued or being written: commit here rather than hand over to the writer task and back
            # (an inline commit never yields, so nothing can slip in between and the order is kept).
            await self._commit([(events, future)])
        else:
            await self._queue.put((events, future))
        await future

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self._idle.clear()
            try:
                await self._commit(batch)
            finally:
                self._idle.set()

    async def _save(self, *events: Any) -> None:
        if self.inline:
            self.app.save(*events)
        else:
            await asyncio.to_thread(self.app.save, *events)

    async def _save_or_report(self, *events: Any) -> None:
        """Save, or raise :class:`StorageFull` (reported) when the store has no space left; the reserve, if any,
        is given up once for a second try first. A failed transaction recorded nothing, so trying again is safe."""
        try:
            await self._save(*events)
            return
        except Exception as exc:
            full = storage_full(exc, self.store_path)
            if full is None:
                raise
            self.storage.report(full)
            if self.reserve is None or not self.reserve.release():
                raise full from exc
        try:
            await self._save(*events)
        except Exception as exc:
            full = storage_full(exc, self.store_path)
            if full is None:
                raise
            raise full from exc

    async def _commit(self, batch: list[tuple[list[Any], asyncio.Future[None]]]) -> None:
        try:
            await self._save_or_report(*(e for events, _ in batch for e in events))
            outcomes: list[BaseException | None] = [None] * len(batch)
        except StorageFull as full:
            # No neighbour is to blame: every one of them fails alike.
            outcomes = [full] * len(batch)
        except Exception:
            # One bad aggregate must not fail its neighbours: retry them one by one.
            outcomes = []
            for events, _ in batch:
                try:
                    await self._save_or_report(*events)
                    outcomes.append(None)
                except Exception as exc:
                    outcomes.append(exc)
        if self.after_save is not None and any(o is None for o in outcomes):
            self.after_save()
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if outcome is None:
                future.set_result(None)
            else:
                future.set_exception(outcome)
