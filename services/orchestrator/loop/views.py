"""Wire views of loop sessions (``LoopView``) and the ``loop:*`` events their stored events become."""

from __future__ import annotations

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

from .model import Anchor, Iteration, LoopSession, progress_entry

__all__ = ["Made", "dropped_in", "iteration_texts", "loop_to_contract", "page_of", "summary_of", "view_of",
           "with_texts"]


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


def _dropped(it: Iteration) -> Iteration:
    """``it`` as it is once its texts are dropped (``LoopSession._iteration_started``)."""
    return msgspec.structs.replace(it, task_content="", output_full=None, commit_body="", texts_dropped=True,
                                   anchor=msgspec.structs.replace(it.anchor, slice_turn_ids=[]))


class Made:
    """What :func:`view_of` last made for one session: each iteration it was made from with its wire view and
    progress line, and running counts, so that a view made again after an event costs what changed, not the
    session's length (a session of a thousand iterations is made again several times per iteration)."""

    def __init__(self) -> None:
        self.iterations: list[Iteration] = []
        self.views: list[IterationView] = []
        self.entries: list[ProgressEntry | None] = []
        self.progress: list[ProgressEntry] = []
        """The progress lines of ``entries`` that are not None, in order."""
        self.progress_before: list[int] = [0]
        """Index i: how many of ``progress`` belong to the iterations before the i-th (one more item than those)."""
        self.commits_before: list[int] = [0]
        """Index i: how many iterations before the i-th have a commit."""

    def update(self, session_id: str, iterations: list[Iteration]) -> None:
        """Bring what was made up to ``iterations``: from the first one that is not the object a view was made from
        on (an event replaces the iteration it changes), reusing the views of those that still are."""
        old = self.iterations
        same = min(len(old), len(iterations))
        # The first index whose iteration was replaced, found without a Python-level step per iteration.
        first = next(compress(count(), map(is_not, iterations, old)), same)
        kept_views, kept_entries = self.views[first:], self.entries[first:]
        del self.views[first:], self.entries[first:], self.progress[self.progress_before[first]:]
        del self.progress_before[first + 1:], self.commits_before[first + 1:]
        for offset, it in enumerate(iterations[first:]):
            index = first + offset
            if index < len(old) and old[index] is it:
                view, entry = kept_views[offset], kept_entries[offset]
            elif index < len(old) and it.texts_dropped and _dropped(old[index]) == it:
                # Only its texts were dropped (``LoopSession.texts_kept``): its view without them, its line as it was.
                view, entry = msgspec.structs.replace(kept_views[offset], task_content="", output_full=None,
                                                      slice_turn_ids=[]), kept_entries[offset]
            else:
                view = _iteration_view(session_id, it)
                entry = progress_entry(it) if it.over and it.signal is not None else None
            self.views.append(view)
            self.entries.append(entry)
            if entry is not None:
                self.progress.append(entry)
            self.progress_before.append(len(self.progress))
            self.commits_before.append(self.commits_before[-1] + (it.commit_hash is not None))
        self.iterations = list(iterations)


def view_of(session: LoopSession, made: Made | None = None) -> LoopView:
    """The session's wire view. ``made``: what an earlier call made for the same session, reused for every iteration
    that is still the same object (an event replaces the iteration it changes) and brought up to date in place, so
    that a session's thousandth iteration does not rebuild the views of the 999 before it, nor walk them."""
    sid = str(session.id)
    made = Made() if made is None else made
    made.update(sid, session.iterations)
    progress = list(made.progress)
    return LoopView(
        id=sid, project_name=session.project_name, project_path=session.project_path, goal=session.goal,
        max_iterations=session.max_iterations, current_iteration=len(session.iterations), status=session.status,
        # The last progress line is the last ended iteration with a signal: ``LoopSession.last_signal``.
        last_signal=progress[-1].signal if progress else None, progress_log=progress,
        anchor_turn_id=session.anchor_turn_id, branch_name=session.branch_name, created_by=session.created_by,
        total_commits=made.commits_before[-1], total_tokens_used=session.total_tokens_used,
        total_cost_usd=round(session.total_cost_usd, 6),
        context_strategy=session.context_strategy, notify=list(session.notify),
        created_at=datetime.fromisoformat(session.created_at), updated_at=datetime.fromisoformat(session.updated_at),
        status_reason=session.status_reason, pause_requested=session.pause_requested,
        worktree_path=session.branch.worktree_path if session.branch and not session.worktree_removed else None,
        max_tokens=session.max_tokens, max_cost_usd=session.max_cost_usd,
        iterations=list(made.views), iterations_total=len(made.views),
        base_commit=session.branch.base_commit if session.branch else None,
        forked_from=session.forked_from, forked_at_iteration=session.forked_at_iteration)


def page_of(view: LoopView, first: int | None = None, limit: int = ITERATIONS_PER_VIEW) -> LoopView:
    """What a reply carries of ``view``: ``limit`` iterations from number ``first`` on, or the latest ``limit``.
    Everything else (status, progress log, totals) is the whole session's."""
    total = len(view.iterations)
    start = max(0, total - limit) if first is None else min(first - 1, total)
    if start == 0 and total <= limit:
        return view
    return msgspec.structs.replace(view, iterations=view.iterations[start:start + limit])


def dropped_in(page: LoopView) -> list[int]:
    """The iterations of ``page`` whose large texts the state no longer holds (``LoopSession.texts_kept``): all but
    the latest ``texts_kept`` of the session."""
    last_dropped = page.iterations_total - LoopSession.texts_kept
    return [it.iteration_number for it in page.iterations if it.iteration_number <= last_dropped]


Texts = dict[int, tuple[str, list[str], str | None]]
"""Iteration number → (its prompt, its slice's turn ids, its full output) as its events recorded them."""


def iteration_texts(app: Any, session: LoopSession, numbers: list[int]) -> Texts:
    """The large texts of iterations ``numbers`` (blocking): read from the session's events of those iterations only,
    from the one that started the first to the last one before the iteration after the last (an iteration's events
    are one run of versions, but for a note or a status change among them), so a page costs its own events."""
    if not numbers:
        return {}
    wanted = set(numbers)
    low = session.iteration(min(numbers)).started_version
    after = max(numbers) + 1
    high = session.iteration(after).started_version - 1 if after <= len(session.iterations) else session.version
    texts: Texts = {}
    outputs: dict[int, str | None] = {}
    for e in app.events.get(session.id, gt=low - 1, lte=high):
        number = getattr(e, "number", None)
        if number not in wanted:
            continue
        if isinstance(e, LoopSession.IterationStarted):
            texts[number] = (e.task_content, list(msgspec.convert(e.anchor, Anchor).slice_turn_ids), None)
        elif isinstance(e, LoopSession.TurnRecorded):
            outputs[number] = e.output_full  # the last one recorded is the state's, as in a replay
    return {n: (task, turn_ids, outputs.get(n)) for n, (task, turn_ids, _) in texts.items()}


def with_texts(page: LoopView, texts: Texts) -> LoopView:
    """``page`` with the texts of its iterations in ``texts`` put back: the reply a state holding them all makes."""
    if not texts:
        return page
    iterations = [it if it.iteration_number not in texts else msgspec.structs.replace(
        it, task_content=texts[it.iteration_number][0], slice_turn_ids=texts[it.iteration_number][1],
        output_full=texts[it.iteration_number][2]) for it in page.iterations]
    return msgspec.structs.replace(page, iterations=iterations)


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
