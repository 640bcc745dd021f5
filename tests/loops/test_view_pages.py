"""A long session's view carries a page of its iterations (the latest by default), never all of them: a view of a
thousand iterations, each with its prompt and full output, does not fit one message."""

from __future__ import annotations

from typing import Any

import pytest

from autarch.contracts.loops import ITERATIONS_PER_VIEW
from autarch.services.orchestrator.loop.model import LoopSession
from autarch.services.orchestrator.loop.views import page_of, view_of

from ..orchestrator.test_snapshots import loop_history


def _numbers(view: Any) -> list[int]:
    return [it.iteration_number for it in view.iterations]


def test_a_long_sessions_view_carries_its_latest_iterations_and_pages_of_the_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The numbering of pages over a view that holds every iteration (a page of iterations older than those the state
    # holds is made from their events: ``test_iteration_texts``).
    monkeypatch.setattr(LoopSession, "iterations_kept", 1000)
    session, steps = loop_history(250)
    for step in steps:
        step(session)
    assert isinstance(session, LoopSession)
    whole = view_of(session)
    assert whole.iterations_total == 250 and len(whole.progress_log) == 250

    latest = page_of(whole)
    assert _numbers(latest) == list(range(251 - ITERATIONS_PER_VIEW, 251))
    assert latest.iterations_total == 250 and len(latest.progress_log) == 250  # the rest is the whole session's
    assert _numbers(page_of(whole, 1, 10)) == list(range(1, 11))
    assert _numbers(page_of(whole, 245, 10)) == list(range(245, 251))
    assert _numbers(page_of(whole, 400, 10)) == []
    assert _numbers(page_of(whole, None, 3)) == [248, 249, 250]


def test_a_short_sessions_view_is_whole() -> None:
    session, steps = loop_history(3)
    for step in steps:
        step(session)
    whole = view_of(session)
    assert page_of(whole) is whole and _numbers(whole) == [1, 2, 3] and whole.iterations_total == 3
