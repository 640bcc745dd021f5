"""The gateway's shared live feeds: one reading of the event stream, and one delta subscription, per filter.

However many SSE connections follow the same filter (every event, or one workflow's), the gateway reads the
stream for them once: a :class:`RecordedFeed` follows it with one consumer of its own (a
:class:`~autarch.gateway.stream_reader.StreamReader`) and encodes each event once; a :class:`DeltaFeed` does the
same with one core-NATS subscription to the live deltas. The :class:`Waker` hands both out to the connections
attached, a short window at a time, each window's messages joined once into one write (a :class:`Chunk`) for
every connection that gets the same ones. A feed starts with its first connection and ends with its last.

A connection joins the recorded feed at a stream sequence ``last`` (the last event it has): at once when it
wants only new events or already has everything the feed has handed out (``last >= position``), otherwise
after catching up on its own (see :mod:`autarch.gateway.sse`). From then on the feed hands it each event with
a sequence above ``last``: the feed itself misses nothing after ``position``, so the connection misses
nothing and gets nothing twice. A connection whose buffer is full when an event comes is detached and told it
fell behind: it catches up on its own again, and the feed never waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar

import msgspec
from litestar.response import ServerSentEventMessage
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import ConnectionClosedError

from autarch.contracts import subjects
from autarch.contracts.agents import TurnDelta
from autarch.contracts.events import current_shape

from .stream_reader import StreamReader, in_background

__all__ = ["CATCH_UPS", "FOLLOW_BATCH", "WAKE_WINDOW_MAX", "WAKE_WINDOW_MIN", "WAKE_WINDOW_PER_MEMBER", "Chunk",
           "DeltaFeed", "Encoded", "Fanout", "Member", "RecordedFeed", "Waker",
           "fanout_of", "recorded_message"]

log = logging.getLogger(__name__)

CATCH_UPS = 128
"""Connections of one NATS connection that may read the stream on their own at once (each holds a consumer
while it does; the server allows a thousand per stream); the others wait their turn."""

FOLLOW_BATCH = 256
"""Events one pull request of a shared feed asks for; the next request goes out when they have come."""

WAKE_WINDOW_PER_MEMBER = 20e-6
"""Seconds the connections' wake-up waits, per connection to wake, for more messages to go out in the same write."""

WAKE_WINDOW_MAX = 0.02
"""The longest wait of a wake-up (reached at a thousand connections)."""

WAKE_WINDOW_MIN = 0.001
"""The shortest wait of a wake-up, however few the connections. Handed out at the loop's next turn, an event and
the deltas that follow it went out to a lone client as several small writes in a row, and on loopback one in ten
events then reached the client 44-48 ms late (a Nagle-free socket still stalled behind its own small segments; a
reference server writing each message on its own did the same, one joining them did not). Gathered for a
millisecond they go out as one write: p99 at one client fell from 46 to under 10 ms, for about a millisecond more
at p50."""

_NATS_PENDING = 65536
"""Deltas nats.py may hold before the shared delta callback sees them (it drains at once unless the loop is
starved)."""

_delta_decoder = msgspec.json.Decoder(TurnDelta)


class Encoded(ServerSentEventMessage):
    """A message encoded once, however many connections send it."""

    def __init__(self, *, data: str | None, event: str | None = None, id: int | None = None,
                 comment: str | None = None) -> None:
        super().__init__(data=data, event=event, id=id, comment=comment)
        self._encoded = super().encode()

    def encode(self) -> bytes:
        return self._encoded


def recorded_message(msg: Msg) -> Encoded:
    """A recorded event as SSE: ``event:`` its seed-003 name, ``id:`` its stream sequence."""
    event_type = (msg.headers or {}).get("Autarch-Event") or subjects.event_type_from_subject(msg.subject)
    # An event recorded in an older shape (a loop event before issue 33) goes out as it reads today.
    return Encoded(data=current_shape(msg.data).decode(), event=event_type, id=msg.metadata.sequence.stream)


