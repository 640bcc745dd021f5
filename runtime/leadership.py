"""Leader leases: one holder at a time for a name, kept by renewal, taken over when its holder stops renewing.

Each lease is one key of the JetStream key-value bucket ``AUTARCH_LEADERS``; its value names the holder and
the wall-clock instant the lease expires. Every change is a compare-and-set on the revision just read
(``Nats-Expected-Last-Subject-Sequence``), so of two contenders exactly one write lands. A contender takes the
key only when it is missing, expired, or already its own (a restarted process in the same slot, e.g.
``orchestrator-1`` after a SIGKILL, gets its lease back at once instead of waiting out its own expiry).

The holder renews every third of the TTL. It counts the lease lost when a renewal finds another holder, or when
no renewal landed for :data:`GIVE_UP` of the TTL (NATS unreachable): it stops acting before anybody else may
take over, so two holders never act at once as long as the machines' clocks agree within that margin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from .bus import open_key_value

__all__ = ["BUCKET", "GIVE_UP", "LeaderLease", "open_leaders"]

log = logging.getLogger(__name__)

BUCKET = "AUTARCH_LEADERS"
GIVE_UP = 0.8
"""Share of the TTL without a landed renewal after which the holder counts its lease lost."""


class _Value(msgspec.Struct, kw_only=True):
    holder: str
    expires_at: float


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(_Value).decode


async def open_leaders(nc: Client, *, replicas: int = 1) -> KeyValue:
    """Bind to ``AUTARCH_LEADERS``, creating it if missing (safe from every process at once)."""
    return await open_key_value(nc, BUCKET, replicas=replicas, description="Leader leases of services and relays")


@dataclass
class LeaderLease:
    """The lease ``key`` as seen by ``holder``."""

    kv: KeyValue
    key: str
    """The lease's name: ``service.orchestrator``, ``relay.agent_runner.<store>`` (letters, digits, ``.-_``)."""
    holder: str
    """Who asks: stable per slot (``orchestrator-1``), unique among the contenders."""
    ttl: float
    """Seconds the lease lives after each renewal."""
    revision: int = 0
    """Revision of our last landed write (0: not held)."""
    renewed_at: float = 0.0
    """``time.monotonic()`` of our last landed write."""
    _lost: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def held(self) -> bool:
        return self.revision > 0 and not self._lost.is_set()

    async def holder_now(self) -> str | None:
        """Who holds the lease right now (None: nobody, or expired)."""
        value, _ = await self._read()
        return value.holder if value is not None and value.expires_at > time.time() else None

    async def try_acquire(self) -> bool:
        """Take the lease if it is free, expired or ours; whether we hold it now."""
        value, revision = await self._read()
        if value is not None and value.holder != self.holder and value.expires_at > time.time():
            return False
        return await self._write(revision)

    async def acquire(self, *, poll: float | None = None) -> None:
        """Wait until we hold the lease (polling every ``poll`` seconds, default a fifth of the TTL)."""
        pause = poll if poll is not None else self.ttl / 5
        while True:
            try:
                if await self.try_acquire():
                    return
            except Exception as exc:  # a lost race, NATS away, the bucket electing its leader: try again
                log.debug("%s: acquire attempt failed: %r", self.key, exc)
            await asyncio.sleep(pause)

    async def renew(self) -> bool:
        """Extend our lease; False (and lost) when someone else holds it now."""
        if self._lost.is_set():
            return False
        try:
            return await self._write(self.revision)
        except KeyWrongLastSequenceError:
            self._mark_lost("another holder wrote the lease")
            return False

    async def release(self) -> None:
        """Give the lease up now (a graceful stop lets a standby take over without waiting for the TTL)."""
        if self.revision == 0:
            return
        revision, self.revision = self.revision, 0
        with contextlib.suppress(Exception):
            await self.kv.delete(self.key, last=revision)

    async def keep(self, on_lost: Callable[[], Awaitable[None] | None]) -> None:
        """Renew until cancelled; when the lease is lost, call ``on_lost`` once and return.

        The step-down deadline is kept by the clock, not by attempts: a renewal that hangs (a JetStream request
        waits seconds for a stream with no leader) is cut off when the deadline comes, and the lease counts as
        lost then, before a contender may take it.
        """
        pause = self.ttl / 3
        while True:
            await asyncio.sleep(pause)
            remaining = self.renewed_at + self.ttl * GIVE_UP - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                if not await asyncio.wait_for(self.renew(), remaining):
                    break
                pause = self.ttl / 3
            except Exception as exc:  # NATS away or a stream leader election: retry until the margin is spent
                if time.monotonic() - self.renewed_at >= self.ttl * GIVE_UP:
                    self._mark_lost(f"no renewal for {self.ttl * GIVE_UP:.1f}s")
                    break
                log.warning("%s: renewal failed: %r", self.key, exc)
                pause = self.ttl / 10  # try again soon: the deadline is near
        outcome = on_lost()
        if outcome is not None:
            await outcome

    def _mark_lost(self, why: str) -> None:
        if not self._lost.is_set():
            log.warning("%s: %s lost the lease (%s)", self.key, self.holder, why)
        self._lost.set()
        self.revision = 0

    async def _read(self) -> tuple[_Value | None, int]:
        try:
            entry = await self.kv.get(self.key)
        except KeyNotFoundError as missing:  # never written, or deleted (the marker's revision)
            return None, (missing.entry.revision or 0) if missing.entry is not None else 0
        value = _decode(entry.value) if entry.value else None
        return value, entry.revision or 0

    async def _write(self, last: int) -> bool:
        started = time.monotonic()
        value = _Value(holder=self.holder, expires_at=time.time() + self.ttl)
        try:
            self.revision = await self.kv.update(self.key, _encode(value), last=last)
        except KeyWrongLastSequenceError:
            if self.revision:
                raise
            return False
        self.renewed_at = started
        self._lost.clear()
        return True
