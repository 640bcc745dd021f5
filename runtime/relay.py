"""The relay: from an eventsourcing application's notification log to the JetStream stream.

The store is the truth; the stream is the distribution log. The relay publishes each
notification in order with ``Nats-Msg-Id = <app>:<store>:<notification id>`` and only then records
its position (an eventsourcing tracking record, in the same database as the events). A
crash between publish and position save republishes a few events on restart, and JetStream
drops them as duplicates (``duplicate_window`` in the stream config). A crash before publish
loses nothing: the events are in the store and the position was not advanced.

Several processes writing one store run one relay at a time between them: see ``relay_leader.py``.

``<store>`` names the store itself (the id of its first aggregate), so a fresh store on a
stream that outlived an older one never has its events dropped as the older one's duplicates.

Each message of a chained event also carries its link of the aggregate's hash chain (``Autarch-Aggregate``,
``Autarch-Version``, ``Autarch-Digest``: ``runtime/chain.py``), so the stream witnesses the store's chain; after a
round, at most once per ``checkpoint_interval``, and when it stops, the relay records a checkpoint of the chain
heads it published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from eventsourcing.application import Application
from eventsourcing.domain import DomainEvent
from eventsourcing.persistence import Notification, Tracking, TrackingRecorder
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from autarch.contracts.base import encode
from autarch.contracts.events import Event, event_subject
from autarch.contracts.subjects import EVENTS_STREAM

from .cancel import cancel_and_wait
from .chain import ChainedRecorder, record_checkpoint
from .retry import RELAY_PUBLISH, retry
from .sqlite_store import make_durable
from .storage import STORAGE, StorageFull, storage_full

__all__ = ["AGGREGATE", "DIGEST", "MSG_ID", "VERSION", "EventRelay", "store_id_of"]

log = logging.getLogger(__name__)

MSG_ID = "Nats-Msg-Id"
AGGREGATE = "Autarch-Aggregate"
VERSION = "Autarch-Version"
DIGEST = "Autarch-Digest"


def store_id_of(app: Application) -> str | None:
    """The store's id in message ids: the first 12 hex digits of its first aggregate's id (None: empty store)."""
    first = app.recorder.select_notifications(start=1, limit=1)
    return first[0].originator_id.hex[:12] if first else None  # type: ignore[union-attr]  # our ids are UUIDs


class _Stopped(Exception):
    """A retry's pause ended by :meth:`EventRelay.stop`."""