class Chunk(ServerSentEventMessage):
    """The messages of one feed window a group of connections all get, joined into one write once for them all.

    ``entries`` are (stream sequence, message), sequence 0 for a delta; ``last`` is the sequence of the last
    recorded event in it (0: none).
    """

    def __init__(self, entries: list[tuple[int, Encoded]]) -> None:
        super().__init__(data=None)
        self.entries = entries
        self.messages = [message for _, message in entries]
        self.recorded = sum(1 for sequence, _ in entries if sequence)
        self.last = max((sequence for sequence, _ in entries), default=0)
        self._encoded = b"".join(message.encode() for message in self.messages)

    def encode(self) -> bytes:
        return self._encoded


class Member(Protocol):
    """What a feed asks of a connection attached to it."""

    last: int
    """The stream sequence of the last recorded event the connection has (queued or sent)."""

    def take(self, chunk: Chunk) -> bool:
        """Queue what ``chunk`` holds after ``last`` (deltas it has no room for counted dropped) and wake up; False
        when a recorded event found the buffer full (it and the rest of the chunk's recorded events not queued)."""
        ...

    def fell_behind(self) -> None:
        """The feed detached the connection (its buffer was full): it catches up on its own."""
        ...

    def feed_failed(self, error: BaseException) -> None:
        """The feed ended for good (the NATS connection closed): the connection ends."""
        ...


class RecordedFeed:
    """One consumer of the stream filtered on ``subject``, shared by every connection following it.

    ``position`` is the sequence of the last event handed out (at start, the stream's last sequence): every
    later event of the filter is handed out, in order, after it.
    """

    def __init__(self, nc: Client, subject: str, on_end: Callable[[RecordedFeed | DeltaFeed], None],
                 waker: Waker) -> None:
        self._nc = nc
        self.subject = subject
        self._waker = waker
        self.position = 0
        self._members: dict[Member, None] = {}  # joined and not left: attached, or catching up on their own
        self._attached: dict[Member, None] = {}
        self._reader: StreamReader | None = None
        self._on_end = on_end
        self.ended = False
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._run())

    def attach(self, member: Member) -> None:
        """Hand ``member`` every event after ``member.last`` from now on."""
        self._attached[member] = None

    def join(self, member: Member) -> None:
        self._members[member] = None

    def leave(self, member: Member) -> None:
        """``member`` is gone; the last one ends the feed."""
        self._attached.pop(member, None)
        self._members.pop(member, None)
        if not self._members:
            self._end()

    async def _run(self) -> None:
        try:
            # "New events only" as a sequence, not DeliverPolicy.NEW: the restart point must be known.
            info = await self._nc.jetstream().stream_info(subjects.EVENTS_STREAM)
            self.position = info.state.last_seq
            self._reader = StreamReader(self._nc, subject=self.subject, after=self.position)
            await self._reader.open()
            self.ready.set_result(None)
            await self._reader.follow(self._dispatch, batch=FOLLOW_BATCH)
        except asyncio.CancelledError:
            raise  # ended by its last member leaving
        except Exception as exc:
            if self.ready.done():
                log.warning("the shared feed of %s ended: %r", self.subject, exc)
            self._fail(exc)

    def _dispatch(self, msg: Msg) -> None:
        sequence = msg.metadata.sequence.stream
        self.position = sequence
        self._waker.add(self, sequence, recorded_message(msg), len(self._attached))

    def attached(self) -> list[Member]:
        return list(self._attached)

    def detach(self, member: Member) -> None:
        """``member`` found its buffer full: it catches up on its own (and attaches again once caught up)."""
        if self._attached.pop(member, 0) is None:
            member.fell_behind()

    def _fail(self, error: BaseException) -> None:
        if not self.ready.done():
            self.ready.set_exception(error)
            self.ready.exception()  # retrieved: joiners that gave up meanwhile leave no warning behind
        self._end()
        self._attached.clear()
        for member in list(self._members):
            member.feed_failed(error)

    def _end(self) -> None:
        if self.ended:
            return
        self.ended = True
        self._on_end(self)
        if not self._task.done() and self._task is not asyncio.current_task():
            self._task.cancel()
        if self._reader is not None:
            self._reader.close()


