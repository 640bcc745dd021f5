"""The orchestrator service in-process over a real nats-server: commands, queries, events, restart."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import AnyEvent, WorkflowCreated
from autarch.contracts.workflows import (
    CreateWorkflow,
    GetWorkflow,
    ListWorkflows,
    ReplayedWorkflow,
    ReplayWorkflow,
    WorkflowList,
    WorkflowView,
)
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.service import start

ORCH = "orchestrator"


def _create(**overrides: object) -> CreateWorkflow:
    fields: dict[str, object] = {"workflow_id": str(uuid.uuid4()), "title": "JWT", "request": "add JWT validation",
                                 "repo": "/tmp/repo"}
    fields.update(overrides)
    return CreateWorkflow(**fields)  # type: ignore[arg-type]  # a plain dict of the fields, overridden per test


async def _stream_events(nc, workflow_id: str, *, expect: int, timeout: float = 5.0) -> list[tuple[int, Any, Any]]:
    sub = await nc.jetstream().subscribe(
        subjects.run_events(workflow_id),
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    got: list[tuple[int, Any, Any]] = []
    try:
        while len(got) < expect:
            msg = await sub.next_msg(timeout=timeout)
            got.append((msg.metadata.sequence.stream, msgspec.json.decode(msg.data, type=AnyEvent), msg.headers))
    finally:
        await sub.unsubscribe()
    return got


@pytest.fixture
async def orchestrator(nc, data_dir):
    settings = Settings(data_dir=str(data_dir), drive_workflows=False)
    stop = await start(nc, settings)
    yield settings
    await stop()


async def test_create_records_an_event_that_reaches_the_stream(nc, orchestrator):
    cmd = _create()
    view = await request(nc, subjects.request(ORCH, "create_workflow"), cmd, WorkflowView)
    assert (view.id, view.stage, view.version, view.base_branch) == (cmd.workflow_id, "scoping", 1, "main")
    [(_seq, event, headers)] = await _stream_events(nc, cmd.workflow_id, expect=1)
    assert isinstance(event, WorkflowCreated)
    assert (event.title, event.request, event.repo) == (cmd.title, cmd.request, cmd.repo)
    assert headers["Nats-Msg-Id"].startswith("orchestrator:")
    assert headers["Autarch-Event"] == "workflow:created"


async def test_create_is_idempotent_on_workflow_id(nc, orchestrator):
    cmd = _create()
    first = await request(nc, subjects.request(ORCH, "create_workflow"), cmd, WorkflowView)
    again = await request(nc, subjects.request(ORCH, "create_workflow"), cmd, WorkflowView)
    assert first == again
    listed = await request(nc, subjects.request(ORCH, "list_workflows"), ListWorkflows(), WorkflowList)
    assert [w.id for w in listed.items].count(cmd.workflow_id) == 1
    # A marker recorded after the repeat: another workflow's creation. The relay publishes in the order events
    # were recorded, so once the marker is in the stream a second event of the first workflow would be there too.
    marker = _create()
    await request(nc, subjects.request(ORCH, "create_workflow"), marker, WorkflowView)
    await _stream_events(nc, marker.workflow_id, expect=1)
    sub = await nc.jetstream().subscribe(subjects.run_events(cmd.workflow_id), ordered_consumer=True,
                                         config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
    try:
        first = await sub.next_msg(timeout=5)
    finally:
        await sub.unsubscribe()
    assert isinstance(msgspec.json.decode(first.data, type=AnyEvent), WorkflowCreated)
    assert first.metadata.num_pending == 0  # exactly one event of the first workflow was distributed


async def test_same_id_with_other_fields_is_a_conflict(nc, orchestrator):
    cmd = _create()
    await request(nc, subjects.request(ORCH, "create_workflow"), cmd, WorkflowView)
    with pytest.raises(RemoteError) as err:
        other = _create(workflow_id=cmd.workflow_id, title="other")
        await request(nc, subjects.request(ORCH, "create_workflow"), other, WorkflowView)
    assert err.value.code == ErrorCode.CONFLICT
    view = await request(nc, subjects.request(ORCH, "get_workflow"), GetWorkflow(workflow_id=cmd.workflow_id),
                         WorkflowView)
    assert view.title == "JWT"


async def test_unknown_workflow_is_not_found(nc, orchestrator):
    missing = str(uuid.uuid4())
    with pytest.raises(RemoteError) as err:
        await request(nc, subjects.request(ORCH, "get_workflow"), GetWorkflow(workflow_id=missing), WorkflowView)
    assert err.value.code == ErrorCode.NOT_FOUND
    with pytest.raises(RemoteError) as err:
        await request(nc, subjects.request(ORCH, "replay_workflow"), ReplayWorkflow(workflow_id=missing),
                      ReplayedWorkflow)
    assert err.value.code == ErrorCode.NOT_FOUND


@pytest.mark.parametrize(
    "payload",
    [
        b"garbage",
        b"[]",
        b'{"title": "x"}',
        b'{"workflow_id": "not-a-uuid", "title": "t", "request": "r", "repo": "/x"}',
        b'{"workflow_id": "00000000-0000-4000-8000-000000000000", "title": "", "request": "r", "repo": "/x"}',
        b'{"workflow_id": "00000000-0000-4000-8000-000000000000", "title": 5, "request": "r", "repo": "/x"}',
    ],
)
async def test_garbage_on_the_create_subject_records_nothing(nc, orchestrator, payload):
    before = await request(nc, subjects.request(ORCH, "list_workflows"), ListWorkflows(), WorkflowList)
    msg = await nc.request(subjects.request(ORCH, "create_workflow"), payload, timeout=2)
    assert msg.headers["Autarch-Error"] == ErrorCode.BAD_REQUEST
    after = await request(nc, subjects.request(ORCH, "list_workflows"), ListWorkflows(), WorkflowList)
    assert after.total == before.total


async def test_state_is_rebuilt_from_the_store_after_a_restart(nc, data_dir):
    settings = Settings(data_dir=str(data_dir), drive_workflows=False)
    stop = await start(nc, settings)
    created = [await request(nc, subjects.request(ORCH, "create_workflow"), _create(title=f"w{i}"), WorkflowView)
               for i in range(5)]
    await stop()
    stop = await start(nc, settings)
    try:
        listed = await request(nc, subjects.request(ORCH, "list_workflows"), ListWorkflows(), WorkflowList)
        assert [w.id for w in listed.items] == [w.id for w in created]
        assert listed.items == created
        page = await request(nc, subjects.request(ORCH, "list_workflows"), ListWorkflows(limit=2, offset=1),
                             WorkflowList)
        assert [w.title for w in page.items] == ["w1", "w2"] and page.total == 5
    finally:
        await stop()


async def test_replay_at_n_gives_the_state_after_n_events(nc, orchestrator):
    from autarch.runtime.eventstore import event_store_env
    from autarch.services.orchestrator.application import WorkflowApplication

    cmd = _create()
    await request(nc, subjects.request(ORCH, "create_workflow"), cmd, WorkflowView)
    # A second event on the same workflow, recorded through the domain model (the lifecycle that
    # produces errors comes with later issues; the aggregate already records them).
    app = WorkflowApplication(env=event_store_env(orchestrator, "orchestrator"))
    wf = app.get_workflow(cmd.workflow_id)
    wf.record_error(stage="scoping", message="model unavailable")
    app.save(wf)
    app.close()
    full = await request(nc, subjects.request(ORCH, "replay_workflow"), ReplayWorkflow(workflow_id=cmd.workflow_id),
                         ReplayedWorkflow)
    assert (full.events_applied, full.events_total, full.workflow.last_error) == (2, 2, "model unavailable")
    first = await request(nc, subjects.request(ORCH, "replay_workflow"),
                          ReplayWorkflow(workflow_id=cmd.workflow_id, at=1), ReplayedWorkflow)
    assert (first.events_applied, first.events_total, first.workflow.last_error) == (1, 2, None)
