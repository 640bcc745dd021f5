"""Noticing a request that no live service instance holds any more (its instance died, or it was lost).

A request waits for its reply until its timeout, and a reply never comes from an instance that was
SIGKILLed while handling it: without help, the caller waits out the whole timeout (two minutes for a
git commit). So every request sent with :func:`autarch.runtime.requests.request` ``idempotent=True``
carries a request id in the ``Autarch-Request-Id`` header, and every :class:`TypedService` instance
keeps the ids of the requests it holds (received, not yet answered) in a :class:`HeldRequests`.

While a request waits longer than :data:`GRACE` seconds, the caller's :class:`InstanceWatch` (one per
connection and service, shared by every request waiting on that service) asks every instance of the
service on ``autarch.held.<service>`` "which of these ids do you hold?", about twice a second. Only an
instance holding one of them answers. An id no instance claims :data:`MISSES` rounds in a row is *lost*:
the instance that had it is gone (killed, restarted, partitioned away) or it never arrived. The caller
then sends the same payload again — the same idempotency key, so the service recognises a repeat —
and a service that is restarting is waited for like any other "no responders".

Why ask about the request rather than ping instances: a claim names the very request, so a live but
slow instance (a shell command running for minutes) keeps claiming it and is never retried, the death
of one of several instances retries only the requests it held, and a restart is noticed even when the
new instance came up before the first question (its fresh ``$SRV.PING`` id would look just as alive).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from autarch.contracts import subjects

__all__ = [
    "GRACE",
    "INTERVAL",
    "MISSES",
    "REQUEST_ID_HEADER",
    "HeldRequests",
    "InstanceWatch",
    "watch_for",
]

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "Autarch-Request-Id"
"""The header naming one attempt of a watched request (a new id per attempt)."""
GRACE = 1.0
"""Seconds a request waits before it is asked about: most replies come long before, and cost nothing more."""
INTERVAL = 0.5
"""Seconds between two questions while a request waits."""
WINDOW = 0.5
"""Seconds to gather claims; a round ends as soon as every id asked about is claimed."""
MISSES = 2
"""Unclaimed rounds in a row before a request counts as lost (one miss may be an instance's busy moment)."""


class _Question(msgspec.Struct, kw_only=True):
    round: int
    ids: list[str]


class _Claim(msgspec.Struct, kw_only=True):
    round: int
    instance: str
    held: list[str]


_question_decoder = msgspec.json.Decoder(_Question)
_claim_decoder = msgspec.json.Decoder(_Claim)


class HeldRequests:
    """The ids of the requests one service instance holds, and its answer to the watchers' question."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self._held: dict[str, int] = {}
        self._sub: Subscription | None = None

    def hold(self, request_id: str) -> None:
        # A count, not a set: a duplicate delivery of one attempt must not be released by the first answer.
        self._held[request_id] = self._held.get(request_id, 0) + 1

    def release(self, request_id: str) -> None:
        left = self._held.get(request_id, 0) - 1
        if left > 0:
            self._held[request_id] = left
        else:
            self._held.pop(request_id, None)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._held

    async def start(self, nc: Client, service: str) -> None:
        """Answer the question about ``service``'s requests on ``nc``."""
        self._sub = await nc.subscribe(subjects.held(service), cb=self._answer(nc))

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):  # a closed connection has no subscription left to remove
                await self._sub.unsubscribe()
            self._sub = None

    def _answer(self, nc: Client) -> Callable[[Msg], Awaitable[None]]:
        async def answer(msg: Msg) -> None:
            if not msg.reply:
                return
            try:
                question = _question_decoder.decode(msg.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return
            held = [i for i in question.ids if i in self._held]
            if held:  # silence means "not here": with many instances, only the holder answers
                claim = _Claim(round=question.round, instance=self.instance, held=held)
                with contextlib.suppress(Exception):
                    await nc.publish(msg.reply, msgspec.json.encode(claim))

        return answer


@dataclass(eq=False)
class _Waiter:
    request_id: str
    since: float
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    misses: int = 0


class InstanceWatch:
    """Asks the instances of one service about the requests waiting on it; sets a waiter's ``lost`` event."""

    def __init__(self, nc: Client, service: str, *, grace: float = GRACE, interval: float = INTERVAL,
                 window: float = WINDOW, misses: int = MISSES) -> None:
        # A weak reference: the registry of watches is keyed weakly by the connection, which a strong one
        # here would keep alive forever.
        self._nc = weakref.ref(nc)
        self.service = service
        self.grace, self.interval, self.window, self.misses = grace, interval, window, misses
        self._waiters: dict[str, _Waiter] = {}
        self._task: asyncio.Task[None] | None = None
        self._round = 0
        self._claimed: set[str] = set()
        self._asked: set[str] = set()
        self._all_claimed = asyncio.Event()

    @contextlib.asynccontextmanager
    async def waiting(self, request_id: str) -> AsyncIterator[asyncio.Event]:
        """Watch ``request_id`` for as long as the block runs; the event is set when the request is lost."""
        waiter = _Waiter(request_id, asyncio.get_running_loop().time())
        self._waiters[request_id] = waiter
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"instance-watch-{self.service}")
        try:
            yield waiter.lost
        finally:
            self._waiters.pop(request_id, None)

    async def _run(self) -> None:
        nc = self._nc()
        sub: Subscription | None = None
        loop = asyncio.get_running_loop()
        try:
            if nc is None:
                return
            inbox = nc.new_inbox()
            while self._waiters and not nc.is_closed:
                await asyncio.sleep(self.interval)
                now = loop.time()
                due = [w for w in self._waiters.values() if now - w.since >= self.grace and not w.lost.is_set()]
                if not due:
                    continue
                if not nc.is_connected:
                    # Reconnecting: silence says nothing about the instances. Count afresh once connected.
                    for w in due:
                        w.misses = 0
                    continue
                if sub is None:
                    # Only now: most requests are answered within the grace, and never cost a subscription.
                    sub = await nc.subscribe(inbox, cb=self._on_claim)
                claimed = await self._ask(nc, inbox, [w.request_id for w in due])
                for w in due:
                    if w.request_id in claimed:
                        w.misses = 0
                        continue
                    w.misses += 1
                    if w.misses >= self.misses:
                        log.info("no %s instance holds request %s any more (%.1fs after it was sent)",
                                 self.service, w.request_id, loop.time() - w.since)
                        w.lost.set()
        except asyncio.CancelledError:
            raise
        except Exception:
            # The watch must never take a request down with it: the request then just waits out its timeout.
            log.warning("watching %s requests failed", self.service, exc_info=True)
        finally:
            # Before any await: a request that starts waiting from now on must start a new task.
            self._task = None
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    async def _ask(self, nc: Client, inbox: str, ids: list[str]) -> set[str]:
        self._round += 1
        self._asked, self._claimed = set(ids), set()
        self._all_claimed.clear()
        question = _Question(round=self._round, ids=ids)
        await nc.publish(subjects.held(self.service), msgspec.json.encode(question), reply=inbox)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_claimed.wait(), self.window)
        return self._claimed

    async def _on_claim(self, msg: Msg) -> None:
        try:
            claim = _claim_decoder.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if claim.round != self._round:
            return  # a late answer to an earlier round
        self._claimed.update(claim.held)
        if self._asked <= self._claimed:
            self._all_claimed.set()


_watches: weakref.WeakKeyDictionary[Client, dict[str, InstanceWatch]] = weakref.WeakKeyDictionary()


def watch_for(nc: Client, service: str) -> InstanceWatch:
    """The watch of ``service``'s requests on ``nc`` (one per connection and service, made on first use)."""
    by_service = _watches.setdefault(nc, {})
    watch = by_service.get(service)
    if watch is None:
        watch = by_service[service] = InstanceWatch(nc, service)
    return watch
