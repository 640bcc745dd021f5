"""``/api/events`` mixes the live token deltas (core NATS) into the recorded events (JetStream).

Deltas are published on their real subject as the agent runner publishes them; recorded events go into the
real stream. The SSE side is read raw, line by line, to see exactly which lines each event has.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from autarch.contracts import subjects
from autarch.contracts.agents import TurnDelta
from autarch.contracts.events import WorkflowNoteTaken
from autarch.gateway.sse import LiveEvents

from .conftest import Gateway, new_id

SESSION = "5e55105e-0000-4000-8000-000000000002"


@dataclass
class Sse:
    """One event as it came over the wire: its fields in order (``id`` only when the line was there)."""

    fields: dict[str, str]

    @property
    def event(self) -> str:
        return self.fields.get("event", "")

    @property
    def data(self) -> str:
        return self.fields.get("data", "")

    @property
    def id(self) -> str:
        return self.fields.get("id", "")


async def sse_events(stream: httpx.Response, connected: asyncio.Event | None = None) -> AsyncIterator[Sse]:
    """Events (comments skipped) of a ``text/event-stream`` response."""
    fields: dict[str, str] = {}
    async for line in stream.aiter_lines():
        if line == ": connected" and connected is not None:
            connected.set()
        if line.startswith(":"):
            continue
        if not line:
            if fields:
                yield Sse(fields)
            fields = {}
            continue
        name, _, value = line.partition(": ")
        fields[name] = value


def delta(workflow_id: str | None, text: str, *, kind: str = "turn:message_delta", restart: bool = False,
          session_id: str = SESSION) -> TurnDelta:
    return TurnDelta(type=kind, session_id=session_id, turn_id="turn-1", text=text,  # type: ignore[arg-type]  # kind: one of the Literal's values, as the test names it
                     run_id=workflow_id, restart=restart)


async def publish_delta(nc: Client, d: TurnDelta) -> None:
    await nc.publish(subjects.deltas(d.run_id or subjects.NO_WORKFLOW, d.session_id), msgspec.json.encode(d))
    await nc.flush()


async def record(nc: Client, workflow_id: str, note: str) -> int:
    """Put a recorded event into the stream (as the orchestrator's relay does); its sequence."""
    event = WorkflowNoteTaken(workflow_id=workflow_id, occurred_at=datetime.now(UTC), note_id=new_id(),
                              stage="research", session_id=SESSION, note=note)
    subject = subjects.event(workflow_id, "workflow", workflow_id, "note_taken")
    ack = await nc.jetstream().publish(subject, msgspec.json.encode(event), stream=subjects.EVENTS_STREAM)
    return ack.seq


async def collect(http: httpx.AsyncClient, params: dict[str, str], act: Callable[[], Awaitable[None]],
                  until: Callable[[list[Sse]], bool], headers: dict[str, str] | None = None) -> list[Sse]:
    """Open the stream, run ``act`` once it is live, and gather events until ``until(seen)``."""
    seen: list[Sse] = []
    connected = asyncio.Event()

    async def follow() -> None:
        async with http.stream("GET", "/api/events", params=params, headers=headers) as stream:
            assert stream.status_code == 200
            async for sse in sse_events(stream, connected):
                seen.append(sse)
                if until(seen):
                    return

    task = asyncio.create_task(follow())
    await asyncio.wait_for(connected.wait(), 5)
    await act()
    await asyncio.wait_for(task, 10)
    return seen


async def test_deltas_come_without_an_id_and_recorded_events_keep_theirs(gateway: Gateway, nc: Client):
    wf, other = new_id(), new_id()
    sequence: list[int] = []

    async def act() -> None:
        await publish_delta(nc, delta(wf, "Let me "))
        await publish_delta(nc, delta(other, "not this workflow"))
        await publish_delta(nc, delta(wf, "thinking…", kind="turn:thought_delta"))
        sequence.append(await record(nc, wf, "a note"))
        await publish_delta(nc, delta(wf, "Let me look", restart=True))

    async with gateway.client() as http:
        seen = await collect(http, {"workflow": wf}, act,
                             until=lambda s: sum(e.event.endswith("_delta") for e in s) == 3
                             and any(e.event == "workflow:note_taken" for e in s))
    deltas = [e for e in seen if e.event.endswith("_delta")]
    assert all("id" not in e.fields for e in deltas)
    assert [(e.event, msgspec.json.decode(e.data, type=TurnDelta)) for e in deltas] == [
        ("turn:message_delta", delta(wf, "Let me ")),
        ("turn:thought_delta", delta(wf, "thinking…", kind="turn:thought_delta")),
        ("turn:message_delta", delta(wf, "Let me look", restart=True)),
    ]
    [note] = [e for e in seen if e.event == "workflow:note_taken"]
    assert note.fields["id"] == str(sequence[0])
    assert msgspec.json.decode(note.data)["note"] == "a note"
    assert "not this workflow" not in "".join(e.data for e in seen)


async def test_the_unfiltered_stream_carries_every_workflows_deltas_and_channel_ones(gateway: Gateway, nc: Client):
    wf = new_id()

    async def act() -> None:
        await publish_delta(nc, delta(wf, "from a workflow"))
        await publish_delta(nc, delta(None, "from a channel"))

    async with gateway.client() as http:
        seen = await collect(http, {}, act, until=lambda s: sum(e.event == "turn:message_delta" for e in s) >= 2)
    texts = [msgspec.json.decode(e.data, type=TurnDelta).text for e in seen if e.event == "turn:message_delta"]
    assert texts[-2:] == ["from a workflow", "from a channel"]


async def test_deltas_false_sends_recorded_events_only(gateway: Gateway, nc: Client):
    wf = new_id()

    async def act() -> None:
        await publish_delta(nc, delta(wf, "unwanted"))
        await record(nc, wf, "wanted")

    async with gateway.client() as http:
        seen = await collect(http, {"workflow": wf, "deltas": "false"}, act,
                             until=lambda s: any(e.event == "workflow:note_taken" for e in s))
        assert [e.event for e in seen] == ["workflow:note_taken"]
        r = await http.get("/api/events", params={"deltas": "maybe"})
        assert (r.status_code, r.json()["code"]) == (400, "bad_request")


async def test_resuming_after_deltas_starts_from_the_last_recorded_event(gateway: Gateway, nc: Client):
    """A client resumes with the id of the last recorded event it saw; deltas never moved it."""
    wf = new_id()
    first: list[int] = []

    async def act() -> None:
        first.append(await record(nc, wf, "one"))
        await publish_delta(nc, delta(wf, "between"))

    async with gateway.client() as http:
        seen = await collect(http, {"workflow": wf}, act,
                             until=lambda s: {e.event for e in s} >= {"workflow:note_taken", "turn:message_delta"})
        ids = [e.fields["id"] for e in seen if "id" in e.fields]
        assert ids == [str(first[0])]
        later: list[int] = []

        async def more() -> None:
            later.append(await record(nc, wf, "two"))

        resumed = await collect(http, {"workflow": wf, "deltas": "false"}, more,
                                until=lambda s: any(e.event == "workflow:note_taken" for e in s),
                                headers={"Last-Event-ID": ids[-1]})
    assert [(e.fields["id"], msgspec.json.decode(e.data)["note"]) for e in resumed] == [(str(later[0]), "two")]


async def interest(nc: Client, subject: str) -> bool:
    """Whether anyone subscribes to ``subject`` now (a request nobody answers times out; no one: no responders)."""
    try:
        await nc.request(subject, b"probe: not a delta", timeout=0.3)
    except NoRespondersError:
        return False
    except NatsTimeout:
        return True
    return True


async def test_each_connection_subscribes_to_deltas_and_unsubscribes_when_it_ends(gateway: Gateway, nc: Client):
    wf = new_id()
    subject = subjects.deltas(wf, SESSION)
    assert not await interest(nc, subject)
    async with gateway.client() as http:
        connected = asyncio.Event()
        async with http.stream("GET", "/api/events", params={"workflow": wf}) as stream:
            events: Any = sse_events(stream, connected)  # an async generator (aclose below)
            reader = asyncio.create_task(anext(events))
            await asyncio.wait_for(connected.wait(), 5)
            assert await interest(nc, subject)
            # The probe is no delta: the stream ignores it and carries on.
            await publish_delta(nc, delta(wf, "still flowing"))
            first = await asyncio.wait_for(reader, 5)
            assert msgspec.json.decode(first.data, type=TurnDelta).text == "still flowing"
            await events.aclose()
    deadline = time.monotonic() + 10
    while await interest(nc, subject):
        assert time.monotonic() < deadline, "the gateway kept the delta subscription of a closed connection"
        await asyncio.sleep(0.05)


async def test_events_waiting_together_go_out_in_one_write_exactly_as_one_by_one(nc: Client):
    """A burst (twenty workflows changing stage at once) is one write, not one per event: the bytes are those
    of each event encoded alone, in stream order, ids included, so a client cannot tell the difference."""
    wf = new_id()
    feed = LiveEvents(nc, workflow=wf, after=None, keepalive=30, deltas=False)
    messages = feed.messages()
    assert (await anext(messages)).comment == "connected"
    try:
        sequences = [await record(nc, wf, f"note {n}") for n in range(5)]
        deadline = time.monotonic() + 10
        while feed.queued < 5:
            assert time.monotonic() < deadline, feed.queued
            await asyncio.sleep(0.01)
        item = await anext(messages)
        parts = getattr(item, "messages", None)
        assert parts is not None and [m.id for m in parts] == sequences
        assert item.encode() == b"".join(m.encode() for m in parts)
        assert item.encode().count(b"event: workflow:note_taken") == 5
    finally:
        await messages.aclose()  # type: ignore[attr-defined]  # an async generator, typed as an iterator


async def test_a_slow_client_drops_deltas_but_never_a_recorded_event(nc: Client):
    """Bounded memory: with the client not reading, at most ``buffer`` messages wait; extra deltas are dropped,
    a recorded event waits for room and comes after what was queued before it."""
    wf = new_id()
    feed = LiveEvents(nc, workflow=wf, after=None, keepalive=30, buffer=8)
    messages = feed.messages()
    assert (await anext(messages)).comment == "connected"

    async def settled(dropped: int) -> None:
        deadline = time.monotonic() + 10
        while feed.dropped_deltas < dropped:
            assert time.monotonic() < deadline, (feed.dropped_deltas, feed.queued)
            await asyncio.sleep(0.01)

    try:
        for n in range(100):
            await nc.publish(subjects.deltas(wf, SESSION), msgspec.json.encode(delta(wf, str(n))))
        await nc.flush()
        await settled(92)
        assert feed.queued == 8
        sequence = await record(nc, wf, "must arrive")
        for n in range(100, 110):
            await nc.publish(subjects.deltas(wf, SESSION), msgspec.json.encode(delta(wf, str(n))))
        await nc.flush()
        await settled(102)
        assert feed.queued == 8

        got: list = []
        while len(got) < 10:  # what waited goes out together, in one write (a batch), in the same order
            item = await anext(messages)
            got.extend(getattr(item, "messages", [item]))
        assert len(got) == 10
        assert got[0].comment == "102 deltas dropped"
        assert [msgspec.json.decode(str(m.data), type=TurnDelta).text for m in got[1:9]] == [str(n) for n in range(8)]
        assert all(m.id is None for m in got[1:9])
        assert (got[9].event, got[9].id) == ("workflow:note_taken", sequence)
        # Room again: deltas flow.
        await publish_delta(nc, delta(wf, "after"))
        after = await asyncio.wait_for(anext(messages), 5)
        assert msgspec.json.decode(str(after.data), type=TurnDelta).text == "after"
    finally:
        await messages.aclose()  # type: ignore[attr-defined]  # an async generator, typed as an iterator


@pytest.mark.usefixtures("runner")
async def test_a_real_turns_message_deltas_spell_its_text(gateway: Gateway, repo: Path):
    """The agent runner's own deltas for a discussion turn spell its text. They travel apart from the recorded
    ``turn:completed`` (core NATS against the stream) and may come after it, as docs/api.md says."""
    session_id = new_id()

    async with gateway.client() as http:

        async def act() -> None:
            r = await http.post("/api/channels/c-deltas/session",
                                json={"repo": str(repo), "message": "What is this?", "session_id": session_id})
            assert r.status_code == 201, r.text

        def mine(e: Sse) -> bool:
            return msgspec.json.decode(e.data).get("session_id") == session_id

        def spelled(s: list[Sse]) -> bool:
            done = [msgspec.json.decode(e.data) for e in s if e.event == "turn:completed" and mine(e)]
            text = "".join(msgspec.json.decode(e.data)["text"] for e in s
                           if e.event == "turn:message_delta" and mine(e))
            return bool(done) and text == "".join(done[0]["text"].split("\n\n"))

        seen = await collect(http, {}, act, until=spelled)
    seen = [e for e in seen if mine(e)]
    deltas = [msgspec.json.decode(e.data, type=TurnDelta) for e in seen if e.event == "turn:message_delta"]
    [completed] = [msgspec.json.decode(e.data) for e in seen if e.event == "turn:completed"]
    assert deltas and all(d.run_id is None and d.turn_id == completed["turn_id"] for d in deltas)
    # The turn's text is its replies joined by a blank line; the deltas are the replies as they streamed.
    assert "".join(d.text for d in deltas) == "".join(completed["text"].split("\n\n"))
    assert all("id" not in e.fields for e in seen if e.event.endswith("_delta"))
    assert all("id" in e.fields for e in seen if not e.event.endswith("_delta"))


async def test_a_session_and_turn_event_recorded_with_workflow_id_are_sent_in_todays_shape(gateway: Gateway,
                                                                                           nc: Client):
    """A loop iteration's agent events on the stream from before issue 33 (version 1: the run, here a loop session,
    in ``workflow_id``) reach a client replaying that run as version 2, the run in ``run_id``."""
    loop, agent = new_id(), new_id()
    old = [{"type": "session:started", "workflow_id": loop, "occurred_at": "2026-11-25T05:30:00Z",
            "session_id": agent, "role": "loop", "model": "m", "root": "/wt"},
           {"type": "turn:completed", "workflow_id": loop, "occurred_at": "2026-11-25T05:31:00Z",
            "session_id": agent, "turn_id": "t1", "text": "done", "thoughts": "", "outcome": "end_turn"}]
    js = nc.jetstream()
    await js.publish(subjects.event(loop, "session", agent, "started"), msgspec.json.encode(old[0]),
                     stream=subjects.EVENTS_STREAM)
    await js.publish(subjects.event(loop, "turn", agent, "completed"), msgspec.json.encode(old[1]),
                     stream=subjects.EVENTS_STREAM)

    async def nothing() -> None:
        return None

    async with gateway.client() as http:
        replayed = await collect(http, {"workflow": loop, "since": "0", "deltas": "false"}, nothing,
                                 until=lambda s: any(e.event == "turn:completed" for e in s))
    sent = [msgspec.json.decode(e.data) for e in replayed if e.event in ("session:started", "turn:completed")]
    expected = [{**{k: v for k, v in o.items() if k != "workflow_id"}, "run_id": loop, "schema_version": 2}
                for o in old]
    assert sent == expected
