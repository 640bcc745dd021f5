"""The driver's turn consumer hands each ``turn:completed`` to ``on_turn`` at once, even with a pull request
left over on its reply inbox (what a stale ``408 Request Timeout`` made nats-py's ``fetch`` leave behind after a
service was killed and restarted: turn events then reached the driver 1-5 s late for the rest of the run)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from autarch.contracts import subjects
from autarch.contracts.base import encode
from autarch.contracts.events import TurnCompleted
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.stepping import turn_consumer
from autarch.services.orchestrator.workflow.driver import _CONSUMER, WorkflowDriver

NEXT = f"$JS.API.CONSUMER.MSG.NEXT.{subjects.EVENTS_STREAM}.{_CONSUMER}"


def _turn(workflow_id: str, n: int) -> TurnCompleted:
    return TurnCompleted(run_id=workflow_id, occurred_at=datetime.now(UTC), session_id="s", turn_id=f"t{n}",
                         text="", thoughts="", outcome="end_turn")


@pytest.fixture
async def driver(nc, data_dir):
    js = nc.jetstream()
    try:
        await js.delete_consumer(subjects.EVENTS_STREAM, _CONSUMER)  # another test's, with its backlog
    except Exception:
        pass
    settings = Settings(data_dir=str(data_dir))
    d = WorkflowDriver(nc=nc, book=SimpleNamespace(views={}), settings=settings)
    yield d
    await d.stop()
    await js.delete_consumer(subjects.EVENTS_STREAM, _CONSUMER)


async def test_turns_come_at_once_despite_a_pull_request_left_on_the_inbox(nc, driver) -> None:
    workflow_id = str(uuid.uuid4())
    arrived: dict[str, float] = {}

    async def on_turn(event: TurnCompleted) -> None:
        if event.run_id == workflow_id:
            arrived[event.turn_id] = time.monotonic()

    driver.on_turn = on_turn
    # Watch the consumer's pull requests to learn where it wants its messages.
    replies: list[str] = []

    async def spy_on(msg) -> None:
        replies.append(msg.reply)

    spy = await nc.subscribe(NEXT, cb=spy_on)
    await driver.start([])
    js = nc.jetstream()
    # A new durable consumer first works through every turn event already on the stream (in a full run, every
    # earlier test's: seconds of them). The measurement starts once a first event of this test came through.
    await js.publish(subjects.event(workflow_id, "turn", "warm", "completed"), encode(_turn(workflow_id, -1)))
    started = time.monotonic()
    while "t-1" not in arrived and time.monotonic() - started < 120:
        await asyncio.sleep(0.02)
    await spy.unsubscribe()
    assert "t-1" in arrived, "the driver handed on no turn within 120 s"
    assert replies, "the driver sent no pull request"
    # A lingering request of a batch that no longer has a taker (as fetch leaves one behind after a stale 408),
    # on the consumer's own reply inbox: the server hands the next messages to it, the oldest.
    await nc.publish(NEXT, json.dumps({"batch": 32, "expires": int(9e9)}).encode(), reply=replies[-1])
    await nc.flush()
    delays = []
    for n in range(4):
        await asyncio.sleep(0.3)  # paced on purpose: each event comes alone, to a driver already waiting for more
        sent = time.monotonic()
        await js.publish(subjects.event(workflow_id, "turn", f"t{n}", "completed"), encode(_turn(workflow_id, n)))
        while f"t{n}" not in arrived and time.monotonic() - sent < 6:
            await asyncio.sleep(0.01)
        delays.append(arrived.get(f"t{n}", float("inf")) - sent)
    # Held for its batch, an event would wait out the fetch (5 s); handed out at once, it comes in milliseconds.
    # The bound sits between the two, far enough from both that a loaded machine (1.7 s seen once) passes.
    assert max(delays) < 3.0, f"turn events reached on_turn after {[round(d, 2) for d in delays]} s"


async def test_a_backlog_of_turns_is_handed_on_without_pausing_between_batches(nc, driver) -> None:
    """A restarted orchestrator may find hundreds of turn events waiting (a burst of swarm workers, a long outage):
    each pull request's batch is followed by the next request at once, not after the request's silence ran out
    (which handed on 32 events every 2 s: 1,000 of them took a minute)."""
    workflow_id = str(uuid.uuid4())
    arrived: set[str] = set()

    async def on_turn(event: TurnCompleted) -> None:
        if event.run_id == workflow_id:
            arrived.add(event.turn_id)

    driver.on_turn = on_turn
    js = nc.jetstream()
    for n in range(1000):
        await js.publish(subjects.event(workflow_id, "turn", f"t{n}", "completed"), encode(_turn(workflow_id, n)))
    started = time.monotonic()
    await driver.start([])
    while len(arrived) < 1000 and time.monotonic() - started < 20:
        await asyncio.sleep(0.05)
    # Handed on at once, 1,000 events take well under a second here; at 32 per 2 s they would take 62 s.
    assert len(arrived) == 1000, f"{len(arrived)} of 1,000 waiting turn events handed on in 20 s"


async def test_a_turn_recorded_with_its_run_in_workflow_id_reaches_on_turn_in_todays_shape(nc) -> None:
    """A ``turn:completed`` on the stream from before issue 33 (version 1: the run, here a loop session, in
    ``workflow_id``) is read through the one upcast: ``on_turn`` gets it with ``run_id``, and a partition's ``owns``
    is asked about that run, not acknowledged away as undecodable."""
    loop = str(uuid.uuid4())
    old = {"type": "turn:completed", "workflow_id": loop, "occurred_at": "2026-11-25T05:30:00Z",
           "session_id": "agent", "turn_id": "old-1", "text": "done", "thoughts": "", "outcome": "block",
           "tool": "complete_pulse", "arguments": {"description": "d"}}
    await nc.jetstream().publish(subjects.event(loop, "turn", "agent", "completed"), json.dumps(old).encode())
    got: asyncio.Queue[TurnCompleted] = asyncio.Queue()
    asked: list[str] = []

    async def on_turn(event: TurnCompleted) -> None:
        if event.run_id == loop:
            got.put_nowait(event)

    def owns(run: str) -> bool:
        asked.append(run)
        return True

    durable = f"test-old-turns-{uuid.uuid4().hex[:8]}"
    consumer = turn_consumer(nc, durable=durable, on_turn=on_turn, kind="loop", log=logging.getLogger(__name__),
                             owns=owns)
    await consumer.start()
    pulling = asyncio.create_task(consumer.run())
    try:
        event = await asyncio.wait_for(got.get(), 30)
    finally:
        pulling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pulling
        await consumer.stop()
        await nc.jetstream().delete_consumer(subjects.EVENTS_STREAM, durable)
    assert event.run_id == loop and event.schema_version == 2 and event.turn_id == "old-1"
    assert event.tool == "complete_pulse" and loop in asked
