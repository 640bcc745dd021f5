"""The orchestrator on PostgreSQL: the same behaviour as on SQLite. Runs when a server answers."""

from __future__ import annotations

import uuid

import pytest

from autarch.contracts import subjects
from autarch.contracts.workflows import CreateWorkflow, ListWorkflows, WorkflowList, WorkflowView
from autarch.runtime.relay import EventRelay
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.replay import replay_from_store
from autarch.services.orchestrator.service import start
from autarch.services.orchestrator.workflow.views import to_contract

from ..conftest import postgres_dsn

DSN = postgres_dsn()
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(DSN is None, reason="no PostgreSQL server answers (set AUTARCH_TEST_POSTGRES_URL); skipped"),
]


@pytest.fixture
def pg_settings(data_dir, monkeypatch):
    import psycopg

    monkeypatch.delenv("PERSISTENCE_MODULE", raising=False)
    schema = f"autarch_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield Settings(data_dir=str(data_dir), postgres_url=f"{DSN}?schema={schema}", drive_workflows=False)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def test_workflows_survive_a_restart_and_replay_on_postgres(nc, pg_settings):
    stop = await start(nc, pg_settings)
    created = []
    for i in range(3):
        cmd = CreateWorkflow(workflow_id=str(uuid.uuid4()), title=f"pg {i}", request="r", repo="/r")
        created.append(await request(nc, subjects.request("orchestrator", "create_workflow"), cmd, WorkflowView))
    await stop()
    # Nothing in the data dir: the state lives in PostgreSQL.
    assert not (pg_settings.data_path / "orchestrator" / "events.sqlite").exists()
    stop = await start(nc, pg_settings)
    try:
        listed = await request(nc, subjects.request("orchestrator", "list_workflows"), ListWorkflows(), WorkflowList)
        assert listed.items == created
    finally:
        await stop()
    assert replay_from_store(pg_settings, created[1].id).workflow == created[1]


async def test_relay_position_is_kept_in_postgres(nc, pg_settings):
    from autarch.runtime.eventstore import event_store_env

    app = WorkflowApplication(env=event_store_env(pg_settings, "orchestrator"))
    for i in range(4):
        wf, _ = app.new_workflow(CreateWorkflow(workflow_id=str(uuid.uuid4()), title=f"{i}", request="r", repo="/r"))
        app.save(wf)
    relay = EventRelay(app=app, nc=nc, to_contract=to_contract)
    assert await relay.publish_pending() == 4
    again = EventRelay(app=WorkflowApplication(env=event_store_env(pg_settings, "orchestrator")), nc=nc,
                       to_contract=to_contract)
    assert again.position() == 4
    assert await again.publish_pending() == 0
