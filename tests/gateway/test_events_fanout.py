"""``/api/events`` shares one reading of the stream among the connections that follow the same filter.

Against the real gateway (uvicorn, in-process) and a real nats-server: many clients get every event once and in
order from one consumer; a client resuming from an old id while the shared feed runs has the gap filled without
a repeat; a slow client falls behind on its own without delaying a fast one; a NATS restart loses nothing; a
client following one workflow sees only that workflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import httpx
import msgspec
import pytest
from litestar.types import Message, Scope
from nats.aio.client import Client
from nats.errors import Error as NatsError

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.contracts import subjects
from autarch.contracts.agents import TurnDelta
from autarch.gateway.app import create_app
from autarch.gateway.fanout import fanout_of
from autarch.gateway.sse import LiveEvents
from autarch.runtime.bus import connect, ensure_event_stream
from autarch.runtime.settings import Settings

from .conftest import REQUEST_TIMEOUT, Gateway, new_id, serve_gateway
from .test_events import delta, interest, publish_delta, record, sse_events


class Follower:
    """One HTTP SSE client reading in a task of its own: the ids of the recorded events it got, in order."""

    def __init__(self, http: httpx.AsyncClient, params: dict[str, str], headers: dict[str, str] | None = None):
        self.ids: list[int] = []
        self.deltas: list[str] = []
        self.connected = asyncio.Event()
        self.task = asyncio.create_task(self._follow(http, params, headers))

    async def _follow(self, http: httpx.AsyncClient, params: dict[str, str], headers: dict[str, str] | None) -> None:
        async with http.stream("GET", "/api/events", params=params, headers=headers) as stream:
            assert stream.status_code == 200
            async for sse in sse_events(stream, self.connected):
                if "id" in sse.fields:
                    self.ids.append(int(sse.fields["id"]))
                elif sse.event.endswith("_delta"):
                    self.deltas.append(msgspec.json.decode(sse.data, type=TurnDelta).text)

    async def live(self) -> Follower:
        await asyncio.wait_for(self.connected.wait(), 10)
        return self

    async def until(self, done: Callable[[Follower], bool], timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not done(self):
            assert not self.task.done() or self.task.exception() is None, self.task.exception()
            assert time.monotonic() < deadline, f"got {self.ids}"
            await asyncio.sleep(0.01)

    async def has(self, last: int) -> None:
        await self.until(lambda f: bool(f.ids) and f.ids[-1] >= last)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@contextlib.asynccontextmanager
async def following(http: httpx.AsyncClient, params: dict[str, str], count: int = 1,
                    headers: dict[str, str] | None = None) -> AsyncIterator[list[Follower]]:
    followers = [Follower(http, params, headers) for _ in range(count)]
    try:
        await asyncio.gather(*(f.live() for f in followers))
        yield followers
    finally:
        await asyncio.gather(*(f.close() for f in followers))


async def consumers_following(nc: Client, subject: str) -> list[str]:
    """Names of the event stream's consumers filtered on exactly ``subject``."""
    js = nc.jetstream()
    names, offset = [], 0
    while True:
        page = await js.consumers_info(subjects.EVENTS_STREAM, offset=offset)
        names += [c.name for c in page if c.config.filter_subject == subject]
        if len(page) < 256:
            return names
        offset += len(page)


async def test_fifty_clients_share_one_consumer_and_each_gets_every_event_once_in_order(gateway: Gateway, nc: Client):
    wf = new_id()
    async with gateway.client() as http, following(http, {"workflow": wf, "deltas": "false"}, 50) as followers:
        # One reading of the stream for all fifty (each used to have its own consumer).
        assert len(await consumers_following(nc, subjects.run_events(wf))) == 1
        sequences = [await record(nc, wf, f"note {n}") for n in range(20)]
        for follower in followers:
            await follower.has(sequences[-1])
        assert all(f.ids == sequences for f in followers)
    # The feed ends with its last client: its consumer goes.
    deadline = time.monotonic() + 10
    while await consumers_following(nc, subjects.run_events(wf)):
        assert time.monotonic() < deadline, "the shared consumer outlived its clients"
        await asyncio.sleep(0.05)


