"""A loop session kept between commands (``latest.py``): a command's copy never changes the kept session, and the
view made again only for the iterations that changed equals the view made from scratch."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from autarch.services.orchestrator.loop.model import Anchor, LoopSession
from autarch.services.orchestrator.loop.views import Made, view_of

from ..orchestrator.test_snapshots import loop_history

Step = Callable[[LoopSession], Any]


def _start(s: LoopSession) -> None:
    s.start_iteration(task_content="x", pulse_worktree="/w", base_commit="b", anchor=Anchor(strategy="none"),
                      context_tokens=1)


def _turn(signal: Any) -> Step:
    return lambda s: s.record_turn(len(s.iterations), turn_id=f"t{len(s.iterations)}", ending="complete",
                                   signal=signal, signal_source="explicit", reason=None, output_summary="ok",
                                   output_full="ok", commit_subject="feat: x", commit_body="", anchor_hint_next=None,
                                   anchor_hint_reason=None, tokens_used=1, cost_usd=0.0)


def _end(s: LoopSession) -> None:
    s.end_iteration(len(s.iterations), commit_hash="h", files_changed=["a.py"], no_progress_limit=3)


# Beyond a plain run: a pause, a resume, a block, a note, an abort of a running iteration, a failure, a worktree left.
EXTRA: list[Step] = [
    _start, lambda s: s.request_pause(), _turn("CONTINUE"), _end,
    lambda s: s.resume("go on"), _start, lambda s: s.take_note(agent_session_id="a", note="n", key="x"),
    lambda s: s.block("git refused"), lambda s: s.resume(None), _start,
    lambda s: s.abort("enough"), lambda s: s.leave_worktree("the repository is gone"),
]


def _histories() -> list[tuple[LoopSession, list[Step]]]:
    done, steps = loop_history(5)
    aborted, first = loop_history(5)
    failing, begin = loop_history(2)
    return [(done, steps), (aborted, first[:13] + EXTRA),
            (failing, [*begin[:3], lambda s: s.fail("the project repository is gone")])]


def test_a_commands_copy_leaves_the_kept_session_as_it_was() -> None:
    for kept, steps in _histories():
        kept.collect_events()
        for step in steps:
            before = pickle.dumps(kept.__dict__)
            copy = kept.copy_for_change()
            step(copy)
            assert pickle.dumps(kept.__dict__) == before, f"{step} changed the kept session"
            assert copy.version > kept.version
            copy.collect_events()
            kept = copy


def test_the_view_made_again_for_what_changed_equals_the_view_made_from_scratch() -> None:
    for session, steps in _histories():
        made = Made()
        for step in steps:
            session = session.copy_for_change()
            step(session)
            assert view_of(session, made) == view_of(session)


def test_the_last_lines_of_the_progress_log_are_its_tail() -> None:
    session, steps = loop_history(30)
    for step in steps:
        step(session)
    assert len(session.progress_log()) == 30
    assert session.progress_log(last=20) == session.progress_log()[-20:]
    assert session.progress_log(last=50) == session.progress_log()
