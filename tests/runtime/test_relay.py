"""The relay across crashes at every point: no event lost, none published twice."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from autarch.contracts import subjects
from autarch.contracts.workflows import CreateWorkflow
from autarch.runtime.relay import EventRelay
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.workflow.views import to_contract


class Crash(Exception):
    """Stands for the process dying at this exact point."""


def _app(path) -> WorkflowApplication:
    # The embedded default's store: commits without fsync, the relay syncing the log before it publishes.
    return WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(path)})


def _record(app: WorkflowApplication, n: int) -> list[str]:
    ids = []
    for i in range(n):
        wf, _ = app.new_workflow(CreateWorkflow(workflow_id=str(uuid.uuid4()), title=f"w{i}", request="r", repo="/r"))
        app.save(wf)
        ids.append(str(wf.id))
    return ids


async def _published_ids(nc, ids: list[str]) -> list[str]:
    """Workflow ids of every workflow:created on the stream for ``ids``, in stream order (duplicates kept)."""
    wanted = set(ids)
    sub = await nc.jetstream().subscribe(
        subjects.EVENTS_ALL, ordered_consumer=True, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    )
    found: list[Any] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except Exception:
                return found
            wf = msg.subject.split(".")[2]
            if wf in wanted:
                found.append(wf)
    finally:
        await sub.unsubscribe()


async def test_crash_after_publish_before_position_save_publishes_nothing_twice(nc, tmp_path):
    app = _app(tmp_path / "events.sqlite")
    ids = _record(app, 20)
    relay = EventRelay(app=app, nc=nc, to_contract=to_contract, batch=8)
    recorder = relay._recorder()
    original = recorder.insert_tracking

    def crash(_tracking):
        raise Crash

    recorder.insert_tracking = crash
    with pytest.raises(Crash):
        await relay.publish_pending()  # the first 8 are on the stream, the position is not saved
    recorder.insert_tracking = original
    assert relay.position() == 0

    restarted = EventRelay(app=_app(tmp_path / "events.sqlite"), nc=nc, to_contract=to_contract, batch=8)
    while await restarted.publish_pending():
        pass
    assert restarted.position() == 20
    assert await _published_ids(nc, ids) == ids  # every event once, in store order


async def test_crash_before_publish_loses_nothing(nc, tmp_path):
    app = _app(tmp_path / "events.sqlite")
    ids = _record(app, 5)
    # The process died right after saving: no relay ever ran. A new one publishes everything.
    restarted = EventRelay(app=_app(tmp_path / "events.sqlite"), nc=nc, to_contract=to_contract)
    await restarted.publish_pending()
    assert await _published_ids(nc, ids) == ids


async def test_crash_midway_through_a_batch_resumes_after_the_acknowledged_part(nc, tmp_path):
    app = _app(tmp_path / "events.sqlite")
    ids = _record(app, 10)
    relay = EventRelay(app=app, nc=nc, to_contract=to_contract, batch=4)
    await relay.publish_pending()  # 4 published and tracked
    assert relay.position() == 4
    more = _record(app, 3)
    restarted = EventRelay(app=_app(tmp_path / "events.sqlite"), nc=nc, to_contract=to_contract, batch=4)
    while await restarted.publish_pending():
        pass
    assert await _published_ids(nc, ids + more) == ids + more


async def test_a_fresh_store_on_an_old_stream_is_not_taken_for_duplicates(nc, tmp_path):
    first = _app(tmp_path / "a.sqlite")
    ids_a = _record(first, 3)
    await EventRelay(app=first, nc=nc, to_contract=to_contract).publish_pending()
    second = _app(tmp_path / "b.sqlite")  # notification ids start at 1 again
    ids_b = _record(second, 3)
    await EventRelay(app=second, nc=nc, to_contract=to_contract).publish_pending()
    assert await _published_ids(nc, ids_a + ids_b) == ids_a + ids_b


async def test_rounds_of_publishing_leave_no_subscription_behind(nc, tmp_path):
    # Each round acknowledged through a JetStream context of its own left that context's ack inbox subscribed
    # for good: a long loop session's relay held thousands, in its process and in the NATS server.
    app = _app(tmp_path / "events.sqlite")
    relay = EventRelay(app=app, nc=nc, to_contract=to_contract, batch=1)
    ids = _record(app, 1)
    await relay.publish_pending()
    after_first = len(nc._subs)
    for _ in range(10):
        ids += _record(app, 1)
        assert await relay.publish_pending() == 1
    assert len(nc._subs) == after_first
    assert await _published_ids(nc, ids) == ids