async def test_clients_resuming_from_old_ids_while_events_flow_get_the_gap_filled_without_a_repeat(
        gateway: Gateway, nc: Client):
    """Each catches up on its own from its ``Last-Event-ID`` while the shared feed hands out new events, then
    joins the feed: the events recorded during the hand-over come exactly once."""
    wf = new_id()
    async with gateway.client() as http, following(http, {"workflow": wf, "deltas": "false"}) as [watcher]:
        before = [await record(nc, wf, f"before {n}") for n in range(12)]
        during: list[int] = []

        async def keep_recording() -> None:
            for n in range(30):
                during.append(await record(nc, wf, f"during {n}"))
                await asyncio.sleep(0.005)

        recording = asyncio.create_task(keep_recording())
        resumers = []
        for start in (0, 3, 7, 11):
            await asyncio.sleep(0.02)
            resumers.append((start, Follower(http, {"workflow": wf, "deltas": "false"},
                                             headers={"Last-Event-ID": str(before[start])})))
        await recording
        for start, resumer in resumers:
            await resumer.has(during[-1])
            assert resumer.ids == before[start + 1:] + during, f"resumed after before[{start}]"
            await resumer.close()
        await watcher.has(during[-1])
        assert watcher.ids == before + during


async def test_a_client_resuming_where_the_stream_moved_on_without_its_workflow_joins_the_feed(
        gateway: Gateway, nc: Client):
    """Nothing of the workflow after the client's id, only other workflows' events: its catch-up finds nothing
    and it joins the feed (it must not wait for an event of its own to reach the feed's position)."""
    wf, other = new_id(), new_id()
    mine = await record(nc, wf, "mine")
    elsewhere = [await record(nc, other, f"elsewhere {n}") for n in range(3)]
    async with gateway.client() as http, following(http, {"workflow": wf, "deltas": "false"}) as [watcher]:
        async with following(http, {"workflow": wf, "deltas": "false"},
                             headers={"Last-Event-ID": str(elsewhere[0])}) as [resumer]:
            later = await record(nc, wf, "later")
            await resumer.has(later)
            await watcher.has(later)
            assert resumer.ids == watcher.ids == [later]
        async with following(http, {"workflow": wf, "deltas": "false"},
                             headers={"Last-Event-ID": str(mine - 1)}) as [from_mine]:
            await from_mine.has(later)
            assert from_mine.ids == [mine, later]


async def test_a_slow_client_falls_behind_on_its_own_and_never_delays_a_fast_one(nc: Client):
    """The slow client's buffer fills: it is detached from the shared feed, the fast one gets every event while
    the slow one has read none, then the slow one reads them all, once and in order, and rejoins."""
    wf = new_id()
    slow = LiveEvents(nc, workflow=wf, after=None, keepalive=30, deltas=False, buffer=4)
    fast = LiveEvents(nc, workflow=wf, after=None, keepalive=30, deltas=False, buffer=4)
    slow_messages, fast_messages = slow.messages(), fast.messages()
    got: dict[str, list[int]] = {"slow": [], "fast": []}

    async def read(messages: AsyncIterator, into: list[int], count: int) -> None:
        while len(into) < count:
            item = await anext(messages)
            into += [m.id for m in getattr(item, "messages", [item]) if m.id is not None]

    try:
        assert (await anext(slow_messages)).comment == "connected"
        assert (await anext(fast_messages)).comment == "connected"
        sequences = [await record(nc, wf, f"note {n}") for n in range(30)]
        await asyncio.wait_for(read(fast_messages, got["fast"], 30), 10)
        assert got["fast"] == sequences
        assert slow.behind and slow.queued == 4 and got["slow"] == []
        await asyncio.wait_for(read(slow_messages, got["slow"], 30), 10)
        assert got["slow"] == sequences
        deadline = time.monotonic() + 5
        while slow.behind:
            assert time.monotonic() < deadline, "the slow client never rejoined the feed"
            await asyncio.sleep(0.01)
        one_more = await record(nc, wf, "one more")
        await asyncio.wait_for(read(fast_messages, got["fast"], 31), 5)
        await asyncio.wait_for(read(slow_messages, got["slow"], 31), 5)
        assert got["fast"][-1] == got["slow"][-1] == one_more
    finally:
        await slow_messages.aclose()  # type: ignore[attr-defined]  # an async generator, typed as an iterator
        await fast_messages.aclose()  # type: ignore[attr-defined]  # an async generator, typed as an iterator


