"""The stream checked against the store: a forged message, a deleted one, a store rewritten with its chain."""

from __future__ import annotations

import asyncio

import pytest

from autarch.contracts import subjects
from autarch.runtime.audit import AuditReport, read_stream
from autarch.runtime.chain import link
from autarch.runtime.relay import EventRelay, store_id_of
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.audit import verify_orchestrator
from autarch.services.orchestrator.wire import WireEvents

from .stores import Store, demo_log


@pytest.fixture
def store(tmp_path) -> Store:
    """The stream's checks do not depend on the store: SQLite here (both stores' rows: test_store_tampering.py)."""
    data = tmp_path / "data"
    data.mkdir()
    return Store(Settings(data_dir=str(data)), "sqlite")


@pytest.fixture
async def published(store: Store, nc):
    """A demo-like log, every event of it published by the relay."""
    app = store.app()
    ids = demo_log(app, workflows=2)
    relay = EventRelay(app=app, nc=nc, to_contract=WireEvents(app), checkpoint_interval=0)
    while await relay.publish_pending():
        pass
    yield app, ids
    app.close()


def _tampering(report: AuditReport) -> list[tuple[str, str, int | None]]:
    return sorted((f.kind, f.aggregate, f.version) for f in report.findings if f.tampering)


async def _messages(nc, workflow: str):
    return await read_stream(nc, subjects.EVENTS_STREAM, subjects.run_events(workflow))


async def test_a_published_clean_log_verifies_against_the_stream(published, nc):
    app, ids = published
    for workflow in ids:
        report = await verify_orchestrator(app, nc, workflow)
        assert report.ok, [f.line() for f in report.findings]
        assert (report.stream_messages, report.events, report.checkpoints) == (6, 6, 1)
    whole = await verify_orchestrator(app, nc, None)  # the whole store against the whole (shared) stream
    assert whole.ok and whole.stream_messages == 12


async def test_a_forged_message_is_named_with_its_aggregate_and_stream_sequence(published, nc):
    app, ids = published
    real = (await _messages(nc, ids[0]))[2]
    js = nc.jetstream()
    bare = await js.publish(real.subject, real.data.replace(b"note 1", b"note Y"))
    store_id = store_id_of(app)
    claiming = await js.publish(real.subject, real.data, headers={"Nats-Msg-Id": f"orchestrator:{store_id}:999"})
    report = await verify_orchestrator(app, nc, ids[0])
    forged = sorted((f.aggregate, f.stream_seq) for f in report.findings if f.kind == "forged")
    assert forged == [(ids[0], bare.seq), (ids[0], claiming.seq)]
    assert _tampering(report) == [("forged", ids[0], None)] * 2


async def test_a_deleted_stream_message_is_named_with_its_aggregate_and_version(published, nc):
    app, ids = published
    messages = await _messages(nc, ids[1])
    await nc.jetstream().delete_msg(subjects.EVENTS_STREAM, messages[3].seq)
    report = await verify_orchestrator(app, nc, ids[1])
    assert _tampering(report) == [("missing_from_stream", ids[1], 4)]


async def test_a_store_rewritten_with_its_chain_is_caught_by_the_stream(published, nc, store):
    app, ids = published
    workflow = ids[0]
    # Someone with write access edits an event and recomputes every link after it: the chain alone holds again.
    store.set_state(workflow, 3, store.state(workflow, 3).replace(b"note 1", b"note Z"))
    prev = bytes(store.execute(f"SELECT digest FROM {store.chain} WHERE originator_id=? AND originator_version=2",
                               store.key(workflow))[0][0])
    for version in range(3, 7):
        [(topic, state)] = store.execute(f"SELECT topic, state FROM {store.events} WHERE originator_id=? "
                                         "AND originator_version=?", store.key(workflow), version)
        prev = link(prev, workflow, version, topic, bytes(state))
        store.execute(f"UPDATE {store.chain} SET digest=? WHERE originator_id=? AND originator_version=?",
                      prev, store.key(workflow), version)
    store_only = await verify_orchestrator(app, None, workflow)
    # The chain holds; only the checkpoint (the head, version 6) disagrees. The stream names every rewritten link.
    assert [(f.kind, f.version) for f in store_only.findings] == [("rewritten", 6)]
    report = await verify_orchestrator(app, nc, workflow)
    assert ("differs_on_stream", workflow, 3) in _tampering(report)
    assert {v for kind, _, v in _tampering(report) if kind == "rewritten"} == {3, 4, 5, 6}


async def test_the_relay_checkpoints_at_most_once_per_interval_and_on_stopping(store, nc):
    app = store.app()
    try:
        relay = EventRelay(app=app, nc=nc, to_contract=WireEvents(app), checkpoint_interval=3600, poll_interval=0.05)
        relay.start()
        [first] = demo_log(app, workflows=1)
        relay.wake()
        deadline = asyncio.get_running_loop().time() + 30
        while not app.recorder.checkpoints() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        [second] = demo_log(app, workflows=1)
        relay.wake()
        while relay.position() < app.recorder.max_notification_id() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert len(app.recorder.checkpoints()) == 1  # within the interval: none more while running
        await relay.stop()
        checkpoints = app.recorder.checkpoints()
        assert len(checkpoints) == 2 and second in checkpoints[1].heads  # the rest, covered on stopping
        assert checkpoints[1].position == app.recorder.max_notification_id()
        assert first in checkpoints[0].heads
    finally:
        app.close()
