"""The LoopSession aggregate: rules checked before anything is recorded, and replay rebuilding the live state."""

from __future__ import annotations

import uuid

import pytest

from autarch.runtime.aggregates import project
from autarch.services.orchestrator.loop.model import Anchor, LoopError, LoopSession
from autarch.services.orchestrator.loop.views import view_of


def new_session(max_iterations: int = 3) -> LoopSession:
    return LoopSession(session_id=str(uuid.uuid4()), project_name="shop", project_path="/srv/shop", goal="Add auth",
                       max_iterations=max_iterations, anchor_turn_id=None, branch_name="autarch/loop-x",
                       base_branch="main", context_strategy="prefetch",
                       notify=[{"kind": "webhook", "url": "http://127.0.0.1:9/h"}], created_by="api", script=None,
                       created_at="2026-11-25T05:00:00+00:00", max_tokens=None, max_cost_usd=None,
                       status="pending")


def run_iteration(session: LoopSession, signal: str, commit: str | None, *, reason: str | None = None) -> None:
    it = session.start_iteration(task_content="do it", pulse_worktree="/w", base_commit="b" * 40,
                                 anchor=Anchor(strategy="temporal", turn_id="t0", depth=0), context_tokens=10)
    session.iteration_running(number=it.number, kickoff_turn_id=f"k{it.number}", at="2026-11-25T05:00:01+00:00")
    assert session.record_turn(it.number, turn_id=f"t{it.number}", ending="complete", signal=signal,
                               signal_source="explicit", reason=reason, output_summary=f"step {it.number}",
                               output_full="…", commit_subject="chore: x", commit_body="", anchor_hint_next=None,
                               anchor_hint_reason=None, tokens_used=100, cost_usd=0.01)
    # A turn event delivered twice records nothing the second time.
    assert not session.record_turn(it.number, turn_id=f"t{it.number}", ending="complete", signal=signal,
                                   signal_source="explicit", reason=None, output_summary="", output_full="",
                                   commit_subject="", commit_body="", anchor_hint_next=None, anchor_hint_reason=None,
                                   tokens_used=1, cost_usd=1.0)
    session.end_iteration(it.number, commit_hash=commit, files_changed=["a.py"] if commit else [],
                          no_progress_limit=3)


def replayed(session: LoopSession) -> LoopSession:
    events = session.collect_events()
    return project(None, events)


def test_replay_rebuilds_the_live_session():
    session = new_session()
    run_iteration(session, "CONTINUE", "c1" * 20)
    run_iteration(session, "BLOCKED", None, reason="need a key")
    session.resume("here it is")
    run_iteration(session, "COMPLETE", "c3" * 20)
    live = view_of(session)
    assert live.status == "complete" and live.total_commits == 2 and live.total_tokens_used == 300
    assert view_of(replayed(session)) == live


def test_refused_commands_record_nothing():
    session = new_session()
    run_iteration(session, "BLOCKED", None, reason="need a key")
    session.collect_events()
    with pytest.raises(LoopError) as refused:
        session.request_pause()
    assert refused.value.code == "loop_not_running"
    session.abort("stop")
    session.collect_events()
    for command in (session.request_pause, lambda: session.resume(None), lambda: session.abort("again")):
        with pytest.raises(LoopError) as refused:
            command()
        assert refused.value.code == "loop_finished"
    assert session.collect_events() == []


def test_the_breaker_trips_on_the_same_error_repeated():
    session = new_session(max_iterations=10)
    for _ in range(3):
        it = session.start_iteration(task_content="x", pulse_worktree="/w", base_commit="b", anchor=Anchor(
            strategy="none"), context_tokens=1)
        session.record_turn(it.number, turn_id=f"t{it.number}", ending="failed", signal="CONTINUE",
                            signal_source="limit", reason="the turn ended error: overloaded", output_summary="x",
                            output_full="", commit_subject="", commit_body="", anchor_hint_next=None,
                            anchor_hint_reason=None, tokens_used=0, cost_usd=0)
        session.end_iteration(it.number, commit_hash=None, files_changed=[], no_progress_limit=3)
        if session.status != "running":
            break
    assert session.status == "blocked" and session.current_iteration().number == 3
    assert session.status_reason == ("no progress: 3 iterations in a row ended with the same error: "
                                     "the turn ended error: overloaded")


def test_every_event_of_a_session_becomes_its_wire_event():
    from autarch.contracts.events import EVENT_TYPES
    from autarch.services.orchestrator.loop.views import loop_to_contract

    session = LoopSession(session_id=str(uuid.uuid4()), project_name="shop", project_path="/srv/shop", goal="Add auth",
                          max_iterations=3, anchor_turn_id=None, branch_name="autarch/loop-x", base_branch="main",
                          context_strategy="prefetch", created_by="api", script=None,
                          notify=[{"kind": "webhook", "url": "http://127.0.0.1:9/h"},
                                  {"kind": "telegram", "chatId": "42"}],
                          created_at="2026-11-25T05:00:00+00:00", max_tokens=None, max_cost_usd=None,
                          status="pending")
    run_iteration(session, "CONTINUE", "c1" * 20)
    session.request_pause()
    session.resume(None)
    run_iteration(session, "BLOCKED", None, reason="which key?")
    session.resume("this one")
    session.abort("enough")
    settled = (session.max_iterations, list(session.notify))
    wire = [loop_to_contract(e, lambda _: settled) for e in session.collect_events()]
    kinds = [type(w).__struct_config__.tag for w in wire if w is not None]
    assert set(kinds) <= set(EVENT_TYPES)
    assert kinds[0] == "loop:started" and wire[0].notify[1].chat_id == "42"
    assert {"loop:iteration_started", "loop:iteration_completed", "loop:paused", "loop:blocked", "loop:resumed",
            "loop:aborted"} <= set(kinds)


def test_a_session_is_pending_until_its_first_iteration_starts():
    session = new_session()
    assert session.status == "pending" and view_of(session).status == "pending"
    assert view_of(replayed(new_session())).status == "pending"
    run_iteration(session, "CONTINUE", "c1" * 20)
    assert session.status == "running"
    assert view_of(replayed(session)).status == "running"


def test_a_pending_session_pauses_at_once_blocks_and_aborts():
    paused = new_session()
    paused.request_pause()
    assert paused.status == "paused" and not paused.pause_requested
    paused.resume(None)
    assert paused.status == "running"
    blocked = new_session()
    blocked.block("the agent runner refused the session: bad_request")
    assert blocked.status == "blocked"
    aborted = new_session()
    aborted.abort("wrong goal")
    assert aborted.status == "aborted" and aborted.iterations == []

