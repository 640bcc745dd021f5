"""Two agent runner instances on one PostgreSQL store: one leads, the other waits; the budget a workflow spent under
the leader still binds after the standby takes over, because the totals are a projection of the shared store's
events (each recorded model reply's usage and cost), not a count kept by a process."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from autarch.contracts.agents import TurnAccepted
from autarch.runtime.bus import connect
from autarch.runtime.errors import RemoteError
from autarch.runtime.standby import exclusive
from autarch.services.agent_runner.service import start as start_runner
from tests.agent_runner import conftest as runner_fixtures
from tests.agent_runner.conftest import runner_settings, serve_tools, start_session, wait_turn
from tests.conftest import postgres_dsn

# The agent runner tests' real parts: the scripted model with their scenario and a repository. Their tools service
# is package-scoped in tests/agent_runner: imported here it would outlive this package and stay in the "tools"
# queue group, answering later packages' calls from another store. This module starts and stops its own.
scripted, repo = runner_fixtures.scripted, runner_fixtures.repo


@pytest.fixture(scope="module")
def tools_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tools-data")


@pytest.fixture(scope="module")
async def tools(nats_server, tools_data_dir: Path) -> AsyncIterator[Path]:
    async for data_dir in serve_tools(nats_server.url, tools_data_dir):
        yield data_dir

DSN = postgres_dsn()
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(DSN is None, reason="no PostgreSQL server answers (set AUTARCH_TEST_POSTGRES_URL); skipped"),
]


@pytest.fixture
def pg_url(monkeypatch):
    import psycopg

    monkeypatch.delenv("PERSISTENCE_MODULE", raising=False)
    schema = f"autarch_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield f"{DSN}?schema={schema}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def _instances(nc, service: str, wait: float = 0.5) -> list[dict]:
    """Every ``$SRV.PING`` answer of ``service`` within ``wait``."""
    answers: list[dict] = []
    inbox = nc.new_inbox()

    async def collect(msg: Msg) -> None:
        answers.append(json.loads(msg.data))

    sub = await nc.subscribe(inbox, cb=collect)
    await nc.publish(f"$SRV.PING.{service}", b"", reply=inbox)
    await asyncio.sleep(wait)  # a collection window: nothing marks the last instance's answer
    await sub.unsubscribe()
    return answers


async def _start_when_served(nc, timeout: float = 20, **fields) -> TurnAccepted:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await start_session(nc, **fields)
        except RemoteError as exc:  # nobody serves yet: the standby is taking over
            if time.monotonic() > deadline:
                raise AssertionError(f"no runner took over within {timeout}s: {exc}") from exc
            await asyncio.sleep(0.2)


async def test_the_standby_inherits_the_budget_its_leader_spent(nats_server, nc, scripted, tools, repo, tmp_path,
                                                                pg_url):
    def settings(instance: str):
        return runner_settings(tmp_path / instance, scripted, postgres_url=pg_url, workflow_cost_budget=0.000001,
                               instance=instance, leader_ttl=2.0)

    first, second = [await connect(nats_server.url, name=name) for name in ("runner-1", "runner-2")]
    stop_first = await exclusive("agent_runner", start_runner)(first, settings("agent_runner-1"))
    workflow_id = str(uuid.uuid4())
    accepted = await _start_when_served(nc, role="discussion", script="budget", root=repo, workflow_id=workflow_id)
    stop_second = await exclusive("agent_runner", start_runner)(second, settings("agent_runner-2"))
    try:
        [turn] = (await wait_turn(nc, accepted.session_id, accepted.turn_id)).turns
        assert turn.outcome.kind == "budget_exceeded" and turn.model_calls == 1
        assert len(await _instances(nc, "agent_runner")) == 1, "the standby serves beside its leader"

        await stop_first()  # the leader goes away; the standby takes its lease and rebuilds from PostgreSQL
        again = await _start_when_served(nc, role="discussion", script="budget", root=repo, workflow_id=workflow_id)
        [turn] = (await wait_turn(nc, again.session_id, again.turn_id)).turns
        assert turn.outcome.kind == "budget_exceeded", turn.outcome
        assert turn.model_calls == 0, "the new leader called the model on a workflow already over its budget"
        assert len(await _instances(nc, "agent_runner")) == 1
    finally:
        await stop_second()
        await stop_first()
        for client in (first, second):
            await client.drain()
