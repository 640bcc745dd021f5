"""A start-up rebuilds only the sessions whose turn was running: a settled one is known by its kept summary
(``services/agent_runner/kept.py``) and read from its events only when a command or ``get_session`` names it. What a
restarted runner lists, shows and counts towards a workflow's budget is what it did before the restart."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import (
    ListSessions,
    SendMessage,
    SessionList,
    SessionStopped,
    StartSession,
    StopSession,
    TurnAccepted,
    WorkflowCostList,
    WorkflowCosts,
)
from autarch.runtime.requests import request
from autarch.runtime.sqlite_store import MODULE as SQLITE_MODULE
from autarch.services.agent_runner.application import SessionApplication
from autarch.services.agent_runner.service import AgentRunner, open_runner

from .conftest import RUNNER, get_session, runner_settings, start_session, wait_turn
from .runners import own_runner, run_turn


async def _list(nc, workflow_id: str | None = None) -> SessionList:
    return await request(nc, subjects.request(RUNNER, "list_sessions"), ListSessions(run_id=workflow_id),
                         SessionList)


async def _settled_sessions(nc, data_dir: Path, scripted, repo: Path, workflow_id: str) -> list[str]:
    """Three sessions of ``workflow_id`` whose first turn ended, the last one closed, on a runner now stopped."""
    async with own_runner(nc, data_dir, scripted):
        ids = [(await run_turn(nc, role="discussion", script="chat", root=repo, workflow_id=workflow_id))[0]
               for _ in range(3)]
        await request(nc, subjects.request(RUNNER, "stop_session"), StopSession(session_id=ids[2], close=True),
                      SessionStopped)
    return ids


async def test_a_restarted_runner_rebuilds_no_settled_session_and_shows_each_as_before(
        nc, data_dir: Path, scripted, tools, repo: Path) -> None:
    workflow_id = str(uuid.uuid4())
    async with own_runner(nc, data_dir, scripted):
        ids = [(await run_turn(nc, role="discussion", script="chat", root=repo, workflow_id=workflow_id))[0]
               for _ in range(3)]
        await request(nc, subjects.request(RUNNER, "stop_session"), StopSession(session_id=ids[2], close=True),
                      SessionStopped)
        listed = await _list(nc, workflow_id)
        views = [await get_session(nc, sid) for sid in ids]
    assert [s.status for s in listed.items] == ["idle", "idle", "closed"]

    runner, stop = await open_runner(nc, runner_settings(data_dir, scripted))
    try:
        assert runner.rebuilt == [] and runner.sessions == {}
        assert await _list(nc, workflow_id) == listed
        assert [await get_session(nc, sid) for sid in ids] == views
        assert runner.sessions == {}  # reading a settled session does not make it live

        # A command names a settled session: it is read then, and its next turn runs as it would have.
        accepted = await request(nc, subjects.request(RUNNER, "send_message"),
                                 SendMessage(session_id=ids[0], text="And again?"), TurnAccepted)
        view = await wait_turn(nc, ids[0], accepted.turn_id)
        assert view.turns[1].messages == ["Second answer."]
        assert list(runner.sessions) == [ids[0]]
        assert [s.status for s in (await _list(nc, workflow_id)).items] == ["idle", "idle", "closed"]
    finally:
        await stop()

    # The turn run since settled again: the next start-up rebuilds nothing either, and shows its two turns.
    runner, stop = await open_runner(nc, runner_settings(data_dir, scripted))
    try:
        assert runner.rebuilt == []
        assert [s.turns for s in (await _list(nc, workflow_id)).items] == [2, 1, 1]
    finally:
        await stop()


async def test_a_store_without_kept_summaries_is_rebuilt_once(nc, data_dir: Path, scripted, tools,
                                                             repo: Path) -> None:
    workflow_id = str(uuid.uuid4())
    ids = await _settled_sessions(nc, data_dir, scripted, repo, workflow_id)
    async with own_runner(nc, data_dir, scripted):
        listed = await _list(nc, workflow_id)
    # A store written before summaries were kept (or whose table was lost): its sessions are rebuilt from their
    # events, listed the same, and their summaries kept for the next start-up.
    with sqlite3.connect(data_dir / "agent_runner" / "events.sqlite") as db:
        db.execute("DROP TABLE kept_views")
    for rebuilt in (ids, []):
        runner, stop = await open_runner(nc, runner_settings(data_dir, scripted))
        try:
            assert sorted(runner.rebuilt) == sorted(rebuilt)
            assert runner.sessions == {}
            assert await _list(nc, workflow_id) == listed
        finally:
            await stop()


async def test_a_settled_sessions_spend_still_counts_towards_its_workflows_budget(
        nc, data_dir: Path, scripted, tools, repo: Path) -> None:
    workflow_id = str(uuid.uuid4())
    await _settled_sessions(nc, data_dir, scripted, repo, workflow_id)
    # The workflow spent more than this budget before the restart: a new session of it may not call the model.
    async with own_runner(nc, data_dir, scripted, workflow_cost_budget=0.000001):
        accepted = await start_session(nc, role="discussion", script="budget", root=repo, workflow_id=workflow_id)
        view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome is not None and turn.outcome.kind == "budget_exceeded", turn.outcome
    assert turn.model_calls == 0


async def test_a_session_changed_after_its_summary_was_kept_is_rebuilt(nc, data_dir: Path, scripted, tools,
                                                                      repo: Path) -> None:
    workflow_id = str(uuid.uuid4())
    ids = await _settled_sessions(nc, data_dir, scripted, repo, workflow_id)
    # An event recorded after the summary (as when a runner dies between a save and its summary): the summary is
    # stale, so that session is rebuilt from its events and listed as they say.
    app = SessionApplication(env={"PERSISTENCE_MODULE": SQLITE_MODULE,
                                  "SQLITE_DBNAME": str(data_dir / "agent_runner" / "events.sqlite")})
    try:
        session = app.get_session(ids[1])
        session.close(reason="closed behind the summary's back")
        app.save(session)
    finally:
        app.close()
    runner, stop = await open_runner(nc, runner_settings(data_dir, scripted))
    try:
        assert runner.rebuilt == [ids[1]]
        assert [s.status for s in (await _list(nc, workflow_id)).items] == ["idle", "closed", "closed"]
    finally:
        await stop()


async def _costs(nc, workflow_ids: list[str]) -> dict[str, float]:
    reply = await request(nc, subjects.request(RUNNER, "workflow_costs"), WorkflowCosts(workflow_ids=workflow_ids),
                          WorkflowCostList)
    return reply.costs


def _summed(listed: SessionList) -> dict[str, float]:
    """What a client summing ``list_sessions`` gets per workflow (the figure ``workflow_costs`` replaces)."""
    costs: dict[str, float] = {}
    for s in listed.items:
        if s.run_id is not None:
            costs[s.run_id] = costs.get(s.run_id, 0.0) + s.cost_usd
    return costs


async def test_workflow_costs_equal_the_sum_of_listed_sessions_live_and_after_a_restart(
        nc, data_dir: Path, scripted, tools, repo: Path) -> None:
    first, second, idle = (str(uuid.uuid4()) for _ in range(3))
    await _settled_sessions(nc, data_dir, scripted, repo, first)
    async with own_runner(nc, data_dir, scripted):
        # Sessions run by this process (counted as each reply is recorded), a channel session (no workflow) and a
        # workflow with no session at all.
        await run_turn(nc, role="discussion", script="chat", root=repo, workflow_id=second)
        channel = await request(nc, subjects.request(RUNNER, "start_session"), StartSession(
            session_id=str(uuid.uuid4()), role="discussion", root=str(repo), kickoff="What is this?", script="chat",
            channel_id="team"), TurnAccepted)
        await wait_turn(nc, channel.session_id, channel.turn_id)
        live = await _costs(nc, [first, second, idle])
        listed = _summed(await _list(nc))
    assert live[first] > 0 and live[second] > 0 and live[idle] == 0.0
    assert set(live) == {first, second, idle} and set(listed) == {first, second}  # the channel's is no workflow's
    # list_sessions rounds each session to 8 decimals: equal to within that.
    assert live == pytest.approx({**listed, idle: 0.0}, abs=1e-7)

    # After a restart every session is settled: the figure comes from the kept summaries, and is the same.
    runner, stop = await open_runner(nc, runner_settings(data_dir, scripted))
    try:
        assert runner.rebuilt == []
        assert await _costs(nc, [first, second, idle]) == live
        assert _summed(await _list(nc)) == listed
    finally:
        await stop()


async def _in_flight(nc, verb: str) -> int:
    """Requests of ``verb`` the runner has received and not answered yet (its ``$SRV.STATS``)."""
    msg = await nc.request(f"$SRV.STATS.{RUNNER}", b"", timeout=2)
    [endpoint] = [e for e in json.loads(msg.data)["endpoints"] if e["name"] == verb]
    return int(endpoint["data"]["in_flight"])


async def test_the_runner_answers_before_its_sessions_are_loaded_and_a_list_asked_meanwhile_has_every_one(
        nc, data_dir: Path, scripted, tools, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Knowing 80,000 sessions takes a start-up a second or more: the runner answers ``$SRV.PING`` (so ``/healthz``
    sees it up) before that, and a request sent meanwhile waits for the load and is answered from every session."""
    workflow_id = str(uuid.uuid4())
    ids = await _settled_sessions(nc, data_dir, scripted, repo, workflow_id)
    costs_before = await _costs_of_stopped(nc, data_dir, scripted, workflow_id)
    release = threading.Event()
    load = AgentRunner.load

    def held_load(self: AgentRunner) -> None:
        release.wait(30)  # the load, in its worker thread, waits for the test
        load(self)

    monkeypatch.setattr(AgentRunner, "load", held_load)
    opening = asyncio.create_task(open_runner(nc, runner_settings(data_dir, scripted)))
    asked: list[asyncio.Task[object]] = []
    try:
        deadline = time.monotonic() + 10
        while True:  # the runner answers its ping while its load is held
            try:
                await nc.request(f"$SRV.PING.{RUNNER}", b"", timeout=0.5)
                break
            except Exception:
                assert time.monotonic() < deadline, "the runner did not answer before its sessions were loaded"
                await asyncio.sleep(0.05)
        asked += [asyncio.create_task(_list(nc, workflow_id)), asyncio.create_task(_costs(nc, [workflow_id]))]
        while (await _in_flight(nc, "list_sessions"), await _in_flight(nc, "workflow_costs")) != (1, 1):
            assert time.monotonic() < deadline, "the requests did not reach the runner"
            await asyncio.sleep(0.01)
        assert not any(task.done() for task in asked)  # received, and held until the load is done
    finally:
        release.set()
        _, stop = await opening
        try:
            listed, costs = await asyncio.gather(*asked) if asked else (None, None)
        finally:
            await stop()
    assert isinstance(listed, SessionList) and [s.session_id for s in listed.items] == ids
    assert costs == costs_before


async def _costs_of_stopped(nc, data_dir: Path, scripted, workflow_id: str) -> dict[str, float]:
    """``workflow_costs`` of ``workflow_id`` from a runner started and stopped for the question."""
    async with own_runner(nc, data_dir, scripted):
        return await _costs(nc, [workflow_id])
