"""A loop session's view made again after an event costs what the event changed, not the session's length."""

from __future__ import annotations

import pytest

from autarch.services.orchestrator.loop import model
from autarch.services.orchestrator.loop.views import Made, view_of

from .test_model import new_session, run_iteration


def test_a_view_kept_up_to_date_equals_one_made_afresh():
    session = new_session(max_iterations=40)
    made = Made()
    for n in range(1, 31):
        signal = "BLOCKED" if n % 7 == 0 else "CONTINUE"
        run_iteration(session, signal, f"{n:040x}" if n % 3 else None, reason="stuck" if signal == "BLOCKED" else None)
        if signal == "BLOCKED":
            session.resume("go on")
        assert view_of(session, made) == view_of(session)
    # An event that replaces an early iteration (its agent session closed late), then one that adds an iteration.
    session.iteration_session_closed(number=4)
    assert view_of(session, made) == view_of(session)
    run_iteration(session, "COMPLETE", "f" * 40)
    view = view_of(session, made)
    assert view == view_of(session)
    assert view.last_signal == "COMPLETE" and view.total_commits == 21 and len(view.progress_log) == 31


def test_a_view_made_again_reads_only_the_iterations_that_changed(monkeypatch: pytest.MonkeyPatch):
    session = new_session(max_iterations=400)
    made = Made()
    for _ in range(300):
        run_iteration(session, "CONTINUE", "c" * 40)
    view_of(session, made)
    reads = []
    over = model.Iteration.over

    def counted(it: model.Iteration) -> bool:
        reads.append(it.number)
        return over.fget(it)  # type: ignore[attr-defined, no-any-return]  # the property's getter

    monkeypatch.setattr(model.Iteration, "over", property(counted))
    run_iteration(session, "CONTINUE", "d" * 40)  # the model reads only the new iteration's state
    reads.clear()
    view = view_of(session, made)
    # Only the 301st iteration is looked at (the last signal and the totals are kept, not recounted).
    assert set(reads) == {301}
    assert view.total_commits == 301 and view.last_signal == "CONTINUE" and view.iterations_total == 301
    # It holds the views of the latest iterations only (older pages are made from their events).
    assert [it.iteration_number for it in view.iterations] == list(range(302 - model.LoopSession.iterations_kept, 302))
