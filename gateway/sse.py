"""``/api/events``: the JetStream stream as Server-Sent Events, with the live token deltas mixed in.

Each recorded event is sent with ``event:`` = its seed-003 name and ``id:`` = its stream sequence, so
a client reconnecting with ``Last-Event-ID`` resumes exactly after the last event it saw. Live deltas
(``turn:message_delta`` / ``turn:thought_delta``, core NATS, never stored) are sent without ``id:``:
an event without an id leaves the client's last event id as it was, so resuming still starts from the
last recorded event.

Shared reading: the connections following the same filter share one reading of the stream and one delta
subscription (:mod:`autarch.gateway.fanout`), so a thousand watchers cost the server and NATS about what one
does; the feeds hand their messages out a short window at a time, joined once into the write every connection
getting the same ones sends. A connection resuming from an older event first catches up on its own — a consumer
of its own (:mod:`autarch.gateway.stream_reader`) from its ``Last-Event-ID`` — until it has every event the
shared feed has handed out, then joins the feed, which gives it only the events after its last one: no gap, no
repeat.

Back-pressure: each connection has a bounded queue between NATS and the socket. A recorded event that finds
it full is not dropped and does not hold the shared feed back: the connection is detached from the feed and
catches up on its own again, reading the stream from its last event at its own pace, as much as its queue
has room for, then rejoins (a slow client costs its own consumer while it is behind, never the other clients'
latency). Deltas are dropped when the queue is full, and while the connection is behind once it is half full
(room is kept for the recorded events it owes), since ``turn:completed`` carries the turn's full text anyway.
A slow client therefore costs a bounded amount of memory.

The end of a connection is always visible to the client. While nothing flows, a ``keep-alive`` comment
goes out every ``sse_keepalive`` seconds, so a client reading with a slightly longer timeout knows a
silent connection is a dead one. When the gateway is told to stop (SIGTERM/SIGINT), every open stream
ends at once with a ``gateway stopping`` comment: the server's graceful shutdown waits for open
responses, and a client that never hangs up would otherwise hold it until its supervisor's SIGKILL.
A NATS server that restarts loses the consumers; a shared feed's heartbeat notices within seconds and the
feed recreates its consumer after the last event it handed out (a catch-up does the same after the
connection's last event), so an open stream carries on without a gap.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from litestar.response import ServerSentEvent, ServerSentEventMessage
from litestar.response.base import ASGIResponse
from nats.aio.client import Client

from autarch.contracts import subjects

from .fanout import Chunk, DeltaFeed, Encoded, Fanout, RecordedFeed, fanout_of, recorded_message
from .stream_reader import StreamReader

if TYPE_CHECKING:
    from litestar import Litestar, Request
    from litestar.types import ASGIApp, Receive, Scope, Send

__all__ = ["BATCH", "BUFFER", "SERVER_SEND", "EventStream", "LiveEvents", "end_streams_on_signals", "event_stream",
           "server_send_kept"]

log = logging.getLogger(__name__)

BUFFER = 256
"""Messages one connection may have waiting for its client; deltas beyond this are dropped."""

BATCH = 64
"""Messages one write to the client may carry at most, when several are waiting."""


class _Batch(ServerSentEventMessage):
    """Several messages sent in one write, each encoded exactly as it would be alone.

    When twenty workflows change stage at once, a burst of events reaches every connection together. Sent one
    by one, each takes several turns of the gateway's event loop (the queue, the response iterator, the ASGI
    send, the socket write), and the burst's last event waits behind all of them and behind the requests the
    other clients make meanwhile; sent together, the burst costs about as many turns as one event.
    """

    def __init__(self, items: list[ServerSentEventMessage]) -> None:
        super().__init__(data=None)
        self._items = items
        self.messages = [m for item in items for m in (item.messages if isinstance(item, Chunk) else [item])]

    def encode(self) -> bytes:
        return b"".join(item.encode() for item in self._items)


class LiveEvents:
    """One SSE connection's feed: recorded events and (optionally) live deltas, in the order they arrive.

    It joins the shared feeds of its filter (see the module's docstring) and leaves them when it ends.
    """

    def __init__(
        self, nc: Client, *, workflow: str | None, after: int | None, keepalive: float, deltas: bool = True,
        buffer: int = BUFFER, stopping: asyncio.Event | None = None,
    ) -> None:
        self._nc = nc
        self._workflow = workflow
        self._after = after
        self._keepalive = keepalive
        self._deltas = deltas
        self._stopping = stopping
        self._buffer = buffer
        self._queue: deque[Encoded | Chunk] = deque()
        self._count = 0  # messages in the queue (a chunk holds several)
        self.last = 0
        """The stream sequence of the last recorded event queued for the client (or before its first one)."""
        self._fanout: Fanout | None = None
        self._feed: RecordedFeed | None = None
        self._behind = False  # not attached to the shared feed: catching up on its own
        self._catch_up: asyncio.Task[None] | None = None
        self._reader: StreamReader | None = None  # the catch-up's own consumer, while there is one
        self._room = asyncio.Event()  # set when the client took messages out of the queue
        self._waiter: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None
        self._stopped = False
        self._hung_up = False
        self._last_sent = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.dropped_deltas = 0
        """Deltas dropped because the client read too slowly (reported to it as a comment)."""

    @property
    def queued(self) -> int:
        """Messages waiting for the client now (never more than the buffer)."""
        return self._count

    @property
    def behind(self) -> bool:
        """Whether the connection is catching up on its own rather than taking events from the shared feed."""
        return self._behind

    async def messages(self) -> AsyncIterator[ServerSentEventMessage]:
        """Yield a ``connected`` comment once live, then events, and keep-alives when nothing flows."""
        fanout = self._fanout = fanout_of(self._nc)
        loop = asyncio.get_running_loop()
        recorded = await fanout.join_recorded(self._recorded_subject(), self)
        deltas: DeltaFeed | None = None
        stop: asyncio.Future[Any] | None = None
        try:
            self._feed = recorded
            if self._after is None or self._after >= recorded.position:
                # New events only, or nothing the feed handed out is missing: join it now.
                self.last = recorded.position if self._after is None else self._after
                recorded.attach(self)
            else:
                # Behind from the start: the events after ``after`` come from its own reading of the stream, so
                # none recorded from now on can be missed, even before that reading starts.
                self.last = self._after
                self._behind = True
                self._catch_up = asyncio.ensure_future(self._catching_up())
            if self._deltas:
                deltas = await fanout.join_deltas(self._delta_subject(), self)
                deltas.attach(self)
            if self._stopping is not None:
                stop = asyncio.ensure_future(self._stopping.wait())
                stop.add_done_callback(self._on_stop)
            # A comment first: the client knows the stream is live before any event flows.
            yield ServerSentEventMessage(data=None, comment="connected")
            self._last_sent = loop.time()
            reported = 0
            while True:
                if self._hung_up:
                    return
                if self._stopped:
                    # The client resumes from its last event id once the gateway is back.
                    yield ServerSentEventMessage(data=None, comment="gateway stopping")
                    return
                if self._queue:
                    # Whatever is waiting goes out in the same write (see _Batch).
                    queue = self._queue
                    batch: list[ServerSentEventMessage] = [queue.popleft() for _ in range(min(BATCH, len(queue)))]
                    self._count -= sum(len(item.entries) if isinstance(item, Chunk) else 1 for item in batch)
                    if self._behind:
                        self._room.set()
                    if self.dropped_deltas > reported:
                        batch.insert(0, ServerSentEventMessage(
                            data=None, comment=f"{self.dropped_deltas - reported} deltas dropped"))
                        reported = self.dropped_deltas
                    self._last_sent = loop.time()
                    yield batch[0] if len(batch) == 1 else _Batch(batch)
                    continue
                if self._failure is not None:
                    raise self._failure  # the stream's failure (connection closed) ends the response
                if loop.time() >= self._last_sent + self._keepalive:
                    self._last_sent = loop.time()
                    yield ServerSentEventMessage(data=None, comment="keep-alive")
                    continue
                if self._timer is None:
                    self._timer = loop.call_at(self._last_sent + self._keepalive, self._on_timer)
                self._waiter = loop.create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
        finally:
            if self._catch_up is not None:
                self._catch_up.cancel()
            if self._reader is not None:
                self._reader.close()  # a catch-up cancelled before it ran never closed it
            recorded.leave(self)
            if deltas is not None:
                deltas.leave(self)
            if stop is not None:
                stop.remove_done_callback(self._on_stop)
                stop.cancel()
            if self._timer is not None:
                self._timer.cancel()

    def hang_up(self) -> None:
        """The client is gone: :meth:`messages` ends (at once if it waits, else after its current write)."""
        self._hung_up = True
        self._wake()

    # --- what the shared feeds call ---------------------------------------------------------------------------

    def take(self, chunk: Chunk) -> bool:
        if self._count + len(chunk.entries) <= (self._buffer // 2 if self._behind else self._buffer) and (
                chunk.last == 0 or not self._behind):
            # The usual case: the whole chunk, as joined once for every connection that gets it.
            self._queue.append(chunk.messages[0] if len(chunk.entries) == 1 else chunk)
            self._count += len(chunk.entries)
            if chunk.last:
                self.last = chunk.last
            self._wake()
            return True
        # No room for all of it: message by message, as much as there is room for.
        taken = True
        for sequence, message in chunk.entries:
            if sequence:
                if not taken or self._behind or self._count >= self._buffer:
                    taken = False
                    continue
                self._queue.append(message)
                self._count += 1
                self.last = sequence
            elif self._count >= (self._buffer // 2 if self._behind else self._buffer):
                # Behind, the connection keeps room for the recorded events it owes.
                self.dropped_deltas += 1
            else:
                self._queue.append(message)
                self._count += 1
        self._wake()
        return taken

    def fell_behind(self) -> None:
        feed = self._feed
        if feed is None or self._behind:
            return
        self._behind = True
        self._catch_up = asyncio.ensure_future(self._catching_up())

    def feed_failed(self, error: BaseException) -> None:
        self._fail(error)

    # --- catching up on its own -------------------------------------------------------------------------------

    async def _catching_up(self) -> None:
        """Read the stream after ``last`` with a consumer of our own, as the client makes room, until nothing the
        shared feed handed out is missing; then join the feed.

        A consumer is held only while reading: at most ``CATCH_UPS`` of them at once per NATS connection (a
        thousand clients reconnecting after a gateway restart would otherwise meet the server's limit of a
        thousand consumers per stream), none while the client has no room. ``mark`` is the feed's position
        when the reader last asked the server: "nothing pending" answered after that, with the feed's position
        unchanged, means every event up to the position is already here.
        """
        feed = self._feed
        assert feed is not None
        mark, caught = feed.position, False  # caught: the reader found nothing after ``last``, the feed at ``mark``
        try:
            while True:
                # Half the buffer free at least: room for what the feed brings once joined, or for a useful batch.
                while self._count > self._buffer // 2:
                    await self._wait_for_room()
                if self.last >= feed.position or (caught and mark == feed.position):
                    # Synchronously with the check: the feed hands out nothing in between.
                    self._behind = False
                    feed.attach(self)
                    self._catch_up = None
                    return
                async with self._fanout.catch_ups:  # type: ignore[union-attr]  # set when the stream started
                    mark = feed.position
                    reader = self._reader = StreamReader(self._nc, subject=feed.subject, after=self.last)
                    try:
                        await reader.open(retry=True)
                        while True:
                            caught = reader.pending == 0
                            room = self._buffer - self._count
                            if self.last >= feed.position or (caught and mark == feed.position) or room <= 0:
                                break  # to join (or to wait for room) without holding a consumer
                            mark = feed.position
                            for msg in await reader.fetch(room):
                                self._queue.append(recorded_message(msg))
                                self._count += 1
                                self.last = msg.metadata.sequence.stream
                            if self._queue:
                                self._wake()
                    finally:
                        reader.close()
                        self._reader = None
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.warning("catching up on %s failed: %r", feed.subject, exc)
            self._fail(exc)

    async def _wait_for_room(self) -> None:
        self._room.clear()
        await self._room.wait()

    # --- waking the response up -------------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._wake()

    def _on_stop(self, _: object) -> None:
        self._stopped = True
        self._wake()

    def _on_timer(self) -> None:
        # One timer per connection, moved only when it fires: cheaper than one per message.
        loop = asyncio.get_running_loop()
        due = self._last_sent + self._keepalive
        if loop.time() < due:
            self._timer = loop.call_at(due, self._on_timer)
            return
        self._timer = None
        self._wake()

    def _recorded_subject(self) -> str:
        return subjects.run_events(self._workflow) if self._workflow else subjects.EVENTS_ALL

    def _delta_subject(self) -> str:
        return subjects.deltas(self._workflow, "*") if self._workflow else subjects.DELTAS_ALL


class EventStream(ServerSentEvent):
    """The response of one SSE connection: Litestar's ``ServerSentEvent`` (same headers, same bytes), whose body
    is written by a loop of our own (see :class:`_EventStreamBody`)."""

    def __init__(self, live: LiveEvents) -> None:
        super().__init__(b"")
        self.live = live

    def to_asgi_response(self, app: Litestar | None, request: Request, **kwargs: Any) -> ASGIResponse:
        # Ignored below: the wrapper forwards the ASGI response, which is all the caller uses
        return _EventStreamBody(super().to_asgi_response(app, request, **kwargs), self.live)  # type: ignore[return-value]


class _EventStreamBody:
    """Sends the response's start as Litestar would, then each message of the connection in one ASGI send.

    With a thousand clients, every event is a thousand writes, and the cost of each is what a client waits for
    behind the others: Litestar's streaming body runs each write through two more async iterators and a task
    group, and its first chunk through a worker thread. This loop does only the send, and notices the client
    hanging up through ``receive`` (uvicorn answers ``http.disconnect`` once the connection is lost).
    """

    def __init__(self, response: ASGIResponse, live: LiveEvents) -> None:
        self._response = response
        self._live = live

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._response.start_response(send)
        if not self._response.is_head_response:
            watcher = asyncio.ensure_future(_until_disconnected(receive))
            watcher.add_done_callback(lambda _: self._live.hang_up())
            # The body's writes skip the app's wrappers of ``send`` when the server gave us its own (see
            # :func:`server_send_kept`): they act on the response's start only, and at a thousand clients their
            # two coroutine calls per write cost as much as the write.
            body_send: Send = scope.get(SERVER_SEND) or send  # type: ignore[assignment]  # our own scope key
            try:
                async for message in self._live.messages():
                    await body_send({"type": "http.response.body", "body": message.encode(), "more_body": True})
            finally:
                watcher.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        await self._response.after_response()


SERVER_SEND = "autarch.server_send"
"""The scope key under which :func:`server_send_kept` leaves the server's own ``send``."""


def server_send_kept(app: ASGIApp) -> ASGIApp:
    """``app`` served with the server's own ``send`` kept in the scope, for the event streams' body writes.

    Litestar wraps ``send`` twice before a response sees it (its ``before_send`` hooks, its exception handler's
    "response started" mark); both act on ``http.response.start`` only, which still goes through them.
    """

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[SERVER_SEND] = send  # type: ignore[literal-required]  # our own scope key
        await app(scope, receive, send)

    return serve


async def _until_disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def event_stream(
    nc: Client, *, workflow: str | None, after: int | None, keepalive: float, deltas: bool = True,
    stopping: asyncio.Event | None = None,
) -> EventStream:
    """The SSE response of one connection (see :class:`LiveEvents`); it ends when ``stopping`` is set."""
    return EventStream(LiveEvents(nc, workflow=workflow, after=after, keepalive=keepalive, deltas=deltas,
                                  stopping=stopping))


def end_streams_on_signals(stopping: asyncio.Event) -> Callable[[], None]:
    """Set ``stopping`` on SIGTERM/SIGINT, before the server's own handler runs; returns the undo.

    Called in the app's startup, when the server (uvicorn) has installed its handlers: each is chained,
    never replaced, so the server still stops as it would. Signal handlers belong to the main thread; an
    app started elsewhere (a test client's thread) is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    chained: dict[int, Callable[[int, FrameType | None], object]] = {}

    def handler(sig: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(stopping.set)
        chained[sig](sig, frame)

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        if callable(previous):  # SIG_DFL would end the process anyway, SIG_IGN is a choice to respect
            chained[sig] = previous
            signal.signal(sig, handler)

    def undo() -> None:
        for sig, previous in chained.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, previous)

    return undo
