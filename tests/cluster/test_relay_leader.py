"""Two writers on one PostgreSQL store, each with its own relay: one relays at a time, nothing doubled or skipped.

Runs when a PostgreSQL server answers (see ``tests/conftest.py``); skipped, saying so, otherwise.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from autarch.contracts.workflows import CreateWorkflow
from autarch.runtime.cancel import cancel_and_wait
from autarch.runtime.eventstore import event_store_env
from autarch.runtime.relay import EventRelay
from autarch.runtime.relay_leader import LeadingRelay, store_key
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.workflow.views import to_contract

from ..conftest import postgres_dsn
from .stream_check import relayed_ids

DSN = postgres_dsn()
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(DSN is None, reason="no PostgreSQL server answers (set AUTARCH_TEST_POSTGRES_URL); skipped"),
]


@pytest.fixture
def pg_env(data_dir, monkeypatch):
    import psycopg

    monkeypatch.delenv("PERSISTENCE_MODULE", raising=False)
    schema = f"autarch_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield event_store_env(Settings(data_dir=str(data_dir), postgres_url=f"{DSN}?schema={schema}"), "orchestrator")
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def _writer(app: WorkflowApplication, relay: LeadingRelay, count: int, tag: str) -> list[str]:
    ids = []
    for i in range(count):
        command = CreateWorkflow(workflow_id=str(uuid.uuid4()), title=f"{tag} {i}", request="r", repo="/r")
        workflow, _ = app.new_workflow(command)
        await asyncio.to_thread(app.save, workflow)
        relay.wake()
        ids.append(command.workflow_id)
        await asyncio.sleep(0.005)
    return ids


async def _two_writers(nc, pg_env, *, poll: float, ttl: float) -> tuple[list[WorkflowApplication],
                                                                         list[LeadingRelay]]:
    """Two applications on one store, each with its relay contending for the store's relay lease."""
    apps = [WorkflowApplication(env=pg_env), WorkflowApplication(env=pg_env)]
    relays = [
        await LeadingRelay.open(EventRelay(app=app, nc=nc, to_contract=to_contract, poll_interval=poll), nc,
                                store=store_key(pg_env), holder=f"writer-{i}", ttl=ttl)
        for i, app in enumerate(apps)
    ]
    return apps, relays


async def test_two_writers_one_relay_at_a_time_nothing_doubled_or_skipped(nc, pg_env):
    apps, relays = await _two_writers(nc, pg_env, poll=0.1, ttl=1.0)
    leaders_seen: list[int] = []
    dead: list[LeadingRelay] = []

    async def watch() -> None:
        while True:
            leaders_seen.append(sum(r.leading for r in relays if r not in dead))
            await asyncio.sleep(0.01)

    for relay in relays:
        relay.start()
    watcher = asyncio.create_task(watch())
    try:
        writes = [asyncio.create_task(_writer(app, relay, 80, f"w{i}")) for i, (app, relay) in
                  enumerate(zip(apps, relays, strict=True))]
        async with asyncio.timeout(20):  # a leader publishes what both write
            while not any(r.leading and r.relay.position() > 0 for r in relays):
                await asyncio.sleep(0.01)
        # The leader dies as if SIGKILLed: its relay stops mid-work and its lease is never released.
        leader = next(r for r in relays if r.leading)
        assert leader._task is not None and leader.relay._task is not None
        await cancel_and_wait([leader._task, leader.relay._task])
        leader._task = leader.relay._task = None
        dead.append(leader)
        await asyncio.gather(*writes)
        survivor = next(r for r in relays if r is not leader)
        for _ in range(100):  # the survivor takes over after the dead leader's TTL and catches up
            if survivor.leading and survivor.relay.position() == apps[0].recorder.max_notification_id():
                break
            await asyncio.sleep(0.1)
        assert survivor.leading
    finally:
        watcher.cancel()
        for relay in relays:
            if relay not in dead:
                await relay.stop()
    stored = apps[0].recorder.select_notifications(start=1, limit=10_000)
    store_id = stored[0].originator_id.hex[:12]
    on_stream = await relayed_ids(nc, f"orchestrator:{store_id}:")
    expected = {f"orchestrator:{store_id}:{n.id}" for n in stored}
    assert len(stored) >= 160
    assert set(on_stream) == expected, "an event of the store is missing from the stream (or one is foreign)"
    assert max(on_stream.values()) == 1, "an event is on the stream twice"
    assert max(leaders_seen) == 1, "two relays led at once"
    for app in apps:
        app.close()


async def test_a_writer_that_does_not_lead_wakes_the_leading_relay(nc, pg_env):
    """Events saved by a writer whose relay waits go out at once, not at the leader's next poll (30 s here)."""
    apps, relays = await _two_writers(nc, pg_env, poll=30, ttl=5.0)
    try:
        # One workflow saved before any relay runs: the leader's first round publishes it, and is then over.
        workflow, _ = apps[0].new_workflow(CreateWorkflow(workflow_id=str(uuid.uuid4()), title="before", request="r",
                                                          repo="/r"))
        await asyncio.to_thread(apps[0].save, workflow)
        first = apps[0].recorder.max_notification_id()
        for relay in relays:
            relay.start()
        for _ in range(100):
            if any(r.leading for r in relays):
                break
            await asyncio.sleep(0.05)
        leader = next(r for r in relays if r.leading)
        follower = next(r for r in relays if r is not leader)
        for _ in range(100):  # the leader's first round is over: it waits for a wake or its next poll
            if leader.relay.position() >= first:
                break
            await asyncio.sleep(0.05)
        assert leader.relay.position() >= first, "the leader's first round did not publish what was there before"
        for i in range(3):
            ids = await _writer(follower.relay.app, follower, 1, f"follower {i}")  # saves, then wakes
            last = follower.relay.app.recorder.max_notification_id()
            for _ in range(40):
                if leader.relay.position() >= last:
                    break
                await asyncio.sleep(0.05)
            assert leader.relay.position() >= last, f"the event of {ids[0]} waited for the leader's poll"
    finally:
        for relay in relays:
            await relay.stop()
        for app in apps:
            app.close()
