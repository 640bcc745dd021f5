"""Snapshots (``runtime/snapshots.py``): a snapshot and the events after it rebuild exactly what all the events do.

For every aggregate the orchestrator keeps (workflow, loop session, epic, mailbox), on SQLite and on PostgreSQL
(when a server answers): a snapshot taken at each version, plus the events after it, equals the full replay, old
event shapes included; a snapshot that is missing, failed to be written or lags its events loses nothing; one
written by an earlier shape of the class (an attribute added since) or unreadable falls back to the full replay.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import uuid
from array import array
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import pytest
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate

from autarch.runtime.aggregates import load_as
from autarch.runtime.snapshots import Snapshots, Unsnapshottable, decode_state, encode_state
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.book import Book
from autarch.services.orchestrator.loop.model import Anchor, LoopSession
from autarch.services.orchestrator.mail.model import Mailbox, mailbox_id_for
from autarch.services.orchestrator.swarm.model import Swarm, swarm_id_for
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.writer import BatchedWriter

from ..conftest import postgres_dsn
from .test_moved_topics import _rewrite_to_earlier_topics
from .test_swarm_model import _bead
from .test_workflow_domain import PLAN, RESEARCH, SCOPE, card

AT = "2026-11-25T09:00:00+00:00"
DSN = postgres_dsn()


# --- stores ------------------------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_env(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[dict[str, str]]:
    """The environment of an orchestrator store: an embedded SQLite file, or a fresh PostgreSQL schema."""
    monkeypatch.delenv("PERSISTENCE_MODULE", raising=False)
    if request.param == "sqlite":
        yield {"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(tmp_path / "e.sqlite")}
        return
    if DSN is None:
        pytest.skip("no PostgreSQL server answers (set AUTARCH_TEST_POSTGRES_URL)")
    import psycopg

    from autarch.runtime.eventstore import _postgres_env

    schema = f"autarch_snap_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield _postgres_env(f"{DSN}?schema={schema}")
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _app(env: dict[str, str], every: int = 10**6) -> WorkflowApplication:
    return WorkflowApplication(env=env, snapshot_every=every)


def state(aggregate: Aggregate) -> dict[str, Any]:
    """Everything an aggregate holds (its id, version and times included), to compare two rebuilds."""
    transient = getattr(type(aggregate), "transient_attributes", ())  # this process's bookkeeping, not state
    return {k: v for k, v in vars(aggregate).items() if k != "_pending_events" and k not in transient}


# --- a history of each aggregate, saved one command at a time --------------------------------------------------

Steps = list[Callable[..., Any]]  # each takes the aggregate (some bind a loop's n as a default argument)


def workflow_history() -> tuple[Workflow, Steps]:
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/x", base_branch="main", branch=None,
                  script=None)
    steps: Steps = [
        lambda w: w.record_error(stage="scoping", message="first"),
        lambda w: w.submit_artifact("scoping", card("scoping", SCOPE)),
        lambda w: w.take_note(session_id="s1", note="remember", key="n1"),
        lambda w: w.approve(),
        lambda w: w.submit_artifact("research", card("research", RESEARCH)),
        lambda w: w.request_changes("deeper"),
        lambda w: w.submit_artifact("research", card("research", RESEARCH)),
        lambda w: w.approve(),
        lambda w: w.submit_artifact("planning", card("planning", PLAN)),
        lambda w: w.approve(),
        lambda w: w.record_baseline({"issue_type": "test", "source": "pytest", "pattern": "E1"}, key="b1"),
        lambda w: w.finish_execution(),
        lambda w: w.add_review_comment({"kind": "line", "severity": "minor", "category": "style",
                                              "description": "rename", "file_path": "a.py", "start_line": 1},
                                             key="c1"),
        lambda w: w.submit_artifact("review", card("review", {"recommendation": "reject", "summary": "one fix"})),
        lambda w: w.request_fix("fix it", None, limit=3),
    ]
    return wf, steps


def loop_history(iterations: int = 6) -> tuple[LoopSession, Steps]:
    session = LoopSession(session_id=str(uuid.uuid4()), project_name="p", project_path="/p", goal="g",
                          max_iterations=iterations, anchor_turn_id=None, branch_name="autarch/loop-x",
                          base_branch="main", context_strategy="prefetch",
                          notify=[{"kind": "webhook", "url": "http://127.0.0.1:9/hook"}], created_by="api",
                          script=None, created_at=AT, max_tokens=None, max_cost_usd=None, status="pending")
    steps: Steps = [lambda s: s.branch_prepared(branch="autarch/loop-x", worktree_path="/wt", base_commit="c0",
                                                repository_id="r1", at=AT)]
    for n in range(1, iterations + 1):
        signal = "COMPLETE" if n == iterations else "CONTINUE"
        steps += [
            lambda s: s.start_iteration(task_content="do it", pulse_worktree="/wt/i", base_commit="c",
                                        anchor=Anchor(strategy="temporal", turn_id="t", slice_turn_ids=["a", "b"]),
                                        context_tokens=10),
            lambda s, n=n: s.iteration_running(number=n, kickoff_turn_id=f"k{n}", at=AT),
            lambda s, n=n: s.take_note(agent_session_id="a", note=f"note {n}", key=f"k{n}"),
            lambda s, n=n, signal=signal: s.record_turn(
                n, turn_id=f"t{n}", ending="complete", signal=signal, signal_source="explicit", reason=None,
                output_summary="ok", output_full="ok!", commit_subject="feat: x", commit_body="", anchor_hint_next=None,
                anchor_hint_reason=None, tokens_used=100, cost_usd=0.01),
            lambda s, n=n: s.end_iteration(n, commit_hash=f"h{n}", files_changed=[f"f{n}.py"], no_progress_limit=3),
            lambda s, n=n: s.iteration_session_closed(number=n),
        ]
    steps.append(lambda s: s.worktree_removed_event())
    return session, steps


WID = "7d4c2f1e-8a9b-4c3d-9e2f-1a2b3c4d5e6f"


def swarm_history() -> tuple[Swarm, Steps]:
    swarm = Swarm(workflow_id=WID, mode="swarm", max_workers=2, at=AT,
                  beads=[_bead("a"), _bead("b", "a"), _bead("c", "a"), _bead("x")])
    held: dict[str, Any] = {}
    steps: Steps = [
        lambda s: s.join("w-one", "w1", "/wt/1"),
        lambda s: s.join("w-two", "w2", "/wt/2"),
        lambda s: held.update(a=s.claim("a", "w-one")),
        lambda s: s.begun(held["a"], "base0"),
        lambda s: s.leased(held["a"], ["a.py"]),
        lambda s: s.session_opened(held["a"], "turn-1"),
        lambda s: s.turn_handled(held["a"], "turn-2", "tool", summary="feat(a): a", nudge=None),
        lambda s: held.update(x=s.claim("x", "w-two")),
        lambda s: s.lease_conflict(held["x"], ["x.py"], ["someone"]),
        lambda s: s.committed(held["a"], "c1", ["a.py"]),
        lambda s: s.merged_as(held["a"], "m1"),
    ]
    return swarm, steps


def mailbox_history() -> tuple[Mailbox, Steps]:
    box = Mailbox(epic_id=WID)
    held: dict[str, Any] = {}
    steps: Steps = [
        lambda b: held.update(m=b.post(sender="AmberFalcon", to=["coordinator"], subject="Hi", body_md="Ready.",
                                       at=AT)),
        lambda b: b.reply(message_id=held["m"].message_id, sender="coordinator", body_md="Go."),
        lambda b: b.post(sender="coordinator", to=["AmberFalcon", "BlueHeron"], subject="All", body_md="Sync.",
                         topic="sync", at=AT),
        lambda b: b.deliver(agent="coordinator", message_ids=[held["m"].message_id]),
    ]
    return box, steps


HISTORIES: dict[str, Callable[[], tuple[Any, Steps]]] = {
    "workflow": workflow_history, "loop": loop_history, "swarm": swarm_history, "mailbox": mailbox_history}


def record(app: WorkflowApplication, name: str) -> tuple[type[Aggregate], UUID]:
    """Save the history of one aggregate of kind ``name`` one command at a time; its class and id."""
    aggregate, steps = HISTORIES[name]()
    app.save(aggregate)
    for step in steps:
        step(aggregate)
        app.save(aggregate)
    return type(aggregate), aggregate.id


# --- the tests ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(HISTORIES))
def test_a_snapshot_at_every_version_and_the_events_after_it_equal_the_full_replay(store_env, name: str) -> None:
    _resumes_at_every_version(store_env, name)


def test_a_loop_session_past_the_iterations_it_holds_resumes_from_a_snapshot_at_every_version(
        store_env, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its first iterations are dropped (their progress lines, versions and counts kept) before and after a snapshot.
    monkeypatch.setattr(LoopSession, "iterations_kept", 2)
    _resumes_at_every_version(store_env, "loop")


def _resumes_at_every_version(store_env: dict[str, str], name: str) -> None:
    app = _app(store_env)
    try:
        kind, aggregate_id = record(app, name)
        full = load_as(app, kind, aggregate_id)
        assert full.version >= 5
        for version in range(1, full.version + 1):
            at_version = load_as(app, kind, aggregate_id, version=version)
            assert app.snapshotter.take(at_version)
            resumed = app.load(kind, aggregate_id)
            assert state(resumed) == state(full), f"{name} from its snapshot at version {version}"
            # A rebuild up to a version reads the snapshot at or before it.
            assert state(app.load(kind, aggregate_id, version=version)) == state(at_version)
        # Only the newest snapshot is kept (the older ones are never read).
        assert len(list(app.snapshotter.store.get(aggregate_id))) == 1
    finally:
        app.close()


@pytest.mark.parametrize("name", list(HISTORIES))
def test_events_stored_under_earlier_shapes_resume_from_a_snapshot_as_they_replay(tmp_path: Path, name: str) -> None:
    path = tmp_path / "e.sqlite"
    env = {"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(path)}
    app = _app(env)
    kind, aggregate_id = record(app, name)
    app.close()
    # The topics of the modules the aggregates lived in before, and a loop session's start without its status (it
    # was recorded before sessions waited ``pending``: it was running from its start).
    assert _rewrite_to_earlier_topics(path)
    with sqlite3.connect(path) as db:
        for rowid, raw in db.execute("SELECT rowid, state FROM stored_events WHERE topic LIKE '%LoopSession.Started'"):
            old = json.loads(raw)
            del old["status"]
            db.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (json.dumps(old).encode(), rowid))
    app = _app(env)
    try:
        full = load_as(app, kind, aggregate_id)
        if name == "loop":
            assert isinstance(full, LoopSession)
            assert full.status == "complete" and full.iterations[0].status == "complete"
        for version in range(1, full.version + 1):
            app.snapshotter.take(load_as(app, kind, aggregate_id, version=version))
            assert state(app.load(kind, aggregate_id)) == state(full)
    finally:
        app.close()


async def test_snapshots_are_taken_every_n_events_by_the_book_and_a_failed_one_loses_nothing(store_env) -> None:
    app = _app(store_env, every=5)
    writer = BatchedWriter(app=app)
    writer.start()
    book: Book[LoopSession] = Book(app=app, writer=writer, kind=LoopSession, noun="loop session",
                                   id_field="session_id")
    session, steps = loop_history(8)
    sid = str(session.id)
    try:
        await book.save(sid, session)
        for step in steps[:20]:
            await book.change(sid, step)
        taken = list(app.snapshotter.store.get(session.id))
        assert [s.originator_version for s in taken] == [20]
        # The snapshot store fails from now on: every command still saves, and every rebuild is the full replay.
        put = app.snapshotter.store.put

        failures = 0

        def failing(*_: Any, **__: Any) -> None:
            nonlocal failures
            failures += 1
            raise OSError("disk full")

        app.snapshotter.store.put = failing  # type: ignore[method-assign]  # a full disk at the snapshot write
        for step in steps[20:]:
            await book.change(sid, step)
        full = load_as(app, LoopSession, session.id)
        assert full.status == "complete" and full.total_commits == 8
        tried, tried_at = failures, full.version
        assert 0 < tried <= (full.version - 20) // 5 + 1  # once per ``every`` events, not once per read
        for _ in range(3):
            assert state(book.rebuild(sid)) == state(full)
        assert [s.originator_version for s in app.snapshotter.store.get(session.id)] == [20]
        assert failures == tried
        app.snapshotter.store.put = put  # type: ignore[method-assign]  # the real put back
        # Once ``every`` more events are recorded after the failed attempt, a rebuild tries again, and succeeds.
        for n in range(5):
            def note(s: LoopSession, n: int = n) -> None:
                s.take_note(agent_session_id="a", note=f"late {n}", key=f"late{n}")

            await book.change(sid, note)
        full = load_as(app, LoopSession, session.id)
        assert state(book.rebuild(sid)) == state(full)
        (latest,) = app.snapshotter.store.get(session.id)
        assert latest.originator_version > tried_at
    finally:
        await writer.stop()
        app.close()


def test_a_crash_between_the_events_and_their_snapshot_loses_nothing(store_env) -> None:
    app = _app(store_env, every=4)
    try:
        session, steps = loop_history(3)
        app.save(session)
        for step in steps[:9]:
            step(session)
            app.save(session)
        app.snapshotter.take(load_as(app, LoopSession, session.id))  # a snapshot at version 10
        for step in steps[9:]:  # then events, and the process dies before their snapshot
            step(session)
            app.save(session)
        full = load_as(app, LoopSession, session.id)
        assert state(app.load(LoopSession, session.id)) == state(full)
        # No snapshot at all (the very first one never written): the same.
        other = _app(store_env, every=0)
        try:
            assert state(other.load(LoopSession, session.id)) == state(full)
        finally:
            other.close()
    finally:
        app.close()


def _rewrite_snapshot(app: WorkflowApplication, aggregate_id: UUID, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the stored snapshot of one aggregate as an earlier version of the code would have written it."""
    (snap,) = app.snapshotter.store.get(aggregate_id)
    change(snap.state)
    recorder = app.snapshotter.store.recorder
    with recorder.datastore.transaction(commit=True) as c:
        if "sqlite" in type(recorder).__module__:
            c.execute(f"DELETE FROM {recorder.events_table_name} WHERE originator_id=?", [aggregate_id.hex])
        else:
            from psycopg.sql import SQL, Identifier

            c.execute(SQL("DELETE FROM {}.{} WHERE originator_id = %s").format(
                Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name)), [aggregate_id])
    app.snapshotter.store.put([snap])


