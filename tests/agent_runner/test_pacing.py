"""The runner's paced relay: when its rounds start, and that every saved event still reaches the stream."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from nats.js.api import ConsumerConfig, DeliverPolicy

from autarch.contracts import subjects
from autarch.services.agent_runner.application import SessionApplication
from autarch.services.agent_runner.contract_events import ContractMapper
from autarch.services.agent_runner.domainmodel import Session
from autarch.services.agent_runner.pacing import PacedRelay


def _app(path) -> SessionApplication:
    return SessionApplication(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)})


def _session(workflow_id: str) -> Session:
    return Session(session_id=str(uuid.uuid4()), role="discussion", model="m", root="/repo", run_id=workflow_id,
                   channel_id=None, script=None, notes=[])


def _start_turn(session: Session) -> None:
    session.start_turn(turn_id=str(uuid.uuid4()), index=len(session.turns), text="hi", notes=[], message_id=None,
                       stage_notes=None, at=datetime.now(UTC))


@dataclass
class CountedRelay(PacedRelay):
    """A paced relay that counts its finished rounds: a test waits for the start-up round, not for a while."""

    rounds: int = 0

    async def publish_pending(self) -> int:
        published = await super().publish_pending()
        self.rounds += 1
        return published

    async def until_round(self, count: int = 1, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while self.rounds < count:
                await asyncio.sleep(0.01)


class Stream:
    """The event names of one workflow on the stream, as they arrive."""

    def __init__(self, nc, workflow_id: str) -> None:
        self.nc, self.workflow_id = nc, workflow_id
        self.names: list[str] = []

    async def __aenter__(self) -> Stream:
        async def got(msg) -> None:
            self.names.append(subjects.event_type_from_subject(msg.subject))

        self.sub = await self.nc.jetstream().subscribe(
            subjects.event(self.workflow_id, "*", "*", "*"), cb=got, ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.sub.unsubscribe()

    async def until(self, count: int, timeout: float = 5.0) -> list[str]:
        async with asyncio.timeout(timeout):
            while len(self.names) < count:
                await asyncio.sleep(0.01)
        return self.names


async def test_rounds_wait_while_a_turn_runs_and_every_event_still_reaches_the_stream(nc, tmp_path):
    app = _app(tmp_path / "sessions.sqlite")
    workflow_id = str(uuid.uuid4())
    session = _session(workflow_id)
    relay = PacedRelay(app=app, nc=nc, to_contract=ContractMapper(run_of=lambda _: workflow_id),
                       interval=3.0, poll_interval=30.0)
    relay.start()
    try:
        async with Stream(nc, workflow_id) as stream:
            app.save(session)
            relay.saved(session)  # no turn runs: published at once
            assert await stream.until(1) == ["session:started"]

            _start_turn(session)
            app.save(session)
            relay.saved(session)  # a turn runs now: the round waits for the interval
            await asyncio.sleep(0.3)  # a quiet window: nothing marks "not published yet" but the interval's length
            assert stream.names == ["session:started"]
            assert await stream.until(2, timeout=10) == ["session:started", "turn:started"]

            turn = session.turns[-1]
            session.complete_turn(turn_id=turn.turn_id, outcome={"kind": "end_turn"}, at=datetime.now(UTC), text="",
                                  thoughts="", usage={}, cost_usd=0.0, tool_calls=0, model_calls=0)
            app.save(session)
            relay.saved(session)  # the turn ended: at once again, well inside the interval
            assert await stream.until(3, timeout=1.5) == ["session:started", "turn:started", "turn:completed"]
    finally:
        await relay.stop()


async def test_events_another_writer_saved_are_published_without_a_save_here(nc, tmp_path):
    """Two runners on one (shared) store: this relay polls, so the other's events do not wait for a save here."""
    path = tmp_path / "sessions.sqlite"
    app, other = _app(path), _app(path)
    workflow_id = str(uuid.uuid4())
    relay = CountedRelay(app=app, nc=nc, to_contract=ContractMapper(run_of=lambda _: workflow_id),
                         interval=30.0, poll_interval=0.2)
    relay.start()
    try:
        async with Stream(nc, workflow_id) as stream:
            await relay.until_round()  # the start-up round is over; no permit is left
            session = _session(workflow_id)
            _start_turn(session)
            other.save(session)
            assert await stream.until(2) == ["session:started", "turn:started"]
    finally:
        await relay.stop()


async def test_stop_publishes_what_a_running_turn_left_waiting(nc, tmp_path):
    app = _app(tmp_path / "sessions.sqlite")
    workflow_id = str(uuid.uuid4())
    session = _session(workflow_id)
    _start_turn(session)
    relay = CountedRelay(app=app, nc=nc, to_contract=ContractMapper(run_of=lambda _: workflow_id),
                         interval=30.0, poll_interval=30.0)
    relay.start()
    await relay.until_round()  # the start-up round is over
    async with Stream(nc, workflow_id) as stream:
        app.save(session)
        relay.saved(session)
        await relay.stop()
        await relay.publish_pending()  # what the runner's stop does after the relay's loop ended
        assert await stream.until(2) == ["session:started", "turn:started"]
