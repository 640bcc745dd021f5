"""Wire views of loop sessions (``LoopView``) and the ``loop:*`` events their stored events become."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from datetime import datetime
from itertools import compress, count
from operator import is_not
from typing import Any

import msgspec
from eventsourcing.domain import DomainEvent

from autarch.contracts.events import (
    Event,
    LoopAborted,
    LoopBlocked,
    LoopCompleted,
    LoopFailed,
    LoopIterationCompleted,
    LoopIterationStarted,
    LoopPaused,
    LoopResumed,
    LoopStarted,
)
from autarch.contracts.loops import (
    ITERATIONS_PER_VIEW,
    IterationView,
    LoopSummary,
    LoopView,
    NotifyTarget,
    ProgressEntry,
)

from .model import SHARED, Iteration, LoopSession, progress_entry

__all__ = ["Made", "loop_to_contract", "older_in", "older_iterations", "page_numbers", "page_of", "summary_of",
           "view_of"]


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _iteration_view(session_id: str, it: Iteration) -> IterationView:
    a = it.anchor
    return IterationView(
        id=it.id, session_id=session_id, iteration_number=it.number, status=it.status, task_content=it.task_content,
        agent_session_id=it.agent_session_id, signal=it.signal, signal_source=it.signal_source, reason=it.reason,
        output_summary=it.output_summary, output_full=it.output_full, commit_hash=it.commit_hash,
        files_changed=list(it.files_changed), anchor_turn_id=a.turn_id, anchor_strategy=a.strategy,
        anchor_resolution_ms=a.resolution_ms, salience=a.salience, depth=a.depth, slice_id=a.slice_id,
        slice_turn_ids=list(a.slice_turn_ids), node_count=a.node_count, anchor_hint_next=it.anchor_hint_next,
        anchor_hint_reason=it.anchor_hint_reason, context_tokens=it.context_tokens, tokens_used=it.tokens_used,
        cost_usd=it.cost_usd, started_at=_time(it.started_at), ended_at=_time(it.ended_at))


class Made:
    """What :func:`view_of` last made for one session: each held iteration (``LoopSession.iterations_kept``) it was
    made from with its wire view and progress line, so that a view made again after an event costs what changed, not
    the session's length (a session of a thousand iterations is made again several times per iteration)."""

    def __init__(self) -> None:
        self.first = 1
        """The number of the first of ``iterations``."""
        self.iterations: list[Iteration] = []
        self.views: list[IterationView] = []
        self.entries: list[ProgressEntry | None] = []
        self.progress: list[ProgressEntry] = []
        """The progress log last made, and what it was made of (the session's earlier lines, how many, the held
        iterations' lines): a view made again while none of them changed shares it instead of joining them again."""
        self.progress_of: tuple[list[ProgressEntry] | None, int, list[ProgressEntry]] = (None, 0, [])

    def update(self, session_id: str, first: int, iterations: list[Iteration]) -> None:
        """Bring what was made up to ``iterations`` (numbers ``first`` on): from the first one that is not the object
        a view was made from on (an event replaces the iteration it changes), reusing the views of those that still
        are."""
        shift = first - self.first
        if shift < 0:  # not the session it was made for (cannot happen): made again whole
            shift = len(self.iterations)
        old, views, entries = self.iterations[shift:], self.views[shift:], self.entries[shift:]
        same = min(len(old), len(iterations))
        # The first index whose iteration was replaced, found without a Python-level step per iteration.
        kept = next(compress(count(), map(is_not, iterations, old)), same)
        del views[kept:], entries[kept:]
        for it in iterations[kept:]:
            views.append(_iteration_view(session_id, it))
            entries.append(progress_entry(it) if it.over and it.signal is not None else None)
        self.first, self.iterations, self.views, self.entries = first, list(iterations), views, entries

    def progress_log(self, earlier: list[ProgressEntry]) -> list[ProgressEntry]:
        """The whole progress log: ``earlier`` (the lines of the iterations no longer held), then the held ones'."""
        held = [entry for entry in self.entries if entry is not None]
        was, count_was, held_was = self.progress_of
        if was is not earlier or count_was != len(earlier) or len(held) != len(held_was) or any(
                map(is_not, held, held_was)):
            self.progress = earlier + held
            self.progress_of = (earlier, len(earlier), held)
        return self.progress