@pytest.mark.parametrize(("name", "added"), [("workflow", "fix_rounds"), ("loop", "status")])
def test_a_snapshot_of_an_earlier_class_shape_falls_back_to_the_full_replay(store_env, name: str,
                                                                            added: str) -> None:
    app = _app(store_env)
    try:
        kind, aggregate_id = record(app, name)
        full = load_as(app, kind, aggregate_id)
        assert app.snapshotter.take(full)

        def earlier(snapshot_state: dict[str, Any]) -> None:
            # Taken before ``added`` existed: the attribute is missing and the shape is another.
            del snapshot_state["state"][added]
            snapshot_state["shape"] = "an-earlier-shape"

        _rewrite_snapshot(app, aggregate_id, earlier)
        rebuilt = app.load(kind, aggregate_id)
        assert state(rebuilt) == state(full) and added in vars(rebuilt)
    finally:
        app.close()


def test_an_unreadable_snapshot_or_one_its_events_do_not_fit_falls_back(store_env) -> None:
    app = _app(store_env)
    try:
        kind, aggregate_id = record(app, "loop")
        full = load_as(app, kind, aggregate_id)
        app.snapshotter.take(load_as(app, kind, aggregate_id, version=5))

        def moved(snapshot_state: dict[str, Any]) -> None:  # a struct class that no longer exists
            snapshot_state["state"]["branch"]["s"] = "autarch.services.orchestrator.loop.model:NoSuchClass"

        _rewrite_snapshot(app, aggregate_id, moved)
        assert state(app.load(kind, aggregate_id)) == state(full)

        def wrong(snapshot_state: dict[str, Any]) -> None:  # its state does not fit the events after it
            snapshot_state["state"]["iterations"] = []

        app.snapshotter.take(load_as(app, kind, aggregate_id, version=5))
        _rewrite_snapshot(app, aggregate_id, wrong)
        assert state(app.load(kind, aggregate_id)) == state(full)
    finally:
        app.close()


