"""The LoopSession aggregate: rules checked before anything is recorded, and replay rebuilding the live state."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from autarch.contracts.loops import Signal
from autarch.runtime.aggregates import project
from autarch.services.orchestrator.loop.model import Anchor, IterationEndKind, LoopError, LoopSession
from autarch.services.orchestrator.loop.views import view_of


def new_session(max_iterations: int = 3) -> LoopSession:
    return LoopSession(session_id=str(uuid.uuid4()), project_name="shop", project_path="/srv/shop", goal="Add auth",
                       max_iterations=max_iterations, anchor_turn_id=None, branch_name="autarch/loop-x",
                       base_branch="main", context_strategy="prefetch",
                       notify=[{"kind": "webhook", "url": "http://127.0.0.1:9/h"}], created_by="api", script=None,
                       created_at="2026-11-25T05:00:00+00:00", max_tokens=None, max_cost_usd=None,
                       status="pending")


def run_iteration(session: LoopSession, signal: Signal, commit: str | None, *, reason: str | None = None) -> None:
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


def test_a_failure_ends_the_open_iteration_without_a_commit_and_is_final():
    from autarch.contracts.events import LoopFailed, LoopIterationCompleted
    from autarch.services.orchestrator.loop.views import loop_to_contract

    session = new_session()
    session.branch_prepared(branch="autarch/loop-x", worktree_path="/w", base_commit="b" * 40,
                            repository_id="0" * 16, at="2026-11-25T05:00:00+00:00")
    run_iteration(session, "CONTINUE", "c1" * 20)
    it = session.start_iteration(task_content="x", pulse_worktree="/w", base_commit="b", anchor=Anchor(
        strategy="none"), context_tokens=1)
    recorded = session.collect_events()
    session.fail("the project repository is gone or no longer a git repository: /srv/shop is not a directory")
    assert session.status == "failed" and session.finished and not session.settled
    it = session.iteration(it.number)  # an event replaces the iteration it changes
    assert it.over and it.status == "failed" and it.commit_hash is None and it.reason.startswith("the project")
    recorded += (failing := session.collect_events())
    wire = [loop_to_contract(e, lambda _: (3, [])) for e in failing]
    ended, failed = [w for w in wire if w is not None]
    assert isinstance(ended, LoopIterationCompleted) and ended.status == "failed" and ended.iteration_number == 2
    assert isinstance(failed, LoopFailed) and failed.iteration_number == 2 and "/srv/shop" in failed.reason
    with pytest.raises(LoopError) as refused:
        session.resume(None)
    assert refused.value.code == "loop_finished"
    session.leave_worktree("the project repository is gone")
    session.leave_worktree("again")
    assert session.settled and session.worktree_left == "the project repository is gone"
    assert view_of(project(None, recorded + session.collect_events())) == view_of(session)


def test_a_failure_after_the_agents_turn_keeps_its_signal_and_says_why_it_ended():
    session = new_session()
    it = session.start_iteration(task_content="x", pulse_worktree="/w", base_commit="b", anchor=Anchor(
        strategy="none"), context_tokens=1)
    session.record_turn(it.number, turn_id="t1", ending="complete", signal="CONTINUE", signal_source="explicit",
                        reason=None, output_summary="wrote a", output_full="…", commit_subject="feat: a",
                        commit_body="", anchor_hint_next=None, anchor_hint_reason=None, tokens_used=5, cost_usd=0.0)
    session.fail("the project repository is gone or no longer a git repository: gone")
    it = session.iteration(it.number)  # an event replaces the iteration it changes
    assert (it.status, it.signal, it.signal_source, it.output_summary) == ("failed", "CONTINUE", "explicit", "wrote a")
    assert it.reason.endswith(": gone") and session.total_tokens_used == 5


def test_an_aborted_session_whose_repository_went_stays_aborted():
    session = new_session()
    it = session.start_iteration(task_content="x", pulse_worktree="/w", base_commit="b", anchor=Anchor(
        strategy="none"), context_tokens=1)
    session.abort("enough")
    session.fail("the project repository is gone or no longer a git repository: gone")
    it = session.iteration(it.number)  # an event replaces the iteration it changes
    assert session.status == "aborted" and session.status_reason == "enough" and it.over and it.status == "failed"


def test_a_git_step_that_fails_for_good_after_the_turn_ends_the_iteration_and_blocks():
    # An iteration past its time limit whose recovery commit is refused: the step is not tried again and again.
    session = new_session()
    it = session.start_iteration(task_content="x", pulse_worktree="/w", base_commit="b", anchor=Anchor(
        strategy="none"), context_tokens=1)
    session.record_turn(it.number, turn_id="timeout:1", ending="timeout", signal="BLOCKED", signal_source="limit",
                        reason="iteration 1 ran past its time limit (20s)", output_summary="", output_full="",
                        commit_subject="", commit_body="", anchor_hint_next=None, anchor_hint_reason=None,
                        tokens_used=0, cost_usd=0.0)
    session.block("autarch.svc.git.recovery_checkpoint: internal: disk full")
    it = session.iteration(it.number)  # an event replaces the iteration it changes
    assert it.over and it.status == "failed" and it.reason.endswith("disk full") and it.commit_hash is None
    assert session.status == "blocked" and session.status_reason.endswith("disk full")
    session.resume(None)
    assert session.status == "running" and session.current_iteration().over


def _breaker_outcome(steps: list[tuple[IterationEndKind, str | None, str | None]]) -> tuple[str, str | None, int]:
    """Where a session of these iterations (ending, reason, commit) stops with the no-progress breaker at 5."""
    session = new_session(max_iterations=100)
    for ending, reason, commit in steps:
        it = session.start_iteration(task_content="do it", pulse_worktree="/w", base_commit="b" * 40,
                                     anchor=Anchor(strategy="none"), context_tokens=10)
        session.record_turn(it.number, turn_id=f"t{it.number}", ending=ending, signal="CONTINUE",
                            signal_source="explicit", reason=reason, output_summary="s", output_full="…",
                            commit_subject="x", commit_body="", anchor_hint_next=None, anchor_hint_reason=None,
                            tokens_used=1, cost_usd=0.0)
        session.end_iteration(it.number, commit_hash=commit, files_changed=[], no_progress_limit=5)
        if session.status != "running":
            break
    assert view_of(replayed(session)) == view_of(session)
    return session.status, session.status_reason, session.iteration_count


@pytest.mark.parametrize("steps", [
    [("complete", None, "c1")] + [("complete", None, None)] * 6,
    [("failed", "a", None)] * 2 + [("failed", "b", None)] * 6,
    [("failed", "a", None), ("timeout", "a", "c1")] + [("failed", "a", None)] * 3 + [("complete", None, "c2")] * 2,
    [("complete", None, "c1"), ("failed", "x", None)] * 4,
    [("failed", "b", "c0")] + [("failed", "a", "c1")] * 6,
])
def test_the_breaker_counts_iterations_the_state_no_longer_holds(monkeypatch: pytest.MonkeyPatch, steps: Any):
    # The breaker's limit (5) is beyond the iterations held (2): it trips where a state holding them all trips.
    whole = _breaker_outcome(steps)
    monkeypatch.setattr(LoopSession, "iterations_kept", 2)
    assert _breaker_outcome(steps) == whole


def test_a_commands_copy_leaves_the_kept_sessions_history_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    # The containers that grow with the history are shared with a command's copy until an event adds to one.
    monkeypatch.setattr(LoopSession, "iterations_kept", 2)
    kept = new_session(max_iterations=20)
    for _ in range(4):
        run_iteration(kept, "CONTINUE", "c" * 40)
    kept.take_note(agent_session_id="a", note="first", key="k1")
    kept.collect_events()
    before = (list(kept.started_versions), list(kept.earlier_progress), list(kept.notes), dict(kept.seen))
    copy = kept.copy_for_change()
    run_iteration(copy, "CONTINUE", "d" * 40)
    copy.take_note(agent_session_id="a", note="second", key="k2")
    assert (list(kept.started_versions), list(kept.earlier_progress), list(kept.notes), dict(kept.seen)) == before
    assert len(copy.started_versions) == 5 and len(copy.earlier_progress) == 3 and copy.notes == ["first", "second"]
    assert view_of(copy).progress_log[:len(before[1])] == before[1] and view_of(kept).iterations_total == 4