@dataclass
class EventRelay:
    """Follows ``app``'s notification log and publishes every event it maps to a wire event."""

    app: Application
    """The application whose notification log is followed."""
    nc: Client
    """Connection used for JetStream publishes."""
    to_contract: Callable[[DomainEvent], Event | None]
    """Maps a stored domain event to its wire event (None: not distributed)."""
    batch: int = 500
    """Notifications read and published per round."""
    poll_interval: float = 1.0
    """Seconds between polls when nobody calls :meth:`wake` (another process wrote events)."""
    store_path: str = ""
    """What a storage problem of the store names (a tracking write that found no space)."""
    stream_path: str = ""
    """The stream's files when on this machine (``storage.embedded_stream_dir``): a publish left unanswered while
    they have no room is reported as the stream's lack of space."""
    on_published: Callable[[int], None] | None = None
    """Called with the last published notification id after each round (for metrics and tests)."""
    checkpoint_interval: float = 60.0
    """Least seconds between two checkpoints of the chain heads (0: after every round that published)."""
    _last_checkpoint: float | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _tracking: TrackingRecorder | None = None
    _store_id: str | None = None
    _published: int | None = None
    """Last tracked notification id, read from the store once and then kept (this relay is its only writer)."""
    _stopping: bool = False
    _js: JetStreamContext | None = None
    """The one JetStream context of every round: a context's first ``publish_async`` subscribes an inbox for its
    acks that lives as long as the connection, so a context per round left one subscription per round behind
    (a loop of 1,000 iterations: thousands, in this process and in the NATS server)."""

    @property
    def name(self) -> str:
        return f"relay-{self.app.name}"

    def position(self) -> int:
        """The last notification id known to be on the stream."""
        return self._recorder().max_tracking_id(self.name) or 0

    def wake(self) -> None:
        """Tell the relay that new events were saved (it also polls)."""
        self._wake.set()

    def start(self) -> None:
        # (Re)started: read the position again, another relay of this store may have moved it meanwhile.
        self._stopping, self._published = False, None
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self, *, timeout: float = 15.0) -> None:
        """Finish the round in progress, then stop.

        Never cancel mid-round: a cancelled ``to_thread`` read keeps running in its thread, and the
        store may be closed under it right after we return.
        """
        if self._task is None:
            return
        self._stopping = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            await cancel_and_wait([self._task])
            self._task = None
            return
        self._task = None
        if self._published and isinstance(self.app.recorder, ChainedRecorder):
            # The heads published since the last checkpoint, so a stopped system's log is covered to its end
            # (record_checkpoint records nothing when nothing changed).
            await asyncio.to_thread(self._checkpoint, self._published)

    def _recorder(self) -> TrackingRecorder:
        if self._tracking is None:
            self._tracking = self.app.factory.tracking_recorder()
            # Tracking tables share the store's database; create them if this is a new store.
            create = getattr(self._tracking, "create_table", None)
            if create is not None:
                create()
        return self._tracking

    async def _run(self) -> None:
        while not self._stopping:
            try:
                # NATS away, stream missing, database locked: nothing is lost, try again.
                published = await retry(self._publish_woken, policy=RELAY_PUBLISH, name=self.name,
                                        retry_on=lambda exc: True, sleep=self._pause)
            except _Stopped:
                return
            if published == 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval)
                except TimeoutError:
                    pass

    async def _publish_woken(self) -> int:
        # Clear before reading: a wake() that lands while we read is then never lost.
        self._wake.clear()
        try:
            return await self.publish_pending()
        except Exception as exc:
            self._published = None  # a failed round (another relay's tracking write won, say): read it again
            self._report(exc)
            raise

    def _report(self, exc: Exception) -> None:
        """Tell the process's storage register when the round failed for lack of space (the store's or the
        stream's); the round is retried as any other, and its problem dropped once the path has room."""
        from_nats = isinstance(exc, TimeoutError) or type(exc).__module__.startswith("nats")
        path = (self.stream_path or f"JetStream stream {EVENTS_STREAM}") if from_nats else self.store_path
        full = storage_full(exc, path)
        if full is None and from_nats and self.stream_path and not STORAGE.has_room(self.stream_path):
            full = StorageFull(self.stream_path, "the event stream's store is full: its writes go unanswered")
        if full is not None:
            STORAGE.report(full)

    async def _pause(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay)  # a stop() wakes us early
        if self._stopping:
            raise _Stopped

    def _read_durable(self, start: int) -> tuple[list[Notification], dict[int, tuple[str, int, bytes]]]:
        """The next batch, on disk, with its chain links: read and synced in one trip to a worker thread."""
        recorder = self.app.recorder
        notifications = recorder.select_notifications(start=start, limit=self.batch)
        links: dict[int, tuple[str, int, bytes]] = {}
        if notifications:
            # An SQLite store commits without fsync (runtime/sqlite_store.py): the batch goes to disk before
            # anyone can see it on the stream, so the stream never holds an event the store could lose.
            make_durable(self.app)
            if isinstance(recorder, ChainedRecorder):
                links = recorder.links_between(notifications[0].id, notifications[-1].id)
        return list(notifications), links

    def _checkpoint_due(self) -> bool:
        return isinstance(self.app.recorder, ChainedRecorder) and (
            self._last_checkpoint is None or time.monotonic() - self._last_checkpoint >= self.checkpoint_interval)

    def _checkpoint(self, last: int) -> None:
        recorder = self.app.recorder
        assert isinstance(recorder, ChainedRecorder)
        try:
            record_checkpoint(recorder, last)
        except Exception as exc:  # never holds publishing up: the next round records the heads it missed
            log.warning("%s: could not record a checkpoint of the chain heads: %s", self.name, exc)
            return
        self._last_checkpoint = time.monotonic()

    async def publish_pending(self) -> int:
        """Publish one batch of unpublished notifications; returns how many were read."""
        recorder = self._recorder()
        if self._published is None:
            self._published = recorder.max_tracking_id(self.name) or 0
        start = self._published + 1
        notifications, links = await asyncio.to_thread(self._read_durable, start)
        if not notifications:
            return 0
        if self._store_id is None:
            self._store_id = await asyncio.to_thread(store_id_of, self.app)
        if self._js is None:
            self._js = self.nc.jetstream()
        js = self._js
        acks = []
        for notification in notifications:
            contract = self.to_contract(self.app.mapper.to_domain_event(notification))  # type: ignore[arg-type]  # ours are DomainEvents
            if contract is None:
                continue
            headers = {MSG_ID: f"{self.app.name}:{self._store_id}:{notification.id}", "Autarch-Event": _tag(contract)}
            link = links.get(notification.id)
            if link is not None:
                headers |= {AGGREGATE: link[0], VERSION: str(link[1]), DIGEST: link[2].hex()}
            # publish_async sends in order and returns the ack future: the stream keeps store order.
            acks.append(await js.publish_async(event_subject(contract), encode(contract), headers=headers))
        if acks:
            await asyncio.wait_for(asyncio.gather(*acks), timeout=10)
        last = notifications[-1].id
        await asyncio.to_thread(recorder.insert_tracking, Tracking(application_name=self.name, notification_id=last))
        self._published = last
        if self._checkpoint_due():  # checked here: most rounds need no trip to a thread for it
            await asyncio.to_thread(self._checkpoint, last)
        if self.on_published is not None:
            self.on_published(last)
        return len(notifications)


def _tag(event: Event) -> str:
    return str(type(event).__struct_config__.tag)