class DeltaFeed:
    """One core-NATS subscription to the live deltas of ``subject``, shared by every connection that wants them."""

    def __init__(self, nc: Client, subject: str, on_end: Callable[[RecordedFeed | DeltaFeed], None],
                 waker: Waker) -> None:
        self._nc = nc
        self.subject = subject
        self._waker = waker
        self._attached: dict[Member, None] = {}
        self._members: dict[Member, None] = {}
        self._sub: Subscription | None = None
        self._on_end = on_end
        self.ended = False
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._start())

    def attach(self, member: Member) -> None:
        self._attached[member] = None

    def join(self, member: Member) -> None:
        self._members[member] = None

    def leave(self, member: Member) -> None:
        """``member`` is gone; the last one ends the subscription."""
        self._attached.pop(member, None)
        self._members.pop(member, None)
        if not self._members:
            self._end()

    async def _start(self) -> None:
        try:
            self._sub = await self._nc.subscribe(self.subject, cb=self._on_delta, pending_msgs_limit=_NATS_PENDING)
            # The server has the subscription once it answers a PING sent after it: only then are the deltas
            # live. nats.py queues the SUB for its flusher task but writes flush()'s PING to the socket at once,
            # ahead of it: yield first, so the flusher (woken by the SUB) puts the SUB on the wire before it.
            await asyncio.sleep(0)
            await self._nc.flush()
        except Exception as exc:
            self.ready.set_exception(exc)
            self.ready.exception()  # retrieved: joiners that gave up meanwhile leave no warning behind
            self._end()
            return
        if self.ended:  # every member left while it started
            if self._sub is not None:
                in_background(_unsubscribe(self._sub))
                self._sub = None
            return
        self.ready.set_result(None)

    async def _on_delta(self, msg: Msg) -> None:
        try:
            delta = _delta_decoder.decode(msg.data)
        except msgspec.DecodeError:  # not ours to forward: the subject is shared, the payload is checked
            log.debug("ignored a malformed delta on %s", msg.subject)
            return
        self._waker.add(self, 0, Encoded(data=msg.data.decode(), event=delta.type), len(self._attached))

    def attached(self) -> list[Member]:
        return list(self._attached)

    def detach(self, member: Member) -> None:
        """Deltas are dropped when there is no room, never a reason to detach."""

    def _end(self) -> None:
        if self.ended:
            return
        self.ended = True
        self._on_end(self)
        if self._sub is not None:
            in_background(_unsubscribe(self._sub))
            self._sub = None


async def _unsubscribe(sub: Subscription) -> None:
    try:
        await sub.unsubscribe()
    except Exception:  # the connection may already be closing
        log.debug("unsubscribe failed", exc_info=True)