class CountingSlots(asyncio.Semaphore):
    """A semaphore that remembers the most slots held at once."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.held = self.most = 0

    async def acquire(self) -> bool:  # type: ignore[override]  # as the base, True
        await super().acquire()
        self.held += 1
        self.most = max(self.most, self.held)
        return True

    def release(self) -> None:
        self.held -= 1
        super().release()


async def test_clients_resuming_at_once_read_the_stream_a_few_at_a_time_and_each_gets_everything(nc: Client):
    """Each resuming client holds a consumer of its own only while it reads (at most ``CATCH_UPS`` at once: the
    server allows a thousand consumers per stream), and none while it waits for its reader to make room."""
    wf = new_id()
    sequences = [await record(nc, wf, f"note {n}") for n in range(40)]
    slots = fanout_of(nc).catch_ups = CountingSlots(2)
    feeds = [LiveEvents(nc, workflow=wf, after=0, keepalive=30, deltas=False, buffer=8) for _ in range(6)]
    streams = [feed.messages() for feed in feeds]

    async def read_all(messages: AsyncIterator) -> list[int]:
        assert (await anext(messages)).comment == "connected"
        got: list[int] = []
        while len(got) < len(sequences):
            item = await anext(messages)
            got += [m.id for m in getattr(item, "messages", [item]) if m.id is not None]
            await asyncio.sleep(0.001)  # a reader slower than the stream: the buffer (8) fills
        return got

    try:
        results = await asyncio.wait_for(asyncio.gather(*(read_all(m) for m in streams)), 30)
        assert all(got == sequences for got in results)
        deadline = time.monotonic() + 5
        while slots.held or any(feed.behind for feed in feeds):  # the last ones join once their reader made room
            assert time.monotonic() < deadline, (slots.held, [feed.behind for feed in feeds])
            await asyncio.sleep(0.01)
        assert slots.most == 2
    finally:
        for messages in streams:
            await messages.aclose()  # type: ignore[attr-defined]  # an async generator, typed as an iterator


async def test_a_client_following_one_workflow_sees_only_that_workflow(gateway: Gateway, nc: Client):
    one, two = new_id(), new_id()
    async with (gateway.client() as http,
                following(http, {"workflow": one, "deltas": "false"}) as [first],
                following(http, {"workflow": two, "deltas": "false"}) as [second],
                following(http, {"deltas": "false"}) as [everything]):
        ones, twos = [], []
        for n in range(6):
            ones.append(await record(nc, one, f"one {n}"))
            twos.append(await record(nc, two, f"two {n}"))
        await first.has(ones[-1])
        await second.has(twos[-1])
        await everything.has(twos[-1])
        assert first.ids == ones and second.ids == twos
        assert [s for s in everything.ids if s in set(ones + twos)] == sorted(ones + twos)


async def test_a_hundred_connections_get_every_event_and_delta_of_a_burst_once_in_order(nc: Client):
    """A burst of events and deltas reaches a hundred connections in shared windows (one write each per window):
    every connection gets every event and every delta once, each kind in the order it was recorded or sent."""
    wf = new_id()
    lives = [LiveEvents(nc, workflow=wf, after=None, keepalive=30) for _ in range(100)]
    streams = [live.messages() for live in lives]
    got: list[tuple[list[int], list[str]]] = [([], []) for _ in lives]

    async def read(stream: AsyncIterator, into: tuple[list[int], list[str]], last: int, texts: int) -> None:
        while not (into[0] and into[0][-1] >= last and len(into[1]) >= texts):
            item = await anext(stream)
            for message in getattr(item, "messages", [item]):
                if message.id is not None:
                    into[0].append(message.id)
                elif message.event == "turn:message_delta":
                    into[1].append(msgspec.json.decode(str(message.data), type=TurnDelta).text)

    try:
        for stream in streams:
            assert (await anext(stream)).comment == "connected"
        sequences, texts = [], []
        for n in range(10):
            sequences.append(await record(nc, wf, f"note {n}"))
            texts += [f"{n}.{k}" for k in range(3)]
            for k in range(3):
                await nc.publish(subjects.deltas(wf, "s"), msgspec.json.encode(delta(wf, f"{n}.{k}", session_id="s")))
        await nc.flush()
        await asyncio.wait_for(asyncio.gather(*(read(stream, into, sequences[-1], len(texts))
                                                for stream, into in zip(streams, got, strict=True))), 20)
        assert all(ids == sequences and deltas == texts for ids, deltas in got)
        assert not any(live.dropped_deltas for live in lives)
    finally:
        for stream in streams:
            await stream.aclose()  # type: ignore[attr-defined]  # an async generator, typed as an iterator


async def test_connections_share_the_delta_subscription_until_the_last_one_ends(gateway: Gateway, nc: Client):
    wf = new_id()
    subject = subjects.deltas(wf, "s")
    async with gateway.client() as http, following(http, {"workflow": wf}) as [staying]:
        async with following(http, {"workflow": wf}) as [leaving]:
            await publish_delta(nc, delta(wf, "both", session_id="s"))
            await leaving.until(lambda f: f.deltas == ["both"])
        await publish_delta(nc, delta(wf, "one", session_id="s"))
        await staying.until(lambda f: f.deltas == ["both", "one"])
        assert await interest(nc, subject)
    deadline = time.monotonic() + 10
    while await interest(nc, subject):
        assert time.monotonic() < deadline, "the shared delta subscription outlived its last connection"
        await asyncio.sleep(0.05)


async def _record_when_back(nc: Client, wf: str, note: str) -> int:
    """Record once JetStream answers again (the client reconnects on its own)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return await record(nc, wf, note)
        except (NatsError, TimeoutError):
            assert time.monotonic() < deadline, "JetStream did not come back"
            await asyncio.sleep(0.1)


