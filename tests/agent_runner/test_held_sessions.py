"""The runner holds live every session with a turn running and only the most recently used settled ones
(``HELD_SETTLED``): a process that ran a thousand loop iterations, one closed session each, does not keep a
thousand sessions in memory, and a session it dropped answers every command as before, read from its events."""

from __future__ import annotations

import gc
import uuid
from pathlib import Path

from autarch.contracts import subjects
from autarch.contracts.agents import (
    ListSessions,
    SendMessage,
    SessionList,
    SessionStopped,
    StopSession,
    TurnAccepted,
)
from autarch.runtime.requests import request
from autarch.services.agent_runner.service import HELD_SETTLED, open_runner

from .conftest import RUNNER, get_session, runner_settings, wait_turn
from .runners import run_turn


async def test_settled_sessions_held_live_stay_within_the_bound_and_a_dropped_one_answers_as_before(
        nc, data_dir: Path, scripted, tools, repo: Path) -> None:
    assert HELD_SETTLED >= 16  # a few channels' discussions and a workflow's stages are not read again at each message
    runner, stop = await open_runner(nc, runner_settings(data_dir, scripted))
    runner.held_settled = 2
    try:
        workflow_id = str(uuid.uuid4())
        ids = []
        for n in range(6):
            sid, turn = await run_turn(nc, role="discussion", script="chat", root=repo, workflow_id=workflow_id)
            assert turn.outcome is not None and turn.outcome.kind == "end_turn"
            ids.append(sid)
            if n % 2:  # as a loop does at the end of each iteration
                await request(nc, subjects.request(RUNNER, "stop_session"), StopSession(session_id=sid, close=True),
                              SessionStopped)
            assert len(runner.sessions) <= 3  # the two used last, and the one whose turn task may still be ending
        await request(nc, subjects.request(RUNNER, "stop_session"), StopSession(session_id=ids[-2]), SessionStopped)
        assert set(runner.sessions) <= {ids[-1], ids[-2]}
        gc.collect()
        assert len(runner._locks) == 0  # no lock is kept for a session nobody is deciding on
        listed = await request(nc, subjects.request(RUNNER, "list_sessions"), ListSessions(run_id=workflow_id),
                               SessionList)
        assert [(s.session_id, s.status, s.turns) for s in listed.items] == [
            (sid, "closed" if n % 2 else "idle", 1) for n, sid in enumerate(ids)]

        # A dropped session: read from its events when named, its next turn runs on its whole history.
        dropped = ids[0]
        assert dropped not in runner.sessions
        assert [t.messages for t in (await get_session(nc, dropped)).turns] == [["Hello there, this is greeter."]]
        accepted = await request(nc, subjects.request(RUNNER, "send_message"),
                                 SendMessage(session_id=dropped, text="And again?"), TurnAccepted)
        view = await wait_turn(nc, dropped, accepted.turn_id)
        assert [t.messages for t in view.turns] == [["Hello there, this is greeter."], ["Second answer."]]
        # A closed one that was dropped is still closed.
        closed = await request(nc, subjects.request(RUNNER, "stop_session"), StopSession(session_id=ids[1]),
                               SessionStopped)
        assert closed.closed and (await get_session(nc, ids[1])).status == "closed"
        assert len(runner.sessions) <= 3
    finally:
        await stop()