class Waker:
    """Hands the messages of the shared feeds out to their connections a window at a time, each window's messages
    joined into one write once for every connection that gets the same ones.

    Sending costs a turn of the event loop and a write per connection, whatever the write carries: handed out one by
    one, a thousand connections following a busy workflow cost a thousand queue appends per message and a thousand
    writes per event and per delta, and the last connection's wait grows with every message it queues behind.
    Gathered over a short window (:data:`WAKE_WINDOW_PER_MEMBER` per connection, at least :data:`WAKE_WINDOW_MIN`,
    at most :data:`WAKE_WINDOW_MAX`: a millisecond for a few connections, 20 ms for a thousand), an event and the
    deltas that follow it are joined once and go out in one write per connection. The window keeps the order the
    messages came in, recorded events and deltas alike.
    """

    def __init__(self) -> None:
        self._window: list[tuple[RecordedFeed | DeltaFeed, int, Encoded]] = []
        self._handle: asyncio.Handle | None = None

    def add(self, feed: RecordedFeed | DeltaFeed, sequence: int, message: Encoded, members: int) -> None:
        """``message`` of ``feed`` (``sequence`` 0 for a delta) goes out with the window; ``members``: how many
        connections it goes to, which sets the window's length."""
        self._window.append((feed, sequence, message))
        if self._handle is None:
            loop = asyncio.get_running_loop()
            window = max(WAKE_WINDOW_MIN, min(WAKE_WINDOW_MAX, members * WAKE_WINDOW_PER_MEMBER))
            self._handle = loop.call_later(window, self._flush)

    def _flush(self) -> None:
        self._handle = None
        window, self._window = self._window, []
        # Whatever is made per connection and window is made a thousand times a window: a list and tuples each
        # (the feeds it follows, a key of them) set the cyclic collector off several times a window, and the older
        # generations' collections that those set off in turn walk every connection's objects. So the feeds a
        # connection follows are bits of an int, and its chunk is found by (bits, last event) in nested dicts:
        # nothing made per connection that the collector tracks.
        bits: dict[RecordedFeed | DeltaFeed, int] = {}
        for feed, _, _ in window:
            bits.setdefault(feed, len(bits))
        follows: dict[Member, int] = {}
        for feed, bit in bits.items():
            flag = 1 << bit
            for member in feed.attached():
                follows[member] = follows.get(member, 0) | flag
        entries_of = [(1 << bits[feed], sequence, message) for feed, sequence, message in window]
        # Connections following the same feeds from the same last event get the same chunk: joined once.
        chunks: dict[int, dict[int, Chunk | None]] = {}
        for member, followed in follows.items():
            by_last = chunks.get(followed)
            if by_last is None:
                by_last = chunks[followed] = {}
            last = member.last
            if last in by_last:
                chunk = by_last[last]
            else:
                entries = [(sequence, message) for flag, sequence, message in entries_of
                           if followed & flag and (sequence == 0 or sequence > last)]
                chunk = by_last[last] = Chunk(entries) if entries else None
            if chunk is not None and not member.take(chunk):
                for feed, bit in bits.items():
                    if followed >> bit & 1:
                        feed.detach(member)


class Fanout:
    """The shared feeds of one NATS connection, by subject."""

    def __init__(self, nc: Client) -> None:
        # Weakly: the registry below is keyed by the connection, and must not keep a closed one alive.
        self._nc = weakref.ref(nc)
        self._recorded: dict[str, RecordedFeed] = {}
        self._deltas: dict[str, DeltaFeed] = {}
        self._waker = Waker()
        self.catch_ups = asyncio.Semaphore(CATCH_UPS)
        """Taken by a connection while it reads the stream on its own (see :data:`CATCH_UPS`)."""

    async def join_recorded(self, subject: str, member: Member) -> RecordedFeed:
        """The running feed of ``subject`` (started if need be), joined by ``member``, who calls ``leave``
        once done (``attach`` hands it events)."""
        feed = self._recorded.get(subject)
        if feed is None:
            feed = self._recorded[subject] = RecordedFeed(self._client(), subject, self._forget, self._waker)
        return await _join(feed, member)

    async def join_deltas(self, subject: str, member: Member) -> DeltaFeed:
        """The live delta subscription of ``subject`` (made if need be), joined by ``member``, who calls
        ``leave`` once done."""
        feed = self._deltas.get(subject)
        if feed is None:
            feed = self._deltas[subject] = DeltaFeed(self._client(), subject, self._forget, self._waker)
        return await _join(feed, member)

    def _client(self) -> Client:
        nc = self._nc()
        if nc is None:
            raise ConnectionClosedError
        return nc

    def _forget(self, feed: RecordedFeed | DeltaFeed) -> None:
        feeds: dict = self._recorded if isinstance(feed, RecordedFeed) else self._deltas
        if feeds.get(feed.subject) is feed:
            del feeds[feed.subject]


_Feed = TypeVar("_Feed", RecordedFeed, DeltaFeed)


async def _join(feed: _Feed, member: Member) -> _Feed:
    feed.join(member)
    try:
        # Shielded: one joiner giving up must not cancel the start the others wait for.
        await asyncio.shield(feed.ready)
    except BaseException:
        feed.leave(member)
        raise
    return feed


_fanouts: weakref.WeakKeyDictionary[Client, Fanout] = weakref.WeakKeyDictionary()


def fanout_of(nc: Client) -> Fanout:
    """The shared feeds of ``nc`` (one set per NATS connection, made on first use)."""
    fanout = _fanouts.get(nc)
    if fanout is None:
        fanout = _fanouts[nc] = Fanout(nc)
    return fanout
