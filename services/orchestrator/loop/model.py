"""The LoopSession aggregate (seed 001 ``pulse_sessions`` and ``pulse_iterations`` as events and typed state).

Read this file and you know every event a loop session records. Commands check their rules first and raise
``LoopError`` before anything is recorded; the ``@event`` methods only apply state, so replaying them rebuilds
the session exactly. The driver (``loop_driver``) records each external step here before and after it acts, so
a restarted orchestrator picks every session up where it was and never runs an iteration twice.
"""

from __future__ import annotations

import uuid
from array import array
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate, event

from autarch.contracts.loops import (
    FINISHED_STATUSES,
    ITERATIONS_PER_VIEW,
    AnchorStrategy,
    ContextStrategy,
    CreatedBy,
    IterationStatus,
    LoopErrorCode,
    LoopStatus,
    NotifyTarget,
    ProgressEntry,
    Signal,
)
from autarch.runtime.aggregates import recorded_as

from ..refusal import Refusal

__all__ = ["Anchor", "Iteration", "LoopBranch", "LoopError", "LoopSession", "iteration_session_id", "progress_entry"]

_ITERATIONS = uuid.UUID("0b8f3a52-6c1d-4e7f-9a21-5d3c8b7e1f40")

_GROWING = ("started_versions", "earlier_progress", "notes", "seen")
"""The session's containers that grow with its history and that events only add to: a command's copy shares them
with the kept session and copies one only when an event adds to it (:meth:`LoopSession._growing`)."""
SHARED = "_shared_containers"
"""Which of :data:`_GROWING` a command's copy still shares with the kept session; one of its
``transient_attributes``, so it is never written into a snapshot."""

IterationEndKind = Literal["complete", "failed", "timeout"]
SignalSource = Literal["explicit", "inferred", "default", "breaker", "limit"]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def iteration_session_id(session_id: str, number: int) -> str:
    """The agent session of one iteration: deterministic, so a repeated start opens one session."""
    return str(uuid.uuid5(_ITERATIONS, f"{session_id}:{number}"))


class LoopError(Refusal):
    """A loop session's command refused in its current state (nothing is recorded)."""


class Anchor(msgspec.Struct, kw_only=True, frozen=True):
    """How an iteration's context was anchored (seed 001 "Resolution Priority") and the slice it used."""

    strategy: AnchorStrategy
    turn_id: str | None = None
    resolution_ms: float = 0.0
    salience: float | None = None
    depth: int | None = None
    slice_id: str | None = None
    slice_turn_ids: list[str] = []
    node_count: int = 0


class LoopBranch(msgspec.Struct, kw_only=True, frozen=True):
    """The session's branch and worktree, once the git service made them."""

    branch: str
    worktree_path: str
    base_commit: str
    repository_id: str


class Iteration(msgspec.Struct, kw_only=True):
    """One iteration: dispatched → running → (turn recorded) → its git step → complete | failed | timeout."""

    number: int
    status: IterationStatus
    task_content: str
    agent_session_id: str
    pulse_id: str
    """The git pulse of this iteration (``i<number>``): its worktree and, when files changed, its commit."""
    pulse_worktree: str
    base_commit: str
    anchor: Anchor
    context_tokens: int
    started_at: str
    kickoff_turn_id: str | None = None
    """Set once the agent runner confirmed the session (the turn runs)."""
    turn_id: str | None = None
    """The turn whose outcome was recorded (a turn event delivered twice is recognised by it)."""
    ending: IterationEndKind | None = None
    """Set when the turn's outcome is recorded, while the git step (commit or recovery) is pending."""
    signal: Signal | None = None
    signal_source: SignalSource | None = None
    reason: str | None = None
    output_summary: str | None = None
    output_full: str | None = None
    commit_subject: str | None = None
    commit_body: str = ""
    anchor_hint_next: str | None = None
    anchor_hint_reason: str | None = None
    tokens_used: int = 0
    cost_usd: float = 0.0
    commit_hash: str | None = None
    files_changed: list[str] = []
    ended_at: str | None = None
    session_closed: bool = False
    started_version: int = 0
    """The version of the event that started it (``LoopSession.started_versions`` holds it once this record is
    dropped)."""

    @property
    def id(self) -> str:
        return str(uuid.uuid5(_ITERATIONS, f"{self.agent_session_id}:iteration"))

    @property
    def over(self) -> bool:
        return self.ended_at is not None


