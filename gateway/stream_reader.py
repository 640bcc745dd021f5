"""A reader of the event stream after a given sequence: an ephemeral pull consumer the gateway manages itself.

The gateway reads ``AUTARCH_EVENTS`` two ways, both through this class: the shared live feed of a filter
(:meth:`StreamReader.follow`, lingering pull requests) and one client's catch-up from its ``Last-Event-ID``
(:meth:`StreamReader.fetch`, as many events as the client has room for, no waiting). Either way the reader
knows the last stream sequence it handed out, and the consumer is ours: created with a name of our own from
``last + 1``, it is recreated from there whenever it is lost — a NATS restart forgets it (memory storage), a
request goes unanswered, its heartbeat falls silent, or the consumer sequence shows a gap. A message of a
consumer replaced since is ignored, so nothing is handed out twice and nothing is skipped.

Each pull request has its own reply subject (``<inbox>.<n>``), so a status is matched to the request it ends
and a stale one is ignored (the same reason as ``runtime/pulls.py``, which follows durable consumers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable, Coroutine

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import ConnectionClosedError
from nats.js.api import DEFAULT_PREFIX, AckPolicy, ConsumerConfig, DeliverPolicy

from autarch.contracts import subjects
from autarch.runtime.pulls import next_within
from autarch.runtime.retry import REQUEST_UNAVAILABLE, retry

__all__ = ["StreamReader", "in_background"]

log = logging.getLogger(__name__)

HEARTBEAT = 1.0
"""Seconds between the server's idle heartbeats on a lingering pull request; two missed (a NATS restart lost
the consumer) and the reader recreates it after the last sequence it handed out."""

_EXPIRES = 5.0
"""Seconds a lingering pull request lives; then the next one is sent."""

_ANSWER = 5.0
"""Seconds a no-wait request may take to be answered before the consumer counts as lost."""

_INACTIVE = 60.0
"""Seconds without a pull request after which the server deletes a consumer: a gateway that died leaves none
behind for long. A client that reads nothing for longer loses its catch-up consumer, recreated when it reads."""

_NO_MESSAGES, _TIMEOUT, _HEARTBEAT_STATUS = "404", "408", "100"


class _Lost(Exception):
    """The consumer is gone or unreachable: recreate it after the last sequence handed out."""


class StreamReader:
    """Every event of ``subject`` after stream sequence ``after``, exactly once and in order.

    ``last`` is the last sequence handed out; ``pending`` the number of matching events after it when the
    server last said (the consumer's creation, a message's metadata, or 0 after a "no messages" answer).
    """

    def __init__(self, nc: Client, *, subject: str, after: int, heartbeat: float = HEARTBEAT) -> None:
        self._nc = nc
        self.subject = subject
        self.last = after
        self.pending: int | None = None
        self._heartbeat = heartbeat
        self._name: str | None = None
        self._expected = 1  # the next consumer sequence: a gap means messages were lost on the way
        self._lost = False
        self._inbox = ""
        self._sub: Subscription | None = None
        self._queue: asyncio.Queue[Msg] = asyncio.Queue()
        self._requests = 0
        self._closed = False

    async def open(self, *, retry: bool = False) -> None:
        """Subscribe to the replies and create the consumer: once (failing here fails the caller), or with
        ``retry`` until it is made (NATS away, the server's consumer limit reached) or the connection closes."""
        self._inbox = self._nc.new_inbox()

        async def put(msg: Msg) -> None:
            self._queue.put_nowait(msg)

        self._sub = await self._nc.subscribe(f"{self._inbox}.*", cb=put)
        try:
            await (self._recreate() if retry else self._create())
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop reading: the reply subscription ends and the consumer is deleted, in the background."""
        if self._closed:
            return
        self._closed = True
        sub, name = self._sub, self._name
        self._sub = self._name = None
        in_background(self._release(sub, name))

    async def fetch(self, batch: int) -> list[Msg]:
        """The events available now, at most ``batch`` of them (none when nothing is pending); never waits for
        new ones. A lost consumer is recreated and asked again."""
        while True:
            if self._lost:
                await self._recreate()
            got = await self._pull(batch, handle=None, linger=False)
            if got or not self._lost:
                return got

    async def follow(self, handle: Callable[[Msg], None], *, batch: int) -> None:
        """Hand every event to ``handle`` as it comes, until cancelled or the NATS connection closes."""
        while True:
            if self._lost:
                await self._recreate()
            await self._pull(batch, handle=handle, linger=True)

    async def _create(self) -> None:
        name = f"autarch-sse-{secrets.token_hex(8)}"
        config = ConsumerConfig(
            name=name, filter_subject=self.subject, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.last + 1, ack_policy=AckPolicy.NONE, mem_storage=True, num_replicas=1,
            inactive_threshold=_INACTIVE,
        )
        old, self._name = self._name, name
        self._expected = 1
        try:
            info = await self._nc.jetstream().add_consumer(subjects.EVENTS_STREAM, config)
        except BaseException:
            # Unanswered is not "not made": the consumer may exist; delete it with the old one.
            in_background(self._release(None, name))
            self._name = old
            raise
        self.pending = info.num_pending
        if old is not None:
            in_background(self._release(None, old))

    async def _recreate(self) -> None:
        await retry(self._create, policy=REQUEST_UNAVAILABLE, name=f"event stream consumer for {self.subject}",
                    retry_on=lambda exc: not self._nc.is_closed, log_level=logging.DEBUG)
        if self._lost:
            log.info("recreated the consumer of %s after sequence %d", self.subject, self.last)
        self._lost = False

    async def _pull(self, batch: int, *, handle: Callable[[Msg], None] | None, linger: bool) -> list[Msg]:
        """One pull request; the events it brought (with ``handle``: handed to it instead, and none returned)."""
        if self._nc.is_closed:
            raise ConnectionClosedError
        self._requests += 1
        reply = f"{self._inbox}.{self._requests}"
        request: dict[str, object] = {"batch": batch}
        if linger:
            request.update(expires=int(_EXPIRES * 1e9), idle_heartbeat=int(self._heartbeat * 1e9))
        else:
            request["no_wait"] = True
        try:
            await self._nc.publish(f"{DEFAULT_PREFIX}.CONSUMER.MSG.NEXT.{subjects.EVENTS_STREAM}.{self._name}",
                                   json.dumps(request).encode(), reply=reply)
        except ConnectionClosedError:
            raise
        except Exception as exc:  # reconnecting with a full buffer: try again on a new consumer
            log.debug("pull request on %s not sent: %r", self.subject, exc)
            self._lost = True
            await asyncio.sleep(REQUEST_UNAVAILABLE.max_delay)
            return []
        loop = asyncio.get_running_loop()
        # A lingering request ends with its batch, its expiry (408) or a status; silence for two heartbeats
        # means the server lost it. A no-wait request is answered at once or not at all.
        silence = 2 * self._heartbeat if linger else _ANSWER
        deadline = loop.time() + (_EXPIRES + self._heartbeat if linger else _ANSWER)
        heard = loop.time()
        got: list[Msg] = []
        delivered = 0
        while delivered < batch:
            msg = await self._next(min(deadline, heard + silence) - loop.time())
            if msg is None:
                if loop.time() < deadline:
                    self._lost = True  # silent: the server lost the request or the consumer
                break
            if msg.data or not msg.headers or "Status" not in msg.headers:
                if self._accept(msg):
                    delivered += 1
                    heard = loop.time()
                    if handle is None:
                        got.append(msg)
                    else:
                        handle(msg)
                if self._lost:
                    break
                continue
            if msg.subject != reply:
                continue  # the end of an earlier request
            heard = loop.time()
            status = msg.headers["Status"]
            if status == _HEARTBEAT_STATUS:
                continue
            if status == _NO_MESSAGES:
                self.pending = 0
            elif status != _TIMEOUT:
                # 409 consumer deleted, 503 no such consumer (JetStream restarted), …: make a new one.
                log.debug("pull request on %s ended with %s %s", self.subject, status,
                          msg.headers.get("Description", ""))
                self._lost = True
            break
        return got

    def _accept(self, msg: Msg) -> bool:
        """Whether ``msg`` is the next event of the current consumer (a gap marks the consumer lost)."""
        try:
            meta = msg.metadata
        except Exception:  # not a JetStream message: not ours
            return False
        if meta.consumer != self._name:
            return False  # from a consumer replaced since: what it had, the new one delivers again
        if meta.sequence.consumer != self._expected or meta.sequence.stream <= self.last:
            self._lost = True
            return False
        self._expected += 1
        self.last = meta.sequence.stream
        self.pending = meta.num_pending
        return True

    async def _next(self, timeout: float) -> Msg | None:
        return await next_within(self._queue, timeout)

    async def _release(self, sub: Subscription | None, name: str | None) -> None:
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if name is not None and not self._nc.is_closed:
            with contextlib.suppress(Exception):  # gone already, or NATS away: it expires by itself
                await self._nc.jetstream(timeout=2).delete_consumer(subjects.EVENTS_STREAM, name)


_background: set[asyncio.Task[None]] = set()
"""Clean-ups under way (a reference keeps each task alive until it ends)."""


def in_background(coro: Coroutine[object, object, None]) -> None:
    """Run ``coro`` (a clean-up nobody waits for) to its end, keeping it referenced meanwhile."""
    task = asyncio.ensure_future(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)
