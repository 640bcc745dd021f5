"""A long session holds the large texts (prompt, full output, slice) of its latest iterations only (issue 34); a view
page of older ones still shows them, read from their events, before and after a restart."""

from __future__ import annotations

import uuid
from pathlib import Path

import msgspec
import pytest

from autarch.contracts.loops import GetLoop, IterationView
from autarch.services.orchestrator.loop.model import Anchor, LoopSession

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
    monkeypatch.setattr(LoopSession, "texts_kept", KEPT)
    sid = str(uuid.uuid4())
    async with Started(tmp_path) as orch:
        await _run(orch, sid, 30)
        session = await orch.loops.read(sid)
        held = [it.number for it in session.iterations if it.task_content or it.output_full or it.commit_body
                or it.anchor.slice_turn_ids]
        assert held == list(range(21, 31))
        assert [it.iteration_number for it in orch.loops.views[sid].iterations
                if it.task_content or it.output_full or it.slice_turn_ids] == list(range(21, 31))
        # What is left of an ended iteration is small, whatever its texts were.
        assert len(msgspec.json.encode(session.iterations[0])) < 1000
        # Every page still shows every iteration's texts as recorded.
        whole = await orch.loops.get_loop(GetLoop(session_id=sid))
        assert [it.iteration_number for it in whole.iterations] == list(range(1, 31))
        assert all(map(_whole, whole.iterations))
        page = await orch.loops.get_loop(GetLoop(session_id=sid, iterations_from=3, iterations_limit=5))
        assert [it.iteration_number for it in page.iterations] == [3, 4, 5, 6, 7] and all(map(_whole, page.iterations))
        assert page.iterations_total == 30 and len(page.progress_log) == 30


async def test_a_page_of_old_iterations_shows_their_texts_after_a_restart(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LoopSession, "texts_kept", KEPT)
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