@pytest.mark.timeout(90)
async def test_a_nats_restart_mid_stream_loses_and_repeats_nothing(tmp_path_factory: pytest.TempPathFactory):
    """NATS restarts (same port, same store): the shared feed and a behind client's own catch-up recreate their
    consumers after the last event each handed out, so every client carries on with no gap and no repeat."""
    server = EmbeddedNats(tmp_path_factory.mktemp("nats-restart")).start()
    nc = await connect(server.url, name="test-restart")
    await ensure_event_stream(nc)
    settings = Settings(data_dir=str(tmp_path_factory.mktemp("gateway-restart")), nats_url=server.url,
                        request_timeout=REQUEST_TIMEOUT)
    served = serve_gateway(settings)
    gateway = await anext(served)
    wf = new_id()
    behind = LiveEvents(nc, workflow=wf, after=0, keepalive=30, deltas=False, buffer=2)
    behind_messages = behind.messages()
    try:
        assert (await anext(behind_messages)).comment == "connected"
        async with (gateway.client() as http,
                    following(http, {"workflow": wf, "deltas": "false"}, 3) as followers,
                    following(http, {"deltas": "false"}) as [everything]):
            before = [await record(nc, wf, f"before {n}") for n in range(4)]
            for follower in [*followers, everything]:
                await follower.has(before[-1])
            assert behind.behind  # its buffer (2) is full: it catches up on its own, across the restart

            server.stop()
            server.start()
            after = [await _record_when_back(nc, wf, f"after {n}") for n in range(4)]
            for follower in followers:
                await follower.has(after[-1])
                assert follower.ids == before + after
            await everything.has(after[-1])
            assert [s for s in everything.ids if s in set(before + after)] == before + after
        got: list[int] = []
        while len(got) < 8:
            item = await asyncio.wait_for(anext(behind_messages), 15)
            got += [m.id for m in getattr(item, "messages", [item]) if m.id is not None]
        assert got == before + after
    finally:
        await behind_messages.aclose()  # type: ignore[attr-defined]  # an async generator, typed as an iterator
        with contextlib.suppress(StopAsyncIteration):
            await anext(served)
        await nc.close()
        server.stop()


async def test_an_event_streams_writes_skip_the_apps_send_wrappers_but_its_start_does_not(
        nats_server, tmp_path_factory: pytest.TempPathFactory, nc: Client):
    """A thousand clients make every event a thousand writes: each goes to the server's own ``send``, not through
    the app's ``before_send`` hooks (which act on a response's start, and see it)."""
    data = tmp_path_factory.mktemp("raw-send")
    app = create_app(Settings(data_dir=str(data), nats_url=nats_server.url, request_timeout=REQUEST_TIMEOUT))
    seen: list[str] = []

    async def count(message: Message, scope: Scope) -> None:
        if scope.get("path") == "/api/events":
            seen.append(message["type"] + (":more" if message.get("more_body") else ""))

    app.before_send.append(count)
    wf = new_id()
    async for gateway in serve_gateway(Settings(data_dir=str(data), nats_url=nats_server.url), app):
        async with gateway.client() as http, following(http, {"workflow": wf, "deltas": "false"}) as (follower,):
            sequences = [await record(nc, wf, f"note {n}") for n in range(10)]
            await follower.has(sequences[-1])
            assert follower.ids == sequences
    assert seen[0] == "http.response.start"
    assert "http.response.body:more" not in seen, seen
