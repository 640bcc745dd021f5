"""Rows changed behind the store's back, on SQLite and PostgreSQL: each change named with its aggregate and version."""

from __future__ import annotations

import uuid

import pytest

from autarch.runtime.audit import AuditReport, verify_store
from autarch.runtime.chain import record_checkpoint
from autarch.runtime.eventstore import event_store_env
from autarch.services.orchestrator.application import WorkflowApplication

from .stores import Store, demo_log


def _verify(s: Store, ids: list[str] | None = None) -> AuditReport:
    app = s.app()
    try:
        report = AuditReport(store=app.name)
        verify_store(app, report, ids)
        return report
    finally:
        app.close()


def _tampering(report: AuditReport) -> list[tuple[str, str, int | None]]:
    return sorted((f.kind, f.aggregate, f.version) for f in report.findings if f.tampering)


def _recorded(s: Store) -> list[str]:
    app = s.app()
    try:
        ids = demo_log(app)
        record_checkpoint(app.recorder, app.recorder.max_notification_id())  # type: ignore[arg-type]  # a ChainedRecorder, holding events
        return ids
    finally:
        app.close()


def test_a_clean_log_verifies_with_every_event_chained(store):
    ids = _recorded(store)
    report = _verify(store)
    assert report.ok, [f.line() for f in report.findings]
    assert (report.aggregates, report.events, report.chained, report.checkpoints) == (3, 18, 18, 1)
    assert {a: v for a, (v, _) in report.heads.items()} == dict.fromkeys(ids, 6)


def test_an_edited_event_is_named(store):
    ids = _recorded(store)
    state = store.state(ids[1], 3)
    store.set_state(ids[1], 3, state.replace(b"note 1", b"note X"))
    assert _tampering(_verify(store)) == [("edited", ids[1], 3)]


def test_a_removed_event_is_named_in_the_middle_and_at_the_end(store):
    ids = _recorded(store)
    store.delete(ids[0], 2)
    store.delete(ids[2], 6, link_too=True)  # the last event and its link: only the checkpoint remembers it
    assert _tampering(_verify(store)) == sorted([("removed", ids[0], 2), ("removed", ids[2], 6)])


def test_two_swapped_events_are_named_as_reordered(store):
    ids = _recorded(store)
    store.swap(ids[1], 2, 4)
    report = _verify(store)
    assert _tampering(report) == [("reordered", ids[1], 2), ("reordered", ids[1], 4)]
    assert {f.detail for f in report.findings} == {"holds the event recorded as version 4",
                                                   "holds the event recorded as version 2"}


def test_an_inserted_event_is_named(store):
    ids = _recorded(store)
    app = store.app()
    topic = app.recorder.select_events(uuid.UUID(ids[0]))[-1].topic
    app.close()
    store.insert(ids[0], 7, topic, store.state(ids[0], 6))
    assert _tampering(_verify(store)) == [("inserted", ids[0], 7)]


def test_events_recorded_before_the_chain_are_unchained_not_tampered(store):
    # A store written before chaining existed: eventsourcing's own recorder, no links.
    env = event_store_env(store.settings, "orchestrator")
    env.pop("APPLICATION_RECORDER_TOPIC", None)
    if store.kind == "sqlite":
        env["PERSISTENCE_MODULE"] = "eventsourcing.sqlite"
    old = WorkflowApplication(env=env)
    [workflow] = demo_log(old, workflows=1, notes=1)
    old.close()
    app = store.app()  # then upgraded: the next events are chained
    try:
        wf = app.get_workflow(workflow)
        for i in range(2):
            wf.take_note(session_id="s", note=f"chained {i}", key=f"c{i}")
            app.save(wf)
    finally:
        app.close()
    report = _verify(store)
    assert report.ok, [f.line() for f in report.findings]
    assert [(f.kind, f.aggregate) for f in report.findings] == [("unchained", workflow)]
    assert (report.events, report.chained, report.heads[workflow][0]) == (5, 2, 5)


def test_the_chain_continues_across_a_reopened_store(store):
    ids = _recorded(store)
    app = store.app()  # a fresh process: no kept heads, the previous link read from the store
    try:
        wf = app.get_workflow(ids[0])
        wf.take_note(session_id="s", note="after a restart", key="k-restart")
        app.save(wf)
    finally:
        app.close()
    report = _verify(store)
    assert report.ok and report.heads[ids[0]][0] == 7


def test_checkpoints_chain_and_an_edited_one_is_named(store):
    ids = _recorded(store)
    app = store.app()
    try:
        wf = app.get_workflow(ids[2])
        wf.take_note(session_id="s", note="later", key="k-later")
        app.save(wf)
        second = record_checkpoint(app.recorder, app.recorder.max_notification_id())
        assert second is not None and second.seq == 2 and list(second.heads) == [ids[2]]
        assert record_checkpoint(app.recorder, app.recorder.max_notification_id()) is None  # nothing new
    finally:
        app.close()
    assert _verify(store).ok
    table = f'"{store.schema}".orchestrator_events_checkpoints' if store.kind == "postgres" else \
        "stored_events_checkpoints"
    [(payload,)] = store.execute(f"SELECT payload FROM {table} WHERE seq=1")
    store.execute(f"UPDATE {table} SET payload=? WHERE seq=1", payload.replace('"position":', '"position":1'))
    assert [(f.kind, f.detail) for f in _verify(store).findings] == [
        ("checkpoint", "checkpoint 1 does not hold its digest or its chain to the previous checkpoint")]


def test_two_writers_of_one_store_keep_every_chain_whole(store):
    # Two processes on one store (partitions on PostgreSQL, a standby taking over): each keeps the heads it wrote,
    # and a head another writer moved is read from the store, never taken from what it kept.
    first, second = store.app(), store.app()
    try:
        [a, b] = demo_log(first, workflows=2, notes=1)
        stale = first.get_workflow(a)  # read before the second writer's note
        one = second.get_workflow(a)
        one.take_note(session_id="s", note="by the second writer", key="k2")
        second.save(one)
        stale.take_note(session_id="s", note="lost race", key="k3")
        with pytest.raises(Exception):  # noqa: B017 - the store's own integrity error, whichever store
            first.save(stale)
        again, other = first.get_workflow(a), first.get_workflow(b)
        for i in range(2):  # two aggregates, several events each, in one transaction
            again.take_note(session_id="s", note=f"after {i}", key=f"a{i}")
            other.take_note(session_id="s", note=f"beside {i}", key=f"b{i}")
        first.save(again, other)
    finally:
        first.close()
        second.close()
    report = _verify(store)
    assert report.ok, [f.line() for f in report.findings]
    assert (report.heads[a][0], report.heads[b][0]) == (6, 5)