class Colour(Enum):
    RED = "red"


class Inner(msgspec.Struct, frozen=True):
    at: datetime
    tags: tuple[str, ...] = ()


class Outer(msgspec.Struct):
    inner: Inner
    anything: Any = None


class Holder(Aggregate):
    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def test_the_snapshot_state_reads_back_to_equal_values_or_is_refused() -> None:
    values = {
        "plain": [1, 2.5, "s", None, True], "keys": {1: "one", (2, 3): {"x"}}, "tuple": (1, "a"),
        "frozen": frozenset({1}), "when": datetime(2026, 11, 25, 9, tzinfo=UTC), "id": uuid.uuid4(),
        "money": Decimal("1.10"), "raw": b"\x00\xff", "colour": Colour.RED, "versions": array("q", [3, 2**40]),
        "nested": Outer(inner=Inner(at=datetime(2026, 1, 1, tzinfo=UTC), tags=("a",)), anything=Inner(
            at=datetime(2026, 1, 2, tzinfo=UTC))),
        "dict_like_a_tag": {"d": [1], "s": "x", "f": {}},
    }
    holder = Holder(values)
    encoded = json.loads(json.dumps(encode_state(holder)))
    back = decode_state(encoded)
    assert back == {k: v for k, v in vars(holder).items() if k not in ("_id", "_version", "_pending_events")}
    assert type(back["nested"].anything) is Inner and type(back["tuple"]) is tuple and type(back["versions"]) is array
    with pytest.raises(Unsnapshottable):
        encode_state(Holder({"odd": object()}))