def view_of(session: LoopSession, made: Made | None = None) -> LoopView:
    """The session's wire view, with the views of the iterations it holds (the latest ``iterations_kept``: a page of
    older ones is made from their events, :func:`older_iterations`) and its whole progress log. ``made``: what an
    earlier call made for the same session, reused for every iteration that is still the same object (an event
    replaces the iteration it changes) and brought up to date in place, so that a session's thousandth iteration does
    not rebuild the views of the iterations before it, nor walk them."""
    sid = str(session.id)
    made = Made() if made is None else made
    made.update(sid, session.iterations_dropped + 1, session.iterations)
    progress = made.progress_log(session.earlier_progress)
    return LoopView(
        id=sid, project_name=session.project_name, project_path=session.project_path, goal=session.goal,
        max_iterations=session.max_iterations, current_iteration=session.iteration_count, status=session.status,
        # The last progress line is the last ended iteration with a signal: ``LoopSession.last_signal``.
        last_signal=progress[-1].signal if progress else None, progress_log=progress,
        anchor_turn_id=session.anchor_turn_id, branch_name=session.branch_name, created_by=session.created_by,
        total_commits=session.total_commits, total_tokens_used=session.total_tokens_used,
        total_cost_usd=round(session.total_cost_usd, 6),
        context_strategy=session.context_strategy, notify=list(session.notify),
        created_at=datetime.fromisoformat(session.created_at), updated_at=datetime.fromisoformat(session.updated_at),
        status_reason=session.status_reason, pause_requested=session.pause_requested,
        worktree_path=session.branch.worktree_path if session.branch and not session.worktree_removed else None,
        max_tokens=session.max_tokens, max_cost_usd=session.max_cost_usd,
        iterations=list(made.views), iterations_total=session.iteration_count,
        base_commit=session.branch.base_commit if session.branch else None,
        forked_from=session.forked_from, forked_at_iteration=session.forked_at_iteration)


def page_numbers(view: LoopView, first: int | None = None, limit: int = ITERATIONS_PER_VIEW) -> range:
    """The numbers of the iterations a reply carries: ``limit`` from number ``first`` on, or the latest ``limit``."""
    total = view.iterations_total
    start = max(0, total - limit) if first is None else min(first - 1, total)
    return range(start + 1, min(start + limit, total) + 1)


def _first_held(view: LoopView) -> int:
    """The number of the first iteration ``view`` holds (one past the last when it holds none)."""
    return view.iterations[0].iteration_number if view.iterations else view.iterations_total + 1


def page_of(view: LoopView, first: int | None = None, limit: int = ITERATIONS_PER_VIEW) -> LoopView:
    """What a reply carries of ``view``: ``limit`` iterations from number ``first`` on, or the latest ``limit``, of
    those the view holds (the others, older: :func:`older_in`). Everything else (status, progress log, totals) is the
    whole session's."""
    numbers = page_numbers(view, first, limit)
    held = _first_held(view)
    if held == 1 and len(numbers) == view.iterations_total:
        return view
    low = max(numbers.start, held) - held
    return msgspec.structs.replace(view, iterations=view.iterations[low:max(low, numbers.stop - held)])


def older_in(view: LoopView, first: int | None = None, limit: int = ITERATIONS_PER_VIEW) -> range:
    """The numbers of the page's iterations older than those ``view`` holds (made by :func:`older_iterations`)."""
    numbers = page_numbers(view, first, limit)
    held = _first_held(view)
    return range(numbers.start, max(numbers.start, min(numbers.stop, held)))


