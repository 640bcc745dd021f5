"""A long session holds the records of its latest iterations only (issue 34): their prompts, outputs and slices, and
the rest of each record; a view page of older ones still shows them whole, made from their events, before and after a
restart, exactly as a state holding every iteration shows them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest

from autarch.contracts.loops import ForkLoop, GetLoop, IterationView, LoopView
from autarch.services.orchestrator.loop.forks import forked_history, loop_fork_point
from autarch.services.orchestrator.loop.model import Anchor, LoopSession
from autarch.services.orchestrator.loop.views import page_of, view_of

from ..orchestrator.test_kept_views import Started

AT = "2026-11-28T05:00:00+00:00"
KEPT = 10


def _prompt(n: int) -> str:
    return f"iteration {n}: do the next step\n" + "slice text " * 200


def _output(n: int) -> str:
    return f"<signal>CONTINUE</signal> output of {n} " + "y" * 2000


async def _run(orch: Started, sid: str, iterations: int) -> None:
    session = LoopSession(session_id=sid, project_name="p", project_path="/p", goal="g", max_iterations=iterations + 5,
                          anchor_turn_id=None, branch_name="autarch/loop-x", base_branch="main",
                          context_strategy="prefetch", notify=[], created_by="api", script=None, created_at=AT,
                          max_tokens=None, max_cost_usd=None,
                          status="pending")
    session.branch_prepared(branch="autarch/loop-x", worktree_path="/wt", base_commit="c0", repository_id="r",
                            at=AT)
    await orch.loops.book.save(sid, session)
    for n in range(1, iterations + 1):
        def start(s: LoopSession, n: int = n) -> object:
            return s.start_iteration(task_content=_prompt(n), pulse_worktree="/wt/i", base_commit="c",
                                     anchor=Anchor(strategy="temporal", turn_id="t",
                                                   slice_turn_ids=[f"s{n}a", f"s{n}b"]),
                                     context_tokens=10)

        def note(s: LoopSession, n: int = n) -> object:
            return s.take_note(agent_session_id="a", note=f"n{n}", key=f"k{n}")

        def turn(s: LoopSession, n: int = n) -> object:
            return s.record_turn(n, turn_id=f"t{n}", ending="complete", signal="CONTINUE", signal_source="explicit",
                                 reason=None, output_summary=f"step {n}", output_full=_output(n),
                                 commit_subject="feat: x", commit_body="body " * 50, anchor_hint_next=None,
                                 anchor_hint_reason=None, tokens_used=1, cost_usd=0.0)

        def end(s: LoopSession, n: int = n) -> None:
            s.end_iteration(n, commit_hash=f"h{n}", files_changed=[], no_progress_limit=0)

        await orch.loops.change(sid, start)
        if n % 4 == 0:  # a note among an iteration's events
            await orch.loops.change(sid, note)
        await orch.loops.change(sid, turn)
        await orch.loops.change(sid, end)


def _whole(it: IterationView) -> bool:
    n = it.iteration_number
    return (it.task_content, it.output_full, it.slice_turn_ids) == (_prompt(n), _output(n), [f"s{n}a", f"s{n}b"])


async def test_a_long_session_holds_the_texts_of_its_latest_iterations_only(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LoopSession, "iterations_kept", KEPT)
    sid = str(uuid.uuid4())
    async with Started(tmp_path) as orch:
        await _run(orch, sid, 30)
        session = await orch.loops.read(sid)
        assert [it.number for it in session.iterations] == list(range(21, 31))
        assert [it.iteration_number for it in orch.loops.views[sid].iterations] == list(range(21, 31))
        # What is left of an older iteration is its progress line and where its events start.
        assert [e.iteration for e in session.earlier_progress] == list(range(1, 21))
        assert len(session.started_versions) == 30 and session.total_commits == 30
        # Every page still shows every iteration's texts as recorded.
        whole = await orch.loops.get_loop(GetLoop(session_id=sid))
        assert [it.iteration_number for it in whole.iterations] == list(range(1, 31))
        assert all(map(_whole, whole.iterations))
        page = await orch.loops.get_loop(GetLoop(session_id=sid, iterations_from=3, iterations_limit=5))
        assert [it.iteration_number for it in page.iterations] == [3, 4, 5, 6, 7] and all(map(_whole, page.iterations))
        assert page.iterations_total == 30 and len(page.progress_log) == 30


async def test_a_page_of_old_iterations_shows_their_texts_after_a_restart(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LoopSession, "iterations_kept", KEPT)
    sid = str(uuid.uuid4())
    async with Started(tmp_path) as orch:
        await _run(orch, sid, 30)  # 30 iterations: more than 100 events, so the state is snapshotted
        before = msgspec.json.encode(await orch.loops.get_loop(GetLoop(session_id=sid, iterations_from=2,
                                                                       iterations_limit=12)))
    async with Started(tmp_path, kept=False) as restarted:
        restarted.load()  # rebuilt from its snapshot and the events after it
        assert restarted.rebuilt == [sid]
        session = await restarted.loops.read(sid)
        assert [it.number for it in session.iterations if it.task_content] == list(range(21, 31))
        page = await restarted.loops.get_loop(GetLoop(session_id=sid, iterations_from=2, iterations_limit=12))
        assert [it.iteration_number for it in page.iterations] == list(range(2, 14))
        assert all(map(_whole, page.iterations))
        assert msgspec.json.encode(page) == before


def _full_record(orch: Started, sid: str, monkeypatch: pytest.MonkeyPatch) -> LoopView:
    """The session's view as a state holding every iteration makes it: all its events replayed (no snapshot) into a
    session that keeps every record."""
    monkeypatch.setattr(LoopSession, "iterations_kept", 10**6)
    try:
        full = None
        events: list[Any] = list(orch.app.events.get(uuid.UUID(sid)))
        for e in events:
            full = e.mutate(full)
        assert isinstance(full, LoopSession) and len(full.iterations) == full.iteration_count
        return view_of(full)
    finally:
        monkeypatch.setattr(LoopSession, "iterations_kept", KEPT)


async def _every_page(orch: Started, sid: str, total: int) -> list[tuple[int | None, int, LoopView]]:
    pages = [(first, limit, await orch.loops.get_loop(GetLoop(session_id=sid, iterations_from=first,
                                                               iterations_limit=limit)))
             for first in range(1, total + 2) for limit in (1, 7, KEPT, 3 * KEPT)]
    return pages + [(None, limit, await orch.loops.get_loop(GetLoop(session_id=sid, iterations_limit=limit)))
                    for limit in (1, KEPT, 1000)]


async def test_every_page_of_a_long_session_is_what_a_state_holding_every_iteration_shows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LoopSession, "iterations_kept", KEPT)
    sid, total = str(uuid.uuid4()), 3 * KEPT + 7
    async with Started(tmp_path) as orch:
        await _run(orch, sid, total)
        full = _full_record(orch, sid, monkeypatch)
        assert full.iterations_total == total and all(map(_whole, full.iterations))
        live = await _every_page(orch, sid, total)
        for first, limit, page in live:
            assert page == page_of(full, first, limit), (first, limit)
        await orch.loops.change(sid, lambda s: s.abort("enough"))
        await orch.loops.change(sid, lambda s: s.worktree_removed_event())  # settled: its view is kept
        full = _full_record(orch, sid, monkeypatch)
        ended = await _every_page(orch, sid, total)
    for kept in (True, False):  # a restart: from the kept view, or from its snapshot and later events
        async with Started(tmp_path, kept=kept) as restarted:
            restarted.load()
            assert restarted.rebuilt == ([] if kept else [sid])
            for (first, limit, page), (_, _, again) in zip(ended, await _every_page(restarted, sid, total),
                                                           strict=True):
                assert again == page == page_of(full, first, limit), (kept, first, limit)


async def test_a_fork_at_an_iteration_the_state_no_longer_holds_starts_from_its_commit_and_history(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LoopSession, "iterations_kept", KEPT)
    sid, fid = str(uuid.uuid4()), str(uuid.uuid4())
    async with Started(tmp_path) as orch:
        await _run(orch, sid, 3 * KEPT + 7)
        point = loop_fork_point(orch.app, ForkLoop(session_id=fid, forked_from=sid, at_iteration=3))
        assert point.start_commit == "h3"  # iteration 3's commit, read from its events
        fork = forked_history(orch.app, sid, fid, point.version)
        fork._forked(forked_from=sid, at_iteration=3, branch={"branch": "f", "worktree_path": "/f",
                                                              "base_commit": "c0", "repository_id": "r"},
                     script=None, closed=[it.number for it in fork.iterations if not it.session_closed], at=AT)
        await orch.loops.book.save(fid, fork)
        original = await orch.loops.get_loop(GetLoop(session_id=sid, iterations_from=1, iterations_limit=3))
        forked = await orch.loops.get_loop(GetLoop(session_id=fid, iterations_from=1, iterations_limit=3))
        # The fork's iterations are the original's, under its own id.
        assert [msgspec.structs.replace(it, session_id=sid) for it in forked.iterations] == original.iterations
        assert all(map(_whole, forked.iterations))
        assert forked.progress_log == original.progress_log[:3] and forked.total_commits == 3