def test_an_aggregate_that_cannot_be_snapshotted_is_replayed_in_full(tmp_path: Path) -> None:
    env = {"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(tmp_path / "e.sqlite")}
    app = _app(env, every=1)
    try:
        snapshots: Snapshots = app.snapshotter
        holder = Holder({"odd": object()})
        holder.collect_events()
        assert not snapshots.take(holder) and not snapshots.due(holder, 1)
    finally:
        app.close()


def test_ids_of_the_aggregates_stay_what_the_books_key_them_by() -> None:
    # The histories above use the ids the orchestrator's books derive: an epic and its mailbox share a workflow's.
    assert swarm_history()[0].id == swarm_id_for(WID) and mailbox_history()[0].id == mailbox_id_for(WID)


@pytest.mark.parametrize("name", list(HISTORIES))
def test_an_id_of_another_kind_is_not_found_without_replaying_or_reading_its_snapshot(tmp_path: Path,
                                                                                     name: str) -> None:
    path = tmp_path / "e.sqlite"
    env = {"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(path)}
    app = _app(env)
    kind, aggregate_id = record(app, name)
    app.snapshotter.take(load_as(app, kind, aggregate_id))
    app.close()
    _rewrite_to_earlier_topics(path)  # the kind is read from the topic, as earlier versions stored it too
    app = _app(env)
    try:
        replayed: list[Any] = []
        rows = app.recorder.select_event_rows  # type: ignore[attr-defined]  # the SQLite recorder's own

        def spy(originator_id: UUID, **kwargs: Any) -> Any:
            if kwargs.get("lte") != 1:  # more than the first event (its topic names the kind)
                replayed.append(kwargs)
            return rows(originator_id, **kwargs)

        app.recorder.select_event_rows = spy  # type: ignore[attr-defined]  # counts the rows replayed
        app.snapshotter.store.get = lambda *a, **k: replayed.append(a)  # type: ignore[method-assign]  # records what is read
        others: set[type[Any]] = {Workflow, LoopSession, Swarm, Mailbox}
        for other in others - {kind}:
            with pytest.raises(AggregateNotFoundError):
                app.load(other, aggregate_id)
            with pytest.raises(AggregateNotFoundError):
                load_as(app, other, aggregate_id)
        assert replayed == []
    finally:
        app.close()


def test_snapshots_of_a_long_lived_aggregate_are_spaced_in_proportion_to_its_length(tmp_path: Path) -> None:
    env = {"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(tmp_path / "e.sqlite")}
    app = _app(env, every=100)
    try:
        snapshots: Snapshots = app.snapshotter
        assert [snapshots.interval(v) for v in (1, 100, 1000, 1600, 5000, 50_000)] == [100, 100, 100, 128, 512, 4096]
        # One event saved at a time: how many snapshots a life of 20,000 events takes (about 8 per doubling).
        taken = [v for v in range(1, 20_001) if (v // snapshots.interval(v)) != ((v - 1) // snapshots.interval(v))]
        assert taken[:3] == [100, 200, 300] and len(taken) < 60
        assert all(b - a <= max(100, b // 8) for a, b in itertools.pairwise(taken))
    finally:
        app.close()
