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

    async def _commit(self, batch: list[tuple[list[Any], asyncio.Future[None]]]) -> None:
        try:
            await self._save(*(e for events, _ in batch for e in events))
            outcomes: list[BaseException | None] = [None] * len(batch)
        except Exception:
            # One bad aggregate must not fail its neighbours: retry them one by one.
            outcomes = []
            for events, _ in batch:
                try:
                    await self._save(*events)
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
