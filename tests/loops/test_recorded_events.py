"""Loop sessions recorded before ``pending`` and ``failed`` could happen still load, beside sessions recorded now.

An earlier version recorded a session's ``Started`` without a status (it was ``running`` from its start) and
never recorded ``failed``. Here a store holds sessions as that version wrote them and sessions as this one writes
them (``pending``, ``failed`` with its worktree left behind); each is rebuilt as it was and relayed as before.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from autarch.contracts.events import LoopBlocked, LoopFailed, LoopIterationCompleted, LoopStarted
from autarch.contracts.loops import LoopStatus, Signal
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.loop.model import Anchor, LoopSession
from autarch.services.orchestrator.loop.views import view_of
from autarch.services.orchestrator.wire import WireEvents

AT = "2026-11-25T09:00:00+00:00"


def _app(path: Path) -> WorkflowApplication:
    return WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(path)})


def _session(status: LoopStatus) -> LoopSession:
    session = LoopSession(session_id=str(uuid.uuid4()), project_name="shop", project_path="/srv/shop", goal="g",
                          max_iterations=3, anchor_turn_id=None, branch_name="autarch/loop-x", base_branch="main",
                          context_strategy="prefetch", notify=[], created_by="api", script=None, created_at=AT,
                          max_tokens=None, max_cost_usd=None, status=status)
    session.branch_prepared(branch="autarch/loop-x", worktree_path="/w", base_commit="b" * 40,
                            repository_id="0" * 16, at=AT)
    return session


def _iteration(session: LoopSession, signal: Signal, reason: str | None = None) -> None:
    it = session.start_iteration(task_content="do it", pulse_worktree="/w", base_commit="b" * 40,
                                 anchor=Anchor(strategy="none"), context_tokens=10)
    session.iteration_running(number=it.number, kickoff_turn_id="k", at=AT)
    session.record_turn(it.number, turn_id=f"t{it.number}", ending="complete", signal=signal,
                        signal_source="explicit", reason=reason, output_summary="did it", output_full="…",
                        commit_subject="feat: x", commit_body="", anchor_hint_next=None, anchor_hint_reason=None,
                        tokens_used=10, cost_usd=0.0)
    session.end_iteration(it.number, commit_hash="c" * 40, files_changed=["a.py"], no_progress_limit=3)


def _as_recorded_before(path: Path, session_ids: set[str]) -> int:
    """Take ``status`` out of these sessions' stored ``Started`` events, as the earlier version stored them."""
    rewritten = 0
    with sqlite3.connect(path) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        table = next(t for t in tables if "topic" in {c[1] for c in db.execute(f"PRAGMA table_info({t})")})
        rows = db.execute(f"SELECT originator_id, originator_version, state FROM {table} "
                          "WHERE topic LIKE '%LoopSession.Started'").fetchall()
        for originator, version, state in rows:
            if str(uuid.UUID(str(originator))) not in session_ids:
                continue
            payload = json.loads(state)
            assert payload.pop("status") == "running"
            db.execute(f"UPDATE {table} SET state = ? WHERE originator_id = ? AND originator_version = ?",
                       (json.dumps(payload).encode(), originator, version))
            rewritten += 1
    return rewritten


def test_sessions_recorded_before_pending_and_failed_load_beside_todays(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite"
    app = _app(path)
    try:
        waiting = _session("running")  # started, its first iteration not recorded yet (a crash, say)
        blocked = _session("running")
        _iteration(blocked, "BLOCKED", "need a key")
        pending = _session("pending")
        failed = _session("pending")
        _iteration(failed, "CONTINUE")
        failed.start_iteration(task_content="x", pulse_worktree="/w", base_commit="b" * 40,
                               anchor=Anchor(strategy="none"), context_tokens=1)
        failed.fail("the project repository is gone or no longer a git repository: /srv/shop is not a directory")
        failed.leave_worktree("the project repository is gone")
        app.save(waiting, blocked, pending, failed)
        ids = {str(s.id): s for s in (waiting, blocked, pending, failed)}
    finally:
        app.close()
    assert _as_recorded_before(path, {str(waiting.id), str(blocked.id)}) == 2

    app = _app(path)
    try:
        assert set(map(str, app.loop_ids())) == set(ids)
        loaded = {sid: app.get_loop(sid) for sid in ids}
        assert {sid: s.status for sid, s in loaded.items()} == {
            str(waiting.id): "running", str(blocked.id): "blocked", str(pending.id): "pending",
            str(failed.id): "failed"}
        assert view_of(loaded[str(blocked.id)]) == view_of(blocked)
        assert view_of(loaded[str(failed.id)]) == view_of(failed)
        assert [s.settled for s in loaded.values()] == [False, False, False, True]
        # An old session waiting for its first iteration starts it as it did: it stays running.
        old = loaded[str(waiting.id)]
        old.start_iteration(task_content="x", pulse_worktree="/w", base_commit="b" * 40,
                            anchor=Anchor(strategy="none"), context_tokens=1)
        assert old.status == "running"

        wire = WireEvents(app)
        published = [wire(app.mapper.to_domain_event(n))  # type: ignore[arg-type]  # DomainEvents
                     for n in app.recorder.select_notifications(start=1, limit=1000)]
        kinds = [type(e) for e in published if e is not None]
        assert kinds.count(LoopStarted) == 4 and kinds.count(LoopBlocked) == 1
        failure = next(e for e in published if isinstance(e, LoopFailed))
        assert failure.session_id == str(failed.id) and failure.iteration_number == 2
        ended = [e for e in published if isinstance(e, LoopIterationCompleted) and e.session_id == str(failed.id)]
        assert [(e.status, e.signal) for e in ended] == [("complete", "CONTINUE"), ("failed", "BLOCKED")]
    finally:
        app.close()
