"""The runner's relay on its own thread: every saved event reaches the stream once, in store order, and a stop
publishes what a running turn left waiting before the thread ends."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from autarch.services.agent_runner.relay_thread import RelayThread

from .test_pacing import Stream, _app, _session, _start_turn


def _complete_turn(session) -> None:
    turn = session.turns[-1]
    session.complete_turn(turn_id=turn.turn_id, outcome={"kind": "end_turn"}, at=datetime.now(UTC), text="",
                          thoughts="", usage={}, cost_usd=0.0, tool_calls=0, model_calls=0)


async def test_every_saved_event_reaches_the_stream_once_and_in_order(nc, tmp_path):
    app = _app(tmp_path / "sessions.sqlite")
    workflow_id = str(uuid.uuid4())
    relay = RelayThread(app=app, nc=nc, run_of=lambda _: workflow_id)
    await relay.start()
    try:
        async with Stream(nc, workflow_id) as stream:
            sessions = [_session(workflow_id) for _ in range(3)]
            expected = []
            for session in sessions:
                app.save(session)
                relay.saved(session)
                expected.append("session:started")
            # Saves from this loop interleaved across sessions, turns running and ending, as a busy runner's are.
            for _ in range(5):
                for session in sessions:
                    _start_turn(session)
                    app.save(session)
                    relay.saved(session)
                    relay.model_wait()
                    expected.append("turn:started")
                await asyncio.sleep(0)
                for session in sessions:
                    _complete_turn(session)
                    app.save(session)
                    relay.saved(session)
                    expected.append("turn:completed")
            got = list(await stream.until(len(expected), timeout=10))
            # A last save, after all the others: once its event is there, anything doubled would be there too.
            last = _session(workflow_id)
            app.save(last)
            relay.saved(last)
            assert (await stream.until(len(expected) + 1, timeout=10))[-1] == "session:started"
            # The stream keeps store order: the order of the saves.
            assert stream.names[:-1] == got == expected
    finally:
        assert await relay.stop() is None
    assert not relay.alive
    assert nc.is_connected  # the relay closed its own connection, not the runner's


async def test_stop_publishes_what_a_running_turn_left_waiting(nc, tmp_path):
    app = _app(tmp_path / "sessions.sqlite")
    workflow_id = str(uuid.uuid4())
    # Another workflow's session, saved before the start: the start-up round publishes it, and is then over.
    earlier = _session(str(uuid.uuid4()))
    app.save(earlier)
    # Paced so that nothing but the stop would publish the turn's event in this test's time.
    relay = RelayThread(app=app, nc=nc, run_of=lambda _: workflow_id, interval=30.0, poll_interval=30.0)
    await relay.start()
    async with Stream(nc, earlier.run_id or "") as before:
        assert await before.until(1) == ["session:started"]  # the start-up round has read and published
    async with Stream(nc, workflow_id) as stream:
        session = _session(workflow_id)
        _start_turn(session)
        app.save(session)
        relay.saved(session)
        await asyncio.sleep(0.3)  # a quiet window: nothing marks "not published yet" but the pacing's length
        assert stream.names == []  # held back: a turn runs
        assert await relay.stop() is None
        assert await stream.until(2) == ["session:started", "turn:started"]
    assert not relay.alive
    assert await relay.stop() is None  # a service stopped twice (a standby's stop after its own) stops once
