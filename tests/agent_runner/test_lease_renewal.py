"""A swarm worker's session: its tool calls carry its lease holder, and its leases live only while a turn runs."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.runtime.leases import LeaseGrant, LeaseRefusal, LeaseTable
from autarch.runtime.sqlite_store import MODULE as SQLITE_MODULE
from autarch.runtime.sqlite_store import SYNCHRONOUS_ENV
from autarch.services.agent_runner.application import SessionApplication
from autarch.services.agent_runner.domainmodel import Session
from autarch.services.agent_runner.service import open_runner
from autarch.services.scripted_model import ScriptedModelServer

from .conftest import runner_settings, start_session, wait_turn
from .runners import own_runner, run_turn
from .scenarios import step, text, tool

TTL = 0.6
SCENARIO = {
    "description": "Lease holders' sessions.",
    "check_tools": False,
    "scripts": {
        "pulsing:lease-writes": [
            step(
                tool("write_file", reason="Change another worker's file", path="greeter/core.py", content="x\n"),
                tool("write_file", reason="Write my own file", path="mine.txt", content="mine\n"),
            ),
            step(text("Done.")),
        ],
        "pulsing:long-turn": [
            step(tool("shell", reason="A long check", command="sleep 2.5")),
            step(text("Done.")),
        ],
    },
}


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCENARIO) as server:
        yield server


async def test_tool_calls_carry_the_lease_holder(nc, data_dir: Path, model, tools, repo: Path) -> None:
    table = await LeaseTable.open(nc)
    workflow_id = str(uuid.uuid4())
    assert isinstance(await table.acquire(workflow_id, "w2", ["greeter/**"], bead_id="b2", ttl=60), LeaseGrant)
    # w1's own bead is mine.txt (its scope); greeter/** is w2's.
    assert isinstance(await table.acquire(workflow_id, "w1", ["mine.txt"], bead_id="b1", ttl=60), LeaseGrant)
    async with own_runner(nc, data_dir, model):
        _, turn = await run_turn(nc, role="pulsing", script="lease-writes", root=repo, workflow_id=workflow_id,
                                 lease_holder="w1")
    refused, written = turn.tool_calls
    assert refused.is_error and "w2" in json.loads(refused.output or "{}")["error"]
    assert not written.is_error
    assert (repo / "greeter/core.py").read_text() != "x\n" and (repo / "mine.txt").read_text() == "mine\n"


async def test_leases_are_renewed_during_a_turn_and_lapse_after_it(nc, data_dir: Path, model, tools, repo) -> None:
    table = await LeaseTable.open(nc)
    workflow_id = str(uuid.uuid4())
    assert isinstance(await table.acquire(workflow_id, "w1", ["greeter/core.py"], ttl=TTL), LeaseGrant)
    async with own_runner(nc, data_dir, model, lease_ttl=TTL):
        accepted = await start_session(nc, role="pulsing", script="long-turn", root=repo, workflow_id=workflow_id,
                                       lease_holder="w1")
        # Well past the ttl, the turn still runs and its worker still holds the file (a quiet window: three ttls).
        await asyncio.sleep(3 * TTL)
        assert [lease.holder for lease in await table.leases(workflow_id)] == ["w1"]
        assert isinstance(await table.acquire(workflow_id, "w2", ["greeter/core.py"], ttl=TTL), LeaseRefusal)
        await wait_turn(nc, accepted.session_id, accepted.turn_id)
        # The turn ended: nobody renews any more, so the lease lapses and the file is free.
        deadline = time.monotonic() + TTL + 10
        while left := await table.leases(workflow_id):
            assert time.monotonic() < deadline, f"still held 10 s past the ttl after the turn: {left}"
            await asyncio.sleep(0.05)
        assert isinstance(await table.acquire(workflow_id, "w2", ["greeter/core.py"], ttl=TTL), LeaseGrant)


async def test_the_lease_holder_survives_a_runner_restart(nc, data_dir: Path, model, tools, repo) -> None:
    workflow_id = str(uuid.uuid4())
    async with own_runner(nc, data_dir, model):
        session_id, _ = await run_turn(nc, role="pulsing", script="lease-writes", root=repo, workflow_id=workflow_id,
                                       lease_holder="w1")
    runner, stop = await open_runner(nc, runner_settings(data_dir, model))
    try:
        # A settled session is not held live after a restart (kept.py): it is read when a command names it.
        assert session_id in runner.known
        assert runner.app.get_session(session_id).lease_holder == "w1"
    finally:
        await stop()


def test_a_session_recorded_before_lease_holders_existed_still_loads(tmp_path: Path) -> None:
    db = tmp_path / "events.sqlite"
    env = {"PERSISTENCE_MODULE": SQLITE_MODULE, "SQLITE_DBNAME": str(db), SYNCHRONOUS_ENV: "NORMAL"}
    app = SessionApplication(env=env)
    session = Session(session_id=str(uuid.uuid4()), role="pulsing", model="m", root="/repo", run_id="wf",
                      channel_id=None, script=None, notes=[], lease_holder="w1")
    app.save(session)
    app.close()
    with sqlite3.connect(db) as connection:
        [(state,)] = connection.execute("SELECT state FROM stored_events WHERE topic LIKE '%Session.Started'")
        old = json.loads(state)
        assert old.pop("lease_holder") == "w1"
        connection.execute("UPDATE stored_events SET state = ? WHERE topic LIKE '%Session.Started'",
                           (json.dumps(old).encode(),))
    app = SessionApplication(env=env)
    again = app.get_session(str(session.id))
    app.close()
    assert again.lease_holder is None
