"""One relay at a time per store, however many processes write to it.

Several writers of one store (instances of a service sharing a PostgreSQL schema) each build an
:class:`~autarch.runtime.relay.EventRelay`, but only the holder of the store's leader lease runs it
(:mod:`autarch.runtime.leadership`, key ``relay.<app>.<store>``). The others wait; when the holder dies or
loses the lease, one of them takes over from the tracking position in the store.

Why this never doubles or skips an event:

- **No skip.** The position is the tracking record in the store, written after the publishes it covers, and a
  new leader reads it when it starts. Notification ids are handed out in commit order (SQLite has one writer;
  eventsourcing's PostgreSQL recorder takes ``LOCK TABLE … IN EXCLUSIVE MODE`` in every inserting transaction),
  so no event committed later can carry an id below one a relay already read.
- **No double.** Every publish carries ``Nats-Msg-Id = <app>:<store>:<notification id>``. An old leader that
  still finishes its round while the new one repeats it (the lease changed hands mid-round) publishes the same
  ids, and JetStream drops the repeats within its duplicate window. Two tracking writes of the same id: the
  loser's round fails, it reads the position again and carries on from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from .cancel import cancel_and_wait
from .leadership import LeaderLease, open_leaders
from .relay import EventRelay

__all__ = ["LeadingRelay", "store_key"]

log = logging.getLogger(__name__)


def store_key(env: dict[str, str]) -> str:
    """A short stable name of the store ``env`` configures (database, host, port, schema or SQLite file)."""
    parts = [env.get(k, "") for k in ("PERSISTENCE_MODULE", "POSTGRES_HOST", "POSTGRES_PORT", "POSTGRES_DBNAME",
                                       "POSTGRES_SCHEMA", "SQLITE_DBNAME")]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


@dataclass
class LeadingRelay:
    """Runs ``relay`` only while this process holds the relay lease of its store."""

    relay: EventRelay
    lease: LeaderLease
    nc: Client | None = None
    """Where wake-up pings go (None: the relay only polls for other writers' events)."""
    _task: asyncio.Task[None] | None = None
    _wakes: Subscription | None = None
    _pings: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    async def open(cls, relay: EventRelay, nc: Client, *, store: str, holder: str, ttl: float,
                   replicas: int = 1) -> LeadingRelay:
        """``store``: :func:`store_key` of the relay's store; ``holder``: this process's unique name."""
        kv = await open_leaders(nc, replicas=replicas)
        lease = LeaderLease(kv=kv, key=f"relay.{relay.app.name}.{store}", holder=holder, ttl=ttl)
        leading = cls(relay=relay, lease=lease, nc=nc)
        leading._wakes = await nc.subscribe(leading.wake_subject, cb=leading._woken)
        return leading

    @property
    def wake_subject(self) -> str:
        """Core-NATS subject a writer that does not lead the relay pings after saving (the lease key's tail)."""
        return f"autarch.relay.wake.{self.lease.key.removeprefix('relay.')}"

    async def _woken(self, _msg: Msg) -> None:
        if self.lease.held:
            self.relay.wake()

    @property
    def leading(self) -> bool:
        return self.lease.held

    def wake(self) -> None:
        """New events were saved here: wake the relay if this process leads it, else ping the one that does (which
        would otherwise see them only at its next poll)."""
        if self.lease.held:
            self.relay.wake()
        elif self.nc is not None:
            ping = asyncio.get_running_loop().create_task(self.nc.publish(self.wake_subject, b""))
            self._pings.add(ping)
            ping.add_done_callback(self._pings.discard)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"leading-{self.relay.name}")

    async def _run(self) -> None:
        while True:
            await self.lease.acquire()
            log.info("%s: %s leads the relay", self.lease.key, self.lease.holder)
            self.relay.start()
            await self.lease.keep(on_lost=self.relay.stop)

    async def stop(self) -> None:
        """Stop relaying; a leader publishes what is saved, then releases the lease to a waiting relay."""
        if self._wakes is not None:
            with contextlib.suppress(Exception):
                await self._wakes.unsubscribe()
            self._wakes = None
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
        await self.relay.stop()
        if self.lease.held:
            try:
                await asyncio.wait_for(self.relay.publish_pending(), timeout=5)
            except Exception as exc:  # what is left waits for the next leader: nothing is lost
                log.warning("%s: last round did not finish: %s", self.relay.name, exc)
            with contextlib.suppress(Exception):
                await self.lease.release()
