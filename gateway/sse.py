"""``/api/events``: the JetStream stream as Server-Sent Events, with the live token deltas mixed in.

Each recorded event is sent with ``event:`` = its seed-003 name and ``id:`` = its stream sequence, so
a client reconnecting with ``Last-Event-ID`` resumes exactly after the last event it saw. Live deltas
(``turn:message_delta`` / ``turn:thought_delta``, core NATS, never stored) are sent without ``id:``:
an event without an id leaves the client's last event id as it was, so resuming still starts from the
last recorded event.

Back-pressure: each connection has a bounded queue between NATS and the socket. A recorded event waits
for room (it must never be lost: behind it, JetStream's flow control holds the rest back); a delta that
finds the queue full, or a recorded event waiting, is dropped, since ``turn:completed`` carries the
turn's full text anyway. A slow client therefore costs a bounded amount of memory.

The end of a connection is always visible to the client. While nothing flows, a ``keep-alive`` comment
goes out every ``sse_keepalive`` seconds, so a client reading with a slightly longer timeout knows a
silent connection is a dead one. When the gateway is told to stop (SIGTERM/SIGINT), every open stream
ends at once with a ``gateway stopping`` comment: the server's graceful shutdown waits for open
responses, and a client that never hangs up would otherwise hold it until its supervisor's SIGKILL.
A NATS server that restarts loses the streams' consumers; the consumer's heartbeat notices within
seconds and recreates it after the last event received, so an open stream carries on without a gap.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from types import FrameType

import msgspec
from litestar.response import ServerSentEventMessage
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy

from autarch.contracts import subjects
from autarch.contracts.agents import TurnDelta

__all__ = ["BATCH", "BUFFER", "LiveEvents", "end_streams_on_signals", "event_stream"]

log = logging.getLogger(__name__)

BUFFER = 256
"""Messages one connection may have waiting for its client; deltas beyond this are dropped."""

_NATS_PENDING = 4096
"""Deltas nats.py may hold before our callback sees them (it drains at once unless the loop is starved)."""

_HEARTBEAT = 1.0
"""Seconds between the server's idle heartbeats on a stream's consumer. Two missed (a NATS restart lost the
consumer) and nats.py recreates it after the last event it received: an open stream resumes within seconds
of NATS coming back, for one tiny message a second per idle connection."""

BATCH = 64
"""Messages one write to the client may carry at most, when several are waiting."""

_delta_decoder = msgspec.json.Decoder(TurnDelta)


class _Batch(ServerSentEventMessage):
    """Several messages sent in one write, each encoded exactly as it would be alone.

    When twenty workflows change stage at once, a burst of events reaches every connection together. Sent one
    by one, each takes several turns of the gateway's event loop (the queue, the response iterator, the ASGI
    send, the socket write), and the burst's last event waits behind all of them and behind the requests the
    other clients make meanwhile; sent together, the burst costs about as many turns as one event.
    """

    def __init__(self, messages: list[ServerSentEventMessage]) -> None:
        super().__init__(data=None)
        self.messages = messages

    def encode(self) -> bytes:
        return b"".join(message.encode() for message in self.messages)


class LiveEvents:
    """One SSE connection's feed: recorded events and (optionally) live deltas, in the order they arrive.

    Both NATS subscriptions belong to this connection alone and end with it.
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
        self._queue: asyncio.Queue[ServerSentEventMessage] = asyncio.Queue(maxsize=buffer)
        self._recorded_waiting = False
        self.dropped_deltas = 0
        """Deltas dropped because the client read too slowly (reported to it as a comment)."""

    @property
    def queued(self) -> int:
        """Messages waiting for the client now (never more than the buffer)."""
        return self._queue.qsize()

    async def messages(self) -> AsyncIterator[ServerSentEventMessage]:
        """Yield a ``connected`` comment once subscribed, then events, and keep-alives when nothing flows."""
        recorded = await self._subscribe_recorded()
        live: Subscription | None = None
        pump: asyncio.Task[None] | None = None
        get: asyncio.Future[ServerSentEventMessage] | None = None
        stop: asyncio.Future[bool] | None = None
        try:
            if self._deltas:
                live = await self._nc.subscribe(self._delta_subject(), cb=self._on_delta,
                                                pending_msgs_limit=_NATS_PENDING)
                # The server has the subscription once it answers a PING sent after it: only then is
                # "connected" true of the deltas too (nats.py sends the SUB in the background).
                await self._nc.flush()
            pump = asyncio.create_task(self._pump(recorded))
            # A comment first: the client knows the subscriptions are live before any event flows.
            yield ServerSentEventMessage(data=None, comment="connected")
            reported = 0
            waits: set[asyncio.Future[object]] = {pump}
            if self._stopping is not None:
                stop = asyncio.ensure_future(self._stopping.wait())
                waits.add(stop)
            while True:
                get = get or asyncio.ensure_future(self._queue.get())
                done, _ = await asyncio.wait({get, *waits}, timeout=self._keepalive,
                                             return_when=asyncio.FIRST_COMPLETED)
                if get in done:
                    batch = [get.result()]
                    get = None
                    # Whatever else is waiting goes out in the same write (see _Batch).
                    while len(batch) < BATCH and not self._queue.empty():
                        batch.append(self._queue.get_nowait())
                    if self.dropped_deltas > reported:
                        batch.insert(0, ServerSentEventMessage(
                            data=None, comment=f"{self.dropped_deltas - reported} deltas dropped"))
                        reported = self.dropped_deltas
                    yield batch[0] if len(batch) == 1 else _Batch(batch)
                elif pump in done:
                    pump.result()  # the stream's failure (connection closed) ends the response
                    return
                elif stop is not None and stop in done:
                    # The client resumes from its last event id once the gateway is back.
                    yield ServerSentEventMessage(data=None, comment="gateway stopping")
                    return
                else:
                    yield ServerSentEventMessage(data=None, comment="keep-alive")
        finally:
            for task in (get, pump, stop):
                if task is not None:
                    task.cancel()
            for sub in (live, recorded):
                if sub is None:
                    continue
                try:
                    await sub.unsubscribe()
                except Exception:  # the connection may already be closing
                    log.debug("unsubscribe failed", exc_info=True)

    async def _subscribe_recorded(self) -> Subscription:
        subject = subjects.workflow_events(self._workflow) if self._workflow else subjects.EVENTS_ALL
        js = self._nc.jetstream()
        if self._after is None:
            # "New events only", as a sequence (not DeliverPolicy.NEW): the consumer's restart point must be known.
            after = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
        else:
            after = self._after
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1)
        sub = await js.subscribe(
            subject, stream=subjects.EVENTS_STREAM, ordered_consumer=True, config=config, idle_heartbeat=_HEARTBEAT
        )
        # nats.py recreates a lost ordered consumer after the last stream sequence it received, which it
        # counts from 0 whatever the start: lost before its first event, a stream would start again from the
        # stream's very first event. Tell it where this one starts (a private field: checked, not assumed).
        jsi = getattr(getattr(sub, "_sub", None), "_jsi", None)
        if jsi is not None and getattr(jsi, "_sseq", None) == 0:
            jsi._sseq = after
        return sub

    def _delta_subject(self) -> str:
        return subjects.deltas(self._workflow, "*") if self._workflow else subjects.DELTAS_ALL

    async def _pump(self, sub: Subscription) -> None:
        """Move recorded events into the queue, waiting for room (never dropping one)."""
        while True:
            msg = await sub.next_msg(timeout=None)
            event_type = (msg.headers or {}).get("Autarch-Event") or subjects.event_type_from_subject(msg.subject)
            message = ServerSentEventMessage(data=msg.data.decode(), event=event_type,
                                             id=msg.metadata.sequence.stream)
            self._recorded_waiting = True
            try:
                await self._queue.put(message)
            finally:
                self._recorded_waiting = False

    async def _on_delta(self, msg: Msg) -> None:
        # While a recorded event waits for room, a delta must not take the slot it is waiting for.
        if self._recorded_waiting or self._queue.full():
            self.dropped_deltas += 1
            return
        try:
            delta = _delta_decoder.decode(msg.data)
        except msgspec.DecodeError:  # not ours to forward: the subject is shared, the payload is checked
            log.debug("ignored a malformed delta on %s", msg.subject)
            return
        self._queue.put_nowait(ServerSentEventMessage(data=msg.data.decode(), event=delta.type))


def event_stream(
    nc: Client, *, workflow: str | None, after: int | None, keepalive: float, deltas: bool = True,
    stopping: asyncio.Event | None = None,
) -> AsyncIterator[ServerSentEventMessage]:
    """The SSE messages of one connection (see :class:`LiveEvents`); it ends when ``stopping`` is set."""
    return LiveEvents(nc, workflow=workflow, after=after, keepalive=keepalive, deltas=deltas,
                      stopping=stopping).messages()


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