def older_iterations(app: Any, session: LoopSession, numbers: range) -> list[IterationView]:
    """The views of iterations ``numbers``, which the state no longer holds (blocking), as a state holding them all
    makes them: their events (from the one that started the first to the last one before the iteration after the
    last: an iteration's events are one run of versions, but for a note or a status change among them) applied to a
    scratch copy of the session that holds every iteration it starts. A page costs its own events."""
    if not numbers:
        return []
    versions = session.started_versions
    low = versions[numbers.start - 1]
    high = versions[numbers.stop - 1] - 1 if numbers.stop <= len(versions) else session.version
    scratch = object.__new__(type(session))
    scratch.__dict__.update(session.__dict__)
    scratch.__dict__.update(
        iterations=[], iterations_dropped=numbers.start - 1, started_versions=array("q"), earlier_progress=[], notes=[],
        seen={}, _pending_events=[], iterations_kept=len(numbers) + 1)  # holds every iteration of the page
    scratch.__dict__.pop(SHARED, None)  # its containers above are its own
    scratch.version = low - 1
    for e in app.events.get(session.id, gt=low - 1, lte=high):
        e.mutate(scratch)
    sid = str(session.id)
    return [_iteration_view(sid, it) for it in scratch.iterations if it.number in numbers]


def summary_of(view: LoopView) -> LoopSummary:
    return LoopSummary(id=view.id, project_name=view.project_name, goal=view.goal, status=view.status,
                       current_iteration=view.current_iteration, max_iterations=view.max_iterations,
                       last_signal=view.last_signal, total_commits=view.total_commits, branch_name=view.branch_name,
                       updated_at=view.updated_at, created_at=view.created_at)


Settled = Callable[[str], tuple[int, list[NotifyTarget]]]
"""Session id → (max iterations, notification targets): fixed at start, looked up for the events that need them."""


def loop_to_contract(domain_event: DomainEvent, settled: Settled) -> Event | None:
    """The wire event for a LoopSession event; None for one that is not distributed."""
    e = domain_event
    sid = str(e.originator_id)
    base: dict[str, Any] = {"session_id": sid, "occurred_at": e.timestamp}
    if isinstance(e, LoopSession.Started):
        return LoopStarted(**base, project_name=e.project_name, project_path=e.project_path, goal=e.goal,
                           max_iterations=e.max_iterations, branch_name=e.branch_name, created_by=e.created_by,
                           context_strategy=e.context_strategy, anchor_turn_id=e.anchor_turn_id,
                           notify=[msgspec.convert(n, NotifyTarget) for n in e.notify])
    if isinstance(e, LoopSession.IterationStarted):
        limit, _ = settled(sid)
        return LoopIterationStarted(**base, iteration_number=e.number, max_iterations=limit,
                                    agent_session_id=e.agent_session_id, anchor_strategy=e.anchor["strategy"],
                                    anchor_turn_id=e.anchor.get("turn_id"), context_tokens=e.context_tokens)
    if isinstance(e, LoopSession.IterationEnded):
        limit, notify = settled(sid)
        return LoopIterationCompleted(**base, iteration_number=e.number, max_iterations=limit, status=e.status,
                                      signal=e.signal, signal_source=e.signal_source, output_summary=e.output_summary,
                                      reason=e.reason, commit_hash=e.commit_hash, files_changed=list(e.files_changed),
                                      tokens_used=e.tokens_used, cost_usd=e.cost_usd,
                                      anchor_hint_next=e.anchor_hint_next, notify=notify)
    if isinstance(e, LoopSession.Resumed):
        return LoopResumed(**base, message=e.message)
    if isinstance(e, LoopSession.StatusChanged):
        _, notify = settled(sid)
        reason = e.reason or e.status
        if e.status == "complete":
            return LoopCompleted(**base, reason=reason, iterations=e.iterations, commits=e.commits, notify=notify)
        if e.status == "blocked":
            return LoopBlocked(**base, reason=reason, iteration_number=e.iteration_number, notify=notify)
        if e.status == "failed":
            return LoopFailed(**base, reason=reason, iteration_number=e.iteration_number, notify=notify)
        if e.status == "aborted":
            return LoopAborted(**base, reason=reason, iteration_number=e.iteration_number)
        if e.status == "paused":
            return LoopPaused(**base, iteration_number=e.iteration_number)
    return None