class LoopSession(Aggregate):
    """A goal handed to agents that iterate on it unattended, one signalled iteration at a time."""

    forked_from: str | None = None
    """For a fork (``forks.py``): the session whose history up to iteration ``forked_at_iteration`` this one's
    history starts with."""
    forked_at_iteration: int | None = None
    transient_attributes: ClassVar[tuple[str, ...]] = (SHARED,)
    iterations_kept: ClassVar[int] = ITERATIONS_PER_VIEW
    """How many of the latest iterations the state holds the records of (issue 34): an older one leaves its progress
    line (every view carries the whole progress log), the version of the event that started it, and its part of the
    counts the rules read (commits, ended iterations, the no-progress breaker's runs); the rest of it (prompt, output,
    anchor, times) stays in its events, which a page of old iterations is made from (``views.older_iterations``). So a
    session of thousands of iterations is not held, snapshotted nor kept as a view with every record. The default
    page of a view (the latest ``ITERATIONS_PER_VIEW``) is made from the state alone; nothing decides on an older
    iteration but through those counts. At least 2: the iteration in flight and the one before it are read whole."""

    if TYPE_CHECKING:
        # The event classes the @event decorators below create when the class is built (mypy cannot see them).
        Forked: ClassVar[type[Any]]
        IterationEnded: ClassVar[type[Any]]
        IterationStarted: ClassVar[type[Any]]
        Resumed: ClassVar[type[Any]]
        Started: ClassVar[type[Any]]
        StatusChanged: ClassVar[type[Any]]
        TurnRecorded: ClassVar[type[Any]]

    @staticmethod
    def create_id(session_id: str, **_: object) -> UUID:
        return UUID(session_id)

    @event("Started")
    def __init__(self, *, session_id: str, project_name: str, project_path: str, goal: str, max_iterations: int,
                 anchor_turn_id: str | None, branch_name: str, base_branch: str, context_strategy: ContextStrategy,
                 notify: list[dict[str, Any]], created_by: CreatedBy, script: str | None, created_at: str,
                 max_tokens: int | None = None, max_cost_usd: float | None = None,
                 status: LoopStatus = "running") -> None:
        # ``status``: ``pending`` since sessions wait in it for their first iteration; a session recorded before
        # that has no status in its event and was running from its start.
        self.project_name = project_name
        self.project_path = project_path
        self.goal = goal
        self.max_iterations = max_iterations
        self.anchor_turn_id = anchor_turn_id
        self.branch_name = branch_name
        self.base_branch = base_branch
        self.context_strategy: ContextStrategy = context_strategy
        # The event keeps the targets' wire payload; the state is typed.
        self.notify = [msgspec.convert(n, NotifyTarget) for n in notify]
        self.created_by: CreatedBy = created_by
        self.script = script
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self.created_at = created_at
        self.updated_at = created_at
        self.status: LoopStatus = status
        self.status_reason: str | None = None
        self.pause_requested = False
        self.resume_message: str | None = None
        """The person's message on resume: it goes into the next iteration's prompt, then is cleared."""
        self.branch: LoopBranch | None = None
        self.iterations: list[Iteration] = []
        """The latest :attr:`iterations_kept` iterations (the first is number ``iterations_dropped + 1``)."""
        self.iterations_dropped = 0
        """How many of the first iterations the state no longer holds the records of."""
        self.started_versions = array("q")
        """Index n - 1: the version of the event that started iteration n (where a page of old iterations is read):
        8 bytes an iteration."""
        self.earlier_progress: list[ProgressEntry] = []
        """The progress lines of the iterations no longer held (all of them ended: one runs at a time)."""
        self.iterations_ended = 0
        self.commits = 0
        """How many iterations have a commit (``total_commits``)."""
        self.dropped_runs: tuple[int, str | None, int] = (0, None, 0)
        """The runs the iterations no longer held end with, for the no-progress breaker: how many of the last of them
        failed (or timed out) with the same reason, that reason, and how many in a row committed nothing."""
        self.worktree_removed = False
        self.worktree_left: str | None = None
        """Why the session's worktree could not be removed when it ended (its repository is gone, or git refused for
        good), if so: it is left where it is."""
        self.total_tokens_used = 0
        self.total_cost_usd = 0.0
        self.notes: list[str] = []
        """Notes the session's agents took (``take_note``): every later iteration is shown them."""
        self.seen: dict[str, str] = {}
        """Idempotency key of a note → its id (a tool call delivered twice records one note)."""

    # --- events -------------------------------------------------------------------------------------

    @event("BranchPrepared")
    def branch_prepared(self, *, branch: str, worktree_path: str, base_commit: str, repository_id: str,
                        at: str) -> None:
        self.branch = LoopBranch(branch=branch, worktree_path=worktree_path, base_commit=base_commit,
                                 repository_id=repository_id)
        self.updated_at = at

    @event("IterationStarted")
    def _iteration_started(self, *, number: int, task_content: str, agent_session_id: str, pulse_id: str,
                           pulse_worktree: str, base_commit: str, anchor: dict[str, Any], context_tokens: int,
                           at: str) -> None:
        version = self.version + 1  # the event is applied before the version is counted
        self._growing("started_versions").append(version)
        self.iterations.append(Iteration(
            number=number, status="dispatched", task_content=task_content, agent_session_id=agent_session_id,
            pulse_id=pulse_id, pulse_worktree=pulse_worktree, base_commit=base_commit,
            anchor=msgspec.convert(anchor, Anchor), context_tokens=context_tokens, started_at=at,
            started_version=version))
        if len(self.iterations) > self.iterations_kept:
            # Only the iteration in flight and the latest before it are read whole; this one is over (one runs at
            # a time): what is left of it is its progress line and its part of the counts.
            self._drop(self.iterations.pop(0))
        if self.status == "pending":
            self.status = "running"  # the first iteration starts: the session is no longer waiting for it
        self.resume_message = None
        self.updated_at = at

    @event("IterationRunning")
    def iteration_running(self, *, number: int, kickoff_turn_id: str | None, at: str) -> None:
        self._change(number, status="running", kickoff_turn_id=kickoff_turn_id)
        self.updated_at = at

    @event("TurnRecorded")
    def _turn_recorded(self, *, number: int, turn_id: str, ending: IterationEndKind, signal: Signal,
                       signal_source: SignalSource, reason: str | None, output_summary: str, output_full: str,
                       commit_subject: str, commit_body: str, anchor_hint_next: str | None,
                       anchor_hint_reason: str | None, tokens_used: int, cost_usd: float, at: str) -> None:
        self._change(number, turn_id=turn_id, ending=ending, signal=signal, signal_source=signal_source, reason=reason,
                     output_summary=output_summary, output_full=output_full, commit_subject=commit_subject,
                     commit_body=commit_body, anchor_hint_next=anchor_hint_next, anchor_hint_reason=anchor_hint_reason,
                     tokens_used=tokens_used, cost_usd=cost_usd)
        self.total_tokens_used += tokens_used
        self.total_cost_usd += cost_usd
        self.updated_at = at

    @event("IterationEnded")
    def _iteration_ended(self, *, number: int, status: IterationStatus, commit_hash: str | None,
                         files_changed: list[str], at: str, signal: Signal, signal_source: SignalSource,
                         reason: str | None, output_summary: str, tokens_used: int, cost_usd: float,
                         anchor_hint_next: str | None) -> None:
        # The event repeats the turn's outcome (signal, summary, …) for subscribers: ``loop:iteration_completed``.
        # ``reason``: the turn's, or why the session failed at this iteration's git step.
        before = self._held(number)
        if before is not None:
            self.iterations_ended += not before.over
            self.commits += (commit_hash is not None) - (before.commit_hash is not None)
        self._change(number, status=status, reason=reason, commit_hash=commit_hash, files_changed=list(files_changed),
                     ending=None, ended_at=at)
        self.updated_at = at

    @event("IterationSessionClosed")
    def iteration_session_closed(self, *, number: int) -> None:
        self._change(number, session_closed=True)

    @event("StatusChanged")
    def _status_changed(self, *, status: LoopStatus, reason: str | None, at: str, iteration_number: int,
                        iterations: int, commits: int) -> None:
        # ``iteration_number`` (the current one), ``iterations`` (ended) and ``commits`` are for subscribers.
        self.status = status
        self.status_reason = reason
        if status != "running":
            self.pause_requested = False
        self.updated_at = at

    @event("PauseRequested")
    def _pause_requested(self, *, at: str) -> None:
        self.pause_requested = True
        self.updated_at = at

    @event("Resumed")
    def _resumed(self, *, message: str | None, at: str) -> None:
        self.status = "running"
        self.status_reason = None
        self.resume_message = message
        self.updated_at = at

    @event("WorktreeRemoved")
    def worktree_removed_event(self) -> None:
        self.worktree_removed = True

    @event("WorktreeLeft")
    def worktree_left_event(self, *, reason: str, at: str) -> None:
        self.worktree_left = reason
        self.updated_at = at

    @event("NoteTaken")
    def _note_taken(self, *, note_id: str, agent_session_id: str, note: str, taken_at: str, key: str) -> None:
        self._growing("notes").append(note)
        self._growing("seen")[key] = note_id

    @event("Forked")
    def _forked(self, *, forked_from: str, at_iteration: int, branch: dict[str, Any], script: str | None,
                closed: list[int], at: str) -> None:
        # The first event of a fork's own, after the copied history: its branch and worktree (cut where the
        # original's branch was after that iteration), the original's agent sessions counted closed (the original
        # closes its own), and running again from the next iteration whatever the original decided after it.
        self.forked_from, self.forked_at_iteration = forked_from, at_iteration
        self.branch = msgspec.convert(branch, LoopBranch)
        self.branch_name, self.script = self.branch.branch, script
        self.worktree_removed, self.worktree_left = False, None
        for number in closed:
            self._change(number, session_closed=True)
        self.status, self.status_reason, self.pause_requested = "running", None, False
        self.updated_at = at

    def _change(self, number: int, **changes: Any) -> None:
        """Put iteration ``number`` with ``changes`` in its place. An iteration is replaced, never changed in place,
        so a copy of the session (:meth:`copy_for_change`) shares every iteration a command does not change. An
        iteration no longer held is not changed: what can come for it (its agent session closed late, a fork counting
        it closed) is in no view nor rule."""
        index = number - 1 - self.iterations_dropped
        if index >= 0:
            self.iterations[index] = msgspec.structs.replace(self.iterations[index], **changes)

    def _held(self, number: int) -> Iteration | None:
        index = number - 1 - self.iterations_dropped
        return self.iterations[index] if 0 <= index < len(self.iterations) else None

    def _drop(self, it: Iteration) -> None:
        """Keep of the oldest held iteration, ``it``, what the views and rules read of it."""
        self.iterations_dropped += 1
        if it.over and it.signal is not None:
            self._growing("earlier_progress").append(progress_entry(it))
        failures, reason, idle = self.dropped_runs
        if it.status not in ("failed", "timeout"):
            failures, reason = 0, None
        elif failures and reason == it.reason:
            failures += 1
        else:
            failures, reason = 1, it.reason
        idle = idle + 1 if it.over and it.commit_hash is None else 0
        self.dropped_runs = (failures, reason, idle)

    def copy_for_change(self) -> LoopSession:
        """A copy a command may change while this one stays as it is (``latest.py``), at the cost of copying its
        small lists and dicts, not their items: every event replaces what it changes (an iteration, the branch)
        or changes only lists, dicts and arrays. Those that grow with the session's history are shared until an
        event adds to one (:meth:`_growing`): copied for every command, they made a command at 30,000 iterations
        cost three times one at 300."""
        copy = object.__new__(type(self))
        copy.__dict__.update({name: value.copy() if type(value) in (list, dict) and name not in _GROWING else value
                              for name, value in self.__dict__.items()})
        copy.__dict__[SHARED] = set(_GROWING)
        return copy

    def _growing(self, name: str) -> Any:
        """The container ``name`` (one of :data:`_GROWING`) to add to: this copy's own, copied first while it is
        still shared with the kept session."""
        value = self.__dict__[name]
        shared: set[str] | None = self.__dict__.get(SHARED)
        if shared is not None and name in shared:
            shared.discard(name)
            value = self.__dict__[name] = value[:] if type(value) is array else value.copy()
        return value

    # --- commands -----------------------------------------------------------------------------------

    def start_iteration(self, *, task_content: str, pulse_worktree: str, base_commit: str, anchor: Anchor,
                        context_tokens: int) -> Iteration:
        number = self.iteration_count + 1
        self._iteration_started(number=number, task_content=task_content,
                                agent_session_id=iteration_session_id(str(self.id), number),
                                pulse_id=f"i{number}", pulse_worktree=pulse_worktree, base_commit=base_commit,
                                anchor=msgspec.to_builtins(anchor), context_tokens=context_tokens, at=_now())
        return self.iterations[-1]

    def record_turn(self, number: int, *, turn_id: str, ending: IterationEndKind, signal: Signal,
                    signal_source: SignalSource, reason: str | None, output_summary: str, output_full: str,
                    commit_subject: str, commit_body: str, anchor_hint_next: str | None,
                    anchor_hint_reason: str | None, tokens_used: int, cost_usd: float) -> bool:
        """Record the outcome of iteration ``number``'s turn; False when it is already recorded."""
        it = self.iteration(number)
        if it.turn_id is not None or it.over:
            return False
        self._turn_recorded(number=number, turn_id=turn_id, ending=ending, signal=signal,
                            signal_source=signal_source, reason=reason, output_summary=output_summary,
                            output_full=output_full, commit_subject=commit_subject, commit_body=commit_body,
                            anchor_hint_next=anchor_hint_next, anchor_hint_reason=anchor_hint_reason,
                            tokens_used=tokens_used, cost_usd=cost_usd, at=_now())
        return True

    def end_iteration(self, number: int, *, commit_hash: str | None, files_changed: list[str],
                      no_progress_limit: int) -> None:
        """The iteration's git step is done: record it, then branch on its signal (seed 001 "Record + Branch")."""
        it = self.iteration(number)
        assert it.ending is not None and it.signal is not None, "the turn is recorded before the git step"
        status: IterationStatus = it.ending
        assert it.signal_source is not None
        self._iteration_ended(number=number, status=status, commit_hash=commit_hash, files_changed=files_changed,
                              at=_now(), signal=it.signal, signal_source=it.signal_source, reason=it.reason,
                              output_summary=it.output_summary or "", tokens_used=it.tokens_used,
                              cost_usd=it.cost_usd, anchor_hint_next=it.anchor_hint_next)
        it = self.iteration(number)  # the event replaced it
        if self.status != "running":
            return  # aborted meanwhile: the abort already decided the session's status
        if it.signal == "COMPLETE":
            self._set_status("complete", "the agent signalled COMPLETE")
        elif it.signal == "BLOCKED":
            self._set_status("blocked", it.reason or "the agent signalled BLOCKED")
        elif (stalled := self.no_progress(no_progress_limit)) is not None:
            self._set_status("blocked", stalled)
        elif (spent := self.budget_spent()) is not None:
            self._set_status("blocked", spent)
        elif number >= self.max_iterations:
            self._set_status("complete", f"max iterations reached ({self.max_iterations})")
        elif self.pause_requested:
            self._set_status("paused", "paused by the user")

    def no_progress(self, limit: int) -> str | None:
        """Why the no-progress breaker trips after the last iteration, or None.

        Beyond the seed: ``limit`` iterations in a row that committed nothing, or that ended with the same failure,
        mean the loop is spinning; a person should look before more tokens go into it.
        """
        if limit <= 0 or self.iteration_count < limit:
            return None
        last = self.iterations[-limit:]
        earlier = limit - len(last)  # the run goes on into the iterations no longer held (``dropped_runs``)
        failures, failure, idle = self.dropped_runs
        reasons = {it.reason for it in last} | ({failure} if earlier else set())
        if (all(it.status in ("failed", "timeout") for it in last) and failures >= earlier
                and len(reasons) == 1):
            return f"no progress: {limit} iterations in a row ended with the same error: {reasons.pop()}"
        if all(it.over and it.commit_hash is None for it in last) and idle >= earlier:
            return f"no progress: {limit} iterations in a row committed nothing"
        return None

    def budget_spent(self) -> str | None:
        """Why the session's budget allows no further iteration, or None."""
        if self.max_tokens is not None and self.total_tokens_used >= self.max_tokens:
            return f"token budget spent ({self.total_tokens_used:,} of {self.max_tokens:,} tokens)"
        if self.max_cost_usd is not None and self.total_cost_usd >= self.max_cost_usd:
            return f"cost budget spent (${self.total_cost_usd:.4f} of ${self.max_cost_usd:.4f})"
        return None

    def take_note(self, *, agent_session_id: str, note: str, key: str) -> str:
        """Keep a note for the session's later iterations; the note id (the first one's, for a repeated key)."""
        if key in self.seen:
            return self.seen[key]
        note_id = str(uuid.uuid4())
        self._note_taken(note_id=note_id, agent_session_id=agent_session_id, note=note, taken_at=_now(), key=key)
        return note_id

    def fail(self, reason: str) -> None:
        """The session cannot go on (its repository is gone): the open iteration ends ``failed`` without a commit,
        then the session. An aborted session stays aborted (the person's stop decided it); its iteration ends."""
        self._end_without_commit(reason)
        if not self.finished:
            self._set_status("failed", reason)

    def block(self, reason: str) -> None:
        """A step failed for a reason a retry will not fix: wait for a person (resume tries again). An iteration
        whose turn had ended but whose git step failed ends without a commit, so that the step is not tried again."""
        it = self.current_iteration()
        if it is not None and not it.over and it.ending is not None:
            self._end_without_commit(reason)
        if self.status in ("pending", "running"):
            self._set_status("blocked", reason)

    def _end_without_commit(self, reason: str) -> None:
        """End the open iteration ``failed``, keeping what its turn recorded (its signal, its output) if it ended."""
        it = self.current_iteration()
        if it is None or it.over:
            return
        if it.ending is None:
            self._turn_recorded(number=it.number, turn_id=it.turn_id or f"failed:{it.number}", ending="failed",
                                signal="BLOCKED", signal_source="limit", reason=reason, output_summary=reason,
                                output_full="", commit_subject="", commit_body="", anchor_hint_next=None,
                                anchor_hint_reason=None, tokens_used=0, cost_usd=0.0, at=_now())
            it = self.iteration(it.number)  # the event replaced it
        assert it.signal is not None and it.signal_source is not None
        self._iteration_ended(number=it.number, status="failed", commit_hash=None, files_changed=[], at=_now(),
                              signal=it.signal, signal_source=it.signal_source, reason=reason,
                              output_summary=it.output_summary or "", tokens_used=it.tokens_used,
                              cost_usd=it.cost_usd, anchor_hint_next=it.anchor_hint_next)

    def leave_worktree(self, reason: str) -> None:
        """The ended session's worktree cannot be removed (its repository is gone, or git refuses for good): say so
        once, stop trying."""
        if self.worktree_left is None and not self.worktree_removed:
            self.worktree_left_event(reason=reason, at=_now())

    def request_pause(self) -> None:
        self._check_open("pause")
        if self.status not in ("pending", "running"):
            raise LoopError(LoopErrorCode.NOT_RUNNING, f"the session is {self.status}, not running: nothing to pause",
                            status=self.status)
        if self.pause_requested:
            return
        current = self.current_iteration()
        if current is None or current.over:
            self._set_status("paused", "paused by the user")  # between iterations: pause at once
        else:
            self._pause_requested(at=_now())

    def resume(self, message: str | None) -> None:
        self._check_open("resume")
        if self.status not in ("blocked", "paused"):
            raise LoopError(LoopErrorCode.NOT_RESUMABLE,
                            f"the session is {self.status}: only a blocked or paused session can be resumed",
                            status=self.status)
        self._resumed(message=message, at=_now())

    def abort(self, reason: str, *, blocked_at: int | None = None) -> Iteration | None:
        """Stop the session; the iteration still running (its turn is cancelled by the driver), if any.
        ``blocked_at``: only while the session is still blocked at that iteration (a Stop link's check)."""
        if blocked_at is not None and (self.status != "blocked" or self.iteration_count != blocked_at):
            raise LoopError(LoopErrorCode.CARD_MOVED_ON, f"the block this stops (at iteration {blocked_at}) is over: "
                            f"the session is {self.status} at iteration {self.iteration_count}",
                            status=self.status)
        self._check_open("abort")
        current = self.current_iteration()
        running = current if current is not None and not current.over else None
        if running is not None and running.ending is None:
            self._turn_recorded(number=running.number, turn_id=running.turn_id or "aborted", ending="failed",
                                signal="BLOCKED", signal_source="limit", reason=reason, output_summary=reason,
                                output_full="", commit_subject="", commit_body="", anchor_hint_next=None,
                                anchor_hint_reason=None, tokens_used=0, cost_usd=0.0, at=_now())
        self._set_status("aborted", reason)
        return running

    def _set_status(self, status: LoopStatus, reason: str | None) -> None:
        self._status_changed(status=status, reason=reason, at=_now(), iteration_number=self.iteration_count,
                             iterations=self.iterations_ended, commits=self.commits)

    def _check_open(self, what: str) -> None:
        if self.status in FINISHED_STATUSES:
            raise LoopError(LoopErrorCode.FINISHED, f"the session is {self.status}: it cannot {what}",
                            status=self.status)

    # --- queries ------------------------------------------------------------------------------------

    @property
    def iteration_count(self) -> int:
        """How many iterations started (the number of the latest)."""
        return self.iterations_dropped + len(self.iterations)

    def iteration(self, number: int) -> Iteration:
        """Iteration ``number``, one of the latest :attr:`iterations_kept` (an older one: ``IndexError``)."""
        held = self._held(number)
        if held is None:
            raise IndexError(f"iteration {number} is not held (the latest {self.iterations_kept} are)")
        return held

    def current_iteration(self) -> Iteration | None:
        return self.iterations[-1] if self.iterations else None

    def iteration_of_session(self, agent_session_id: str) -> Iteration | None:
        return next((it for it in self.iterations if it.agent_session_id == agent_session_id), None)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def settled(self) -> bool:
        """Over, with nothing left to clean up (its worktree removed, or left where its repository went)."""
        return self.finished and (self.branch is None or self.worktree_removed or self.worktree_left is not None)

    @property
    def total_commits(self) -> int:
        return self.commits

    @property
    def last_signal(self) -> Signal | None:
        last = self.progress_log(last=1)
        return last[0].signal if last else None

    def progress_log(self, last: int | None = None) -> list[ProgressEntry]:
        """What the ended iterations did; only the ``last`` of them when given (read from the end: a prompt shows a
        few of a thousand)."""
        entries: list[ProgressEntry] = []
        for it in reversed(self.iterations):
            if last is not None and len(entries) >= last:
                break
            if it.over and it.signal is not None:
                entries.append(progress_entry(it))
        entries.reverse()
        earlier = self.earlier_progress
        wanted = len(earlier) if last is None else min(len(earlier), max(0, last - len(entries)))
        return earlier[len(earlier) - wanted:] + entries if wanted else entries


def progress_entry(it: Iteration) -> ProgressEntry:
    """An ended iteration's line of the session's progress log."""
    assert it.signal is not None, "an ended iteration has its signal"
    return ProgressEntry(iteration=it.number, signal=it.signal, summary=it.output_summary or "",
                         commit_hash=it.commit_hash, turn_id=it.turn_id)


# Until this module moved here, its events were stored as events of ``loop_model`` (their topics say so).
recorded_as(__name__, "autarch.services.orchestrator.loop_model")

