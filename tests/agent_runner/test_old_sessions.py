"""A session recorded before issue 33 named its run ``workflow_id`` (a loop iteration's agent there held its loop
session's id); today it is ``run_id``. Such a session, stored with its summary kept by the older code, still loads:
it is shown, listed and counted under its run, and its events go out as today's ``session:started``."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from autarch.contracts import subjects
from autarch.contracts.agents import ListSessions, SessionList, WorkflowCostList, WorkflowCosts
from autarch.contracts.events import SessionStarted
from autarch.runtime.requests import request
from autarch.runtime.sqlite_store import MODULE as SQLITE_MODULE
from autarch.services.agent_runner.application import SessionApplication
from autarch.services.agent_runner.contract_events import ContractMapper
from autarch.services.agent_runner.domainmodel import Session

from .conftest import RUNNER, get_session
from .runners import own_runner, run_turn


def _as_recorded_before_issue_33(data_dir: Path, run: str) -> None:
    """Rewrite the store as a runner before issue 33 left it: every ``Started`` with ``workflow_id`` (no ``run_id``)
    and every kept summary made by other code, its run under ``workflow_id``."""
    with sqlite3.connect(data_dir / "agent_runner" / "events.sqlite") as db:
        started = db.execute("SELECT rowid, state FROM stored_events WHERE topic LIKE '%Session.Started'").fetchall()
        assert started
        for rowid, state in started:
            old = json.loads(state)
            assert old.pop("run_id") == run and old.pop("workflow_id") is None
            old["workflow_id"] = run
            db.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (json.dumps(old).encode(), rowid))
        kept = db.execute("SELECT id, view FROM kept_views WHERE kind = 'session'").fetchall()
        assert kept
        for kid, view in kept:
            old = json.loads(view)
            old["summary"]["workflow_id"] = old["summary"].pop("run_id")
            db.execute("UPDATE kept_views SET shape = 'before-issue-33', view = ? WHERE kind = 'session' AND id = ?",
                       (json.dumps(old).encode(), kid))


async def test_a_session_recorded_with_its_loop_in_workflow_id_still_loads_and_lists_under_its_run(
        nc, data_dir: Path, scripted, tools, repo: Path) -> None:
    loop = str(uuid.uuid4())
    async with own_runner(nc, data_dir, scripted):
        sid, _ = await run_turn(nc, role="discussion", script="chat", root=repo, workflow_id=loop)
        before = await get_session(nc, sid)
    assert before.run_id == loop and before.cost_usd > 0
    _as_recorded_before_issue_33(data_dir, loop)

    async with own_runner(nc, data_dir, scripted):  # a start-up over the older store
        listed = await request(nc, subjects.request(RUNNER, "list_sessions"), ListSessions(run_id=loop), SessionList)
        assert [(s.session_id, s.run_id) for s in listed.items] == [(sid, loop)]
        assert await get_session(nc, sid) == before
        costs = await request(nc, subjects.request(RUNNER, "workflow_costs"), WorkflowCosts(workflow_ids=[loop]),
                              WorkflowCostList)
        assert costs.costs == {loop: before.cost_usd}  # its spend counts towards its run's budget


def test_an_old_started_event_goes_out_with_its_run_in_run_id(tmp_path: Path) -> None:
    db = tmp_path / "events.sqlite"
    env = {"PERSISTENCE_MODULE": SQLITE_MODULE, "SQLITE_DBNAME": str(db)}
    loop = str(uuid.uuid4())
    app = SessionApplication(env=env)
    session = Session(session_id=str(uuid.uuid4()), role="loop", model="m", root="/repo", run_id=loop,
                      channel_id=None, script=None, notes=[])
    app.save(session)
    app.close()
    with sqlite3.connect(db) as connection:
        [(state,)] = connection.execute("SELECT state FROM stored_events WHERE topic LIKE '%Session.Started'")
        old = json.loads(state)
        old["workflow_id"] = old.pop("run_id")
        connection.execute("UPDATE stored_events SET state = ? WHERE topic LIKE '%Session.Started'",
                           (json.dumps(old).encode(),))
    app = SessionApplication(env=env)
    try:
        assert app.get_session(str(session.id)).run_id == loop
        [started] = app.events.get(session.id)
    finally:
        app.close()
    assert isinstance(started, Session.Started)
    event = ContractMapper(run_of=lambda _: None)(started)
    assert isinstance(event, SessionStarted) and event.run_id == loop and event.schema_version == 2
