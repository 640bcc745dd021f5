"""The loop driver: runs each loop session's iterations (seed 001 "Iteration Pipeline").

Like the workflow driver it keeps no state of its own: what to do next is a function of the session's recorded
state (:func:`next_step`), and each step is an idempotent request (the git pulse ``i<n>``, a deterministic agent
session id) followed by recording its result. A driver killed between the two redoes the request after a restart
and gets the same answer, so no iteration runs twice and none is lost.

An iteration: build its context (anchor, slice, prompt) → start the git pulse ``i<n>`` (its worktree) → record
the iteration → start the agent session (role ``loop``) → the turn ends (``turn:completed`` on the stream) →
record its signal and output → commit when files changed (else discard the pulse) → branch on the signal.

A session waits ``pending`` from its start until its first iteration is recorded. A step that cannot succeed
blocks the session for a person (``resume`` tries again), except when the project repository is gone or no longer
a git repository, or the git service no longer knows the session's branch: nothing a person does to the session
brings its branch back, so it ends ``failed`` (:func:`failure_of`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Literal, TypeVar

import msgspec
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.agents import (
    GetSession,
    SessionView,
    StartSession,
    TurnAccepted,
)
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import TurnCompleted
from autarch.contracts.git import (
    CheckpointPulse,
    GitErrorCode,
    PulseCheckpointed,
    RecoveryCheckpoint,
    RecoveryCheckpointed,
    RemoveWorktree,
    StartPulse,
    WorktreeRemoved,
)
from autarch.contracts.git import PulseStarted as GitPulseStarted
from autarch.contracts.turns import RecordTurns, TurnRecord, TurnsRecorded
from autarch.runtime.errors import RemoteError, ServiceFailure
from autarch.runtime.requests import request
from autarch.runtime.service_gate import gate_for
from autarch.runtime.settings import OrchestratorSettings

from ..caught_up import turn_completed
from ..partition import WHOLE, Partition
from ..stepping import RETRIED, TURN_ACK_WAIT, Stepper, TurnFeed, ask_service, stop_agent_session
from . import signals
from .book import LoopBook
from .context import build_context, estimate_tokens
from .model import Iteration, IterationEndKind, LoopSession, SignalSource

__all__ = ["LoopDriver", "failure_of", "next_step"]

log = logging.getLogger("orchestrator.loops")

_CONSUMER = "orchestrator-loop-turns"

Step = Callable[[], Awaitable[None]]
T = TypeVar("T")


def _now() -> str:
    return datetime.now(UTC).isoformat()


_GONE = {
    GitErrorCode.NOT_A_REPOSITORY: "the project repository is gone or no longer a git repository",
    ErrorCode.NOT_FOUND: "the git service no longer knows the session's branch",
}
"""The git service's answers after which the session cannot go on: its branch and commits lived there."""


def failure_of(exc: RemoteError) -> str | None:
    """Why the session cannot go on after ``exc``, or None when a retry or a person can still fix what failed.

    Only the git service's answers end a session: any other service refusing, the model API refusing every retry
    (a bad key, an outage), a refusal or a spent budget leave the session ``blocked``, for a person to fix and resume.
    """
    if subjects.service_of(exc.subject) != "git":
        return None
    what = _GONE.get(exc.code)
    return f"{what}: {exc.message}" if what is not None else None


def next_step(driver: LoopDriver, session: LoopSession) -> Step | None:
    """The one external step ``session`` needs now, or None while it waits (for its agent, a person, or nothing)."""
    sid = str(session.id)
    it = session.current_iteration()
    if it is not None and not it.over:
        if it.ending is not None:
            return partial(driver.git_step, sid, it)
        if session.finished:
            return None  # aborted: ``abort`` recorded the ending; nothing else is started
        if it.kickoff_turn_id is None:
            return partial(driver.start_agent, sid, it)
        return None  # the agent's turn runs
    if it is not None and not it.session_closed:
        return partial(driver.close_agent, sid, it)
    if session.finished:
        if not session.settled:
            return partial(driver.remove_worktree, sid)
        return None
    if session.status not in ("pending", "running"):
        return None
    return partial(driver.start_iteration, sid)


class LoopDriver:
    """Advances every loop session; one session's steps and turn outcomes are handled one at a time."""

    def __init__(self, *, nc: Client, book: LoopBook, settings: OrchestratorSettings,
                 partition: Partition = WHOLE, steps: Stepper | None = None) -> None:
        """
        Args:
            book: the loop sessions it runs (their reads, changes and views).
            steps: what the sessions' book kicks when a session changed (by default one of its own).
        """
        self.nc = nc
        self.book = book
        self.settings = settings
        self.partition = partition
        """The share of the loop sessions this driver advances (its turn consumer hands on only theirs)."""
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._feed = TurnFeed(nc, durable=_CONSUMER, kind="loop", partition=partition,
                              on_turn=lambda event: self.on_turn(event), log=log)
        self.steps = steps or Stepper(kind="loop", log=log, gate=gate_for(nc))

    # --- running -------------------------------------------------------------------------------------

    async def start(self, session_ids: list[str]) -> None:
        self.steps.start(advance=self._advance, fail=self._block)
        await self._feed.start(self._watch_time_limits(), self.steps, session_ids, self.kick, self.catch_up)

    async def stop(self) -> None:
        await self._feed.stop(self.steps)

    async def catch_up(self, session_id: str) -> None:
        """Record the turn of a running iteration that ended while no orchestrator was there to see it.

        Its ``turn:completed`` is redelivered after ``ack_wait`` anyway; asking the agent runner at start saves
        that wait. Best effort.
        """
        session = await self.book.read(session_id)
        it = session.current_iteration()
        if it is None or it.over or it.ending is not None or it.kickoff_turn_id is None:
            return
        try:
            view = await request(self.nc, subjects.request("agent_runner", "get_session"),
                                 GetSession(session_id=it.agent_session_id), SessionView,
                                 timeout=self.settings.request_timeout, retry_unavailable=TURN_ACK_WAIT,
                                 idempotent=True)
        except (RemoteError, ServiceFailure) as exc:
            log.info("loop %s: iteration %d not caught up (%s)", session_id, it.number, exc)
            return
        for turn in view.turns:
            if turn.outcome is None:
                continue
            await self.on_turn(turn_completed(session_id, view, turn))

    def kick(self, session_id: str) -> None:
        """Make sure ``session_id`` is advanced soon (coalesces kicks that come while it advances)."""
        self.steps.kick(session_id)

    async def _advance(self, session_id: str) -> None:
        while not self.steps.stopping:
            async with self._locks[session_id]:
                session = await self.book.read(session_id)
                step = next_step(self, session)
                if step is None:
                    return
                try:
                    await step()
                except RemoteError as exc:
                    if (reason := failure_of(exc)) is None:
                        raise
                    await self._fail(session_id, reason)

    async def _fail(self, session_id: str, reason: str) -> None:
        """The session cannot go on: its open iteration ends without a commit and the session ``failed``."""
        log.warning("loop %s fails: %s", session_id, reason)
        await self.book.change(session_id, lambda s: s.fail(reason))

    async def _block(self, session_id: str, reason: str) -> None:
        """A step failed for a reason a retry will not fix: the session waits for a person (resume retries)."""
        log.warning("loop %s blocks: %s", session_id, reason)

        def record(s: LoopSession) -> None:
            it = s.current_iteration()
            if it is not None and not it.over and it.ending is None and it.kickoff_turn_id is None:
                # The agent could not be started: end the iteration as failed so a resume starts a new one.
                s.record_turn(it.number, turn_id=f"unstarted:{it.number}", ending="failed", signal="BLOCKED",
                              signal_source="limit", reason=reason, output_summary=reason, output_full="",
                              commit_subject="", commit_body="", anchor_hint_next=None, anchor_hint_reason=None,
                              tokens_used=0, cost_usd=0.0)
            else:
                s.block(reason)

        await self.book.change(session_id, record)

    async def _ask(self, service: str, verb: str, payload: msgspec.Struct, reply: type[T]) -> T:
        return await ask_service(self.nc, self.settings, service, verb, payload, reply)

    async def _ask_memory(self, verb: str, payload: msgspec.Struct, reply: type[T]) -> T:
        # No retries: without a reachable indexer the iteration goes on without the turn memory.
        return await request(self.nc, subjects.request("indexer", verb), payload, reply,
                             timeout=self.settings.loop_memory_timeout)

    # --- steps ---------------------------------------------------------------------------------------

    async def start_iteration(self, session_id: str) -> None:
        session = await self.book.read(session_id)
        number = session.iteration_count + 1
        # The context (the turn memory) and the worktree (git) do not depend on each other: ask both at once.
        context, started = await asyncio.gather(
            build_context(session, self._ask_memory),
            self._ask("git", "start_pulse", StartPulse(run_id=session_id, pulse_id=f"i{number}"),
                      GitPulseStarted))
        if context.memory_error:
            log.info("loop %s iteration %d: %s", session_id, number, context.memory_error)

        def record(s: LoopSession) -> None:
            if s.iteration_count + 1 != number or s.status not in ("pending", "running"):
                return  # paused, aborted or already started meanwhile: the git pulse is picked up or ended later
            s.start_iteration(task_content=context.prompt, pulse_worktree=started.worktree_path,
                              base_commit=started.base_commit, anchor=context.anchor,
                              context_tokens=context.context_tokens)

        await self.book.change(session_id, record)
        log.info("loop %s: iteration %d/%d dispatched (anchor %s)", session_id, number, session.max_iterations,
                 context.anchor.strategy)

    async def start_agent(self, session_id: str, it: Iteration) -> None:
        session = await self.book.read(session_id)
        script = f"{session.script}.i{it.number}" if session.script else f"i{it.number}"
        command = StartSession(session_id=it.agent_session_id, role="loop", root=it.pulse_worktree,
                               kickoff=it.task_content, run_id=session_id, script=script,
                               notes=list(session.notes))
        accepted = await self._ask("agent_runner", "start_session", command, TurnAccepted)

        def record(s: LoopSession) -> None:
            if s.iteration(it.number).kickoff_turn_id is None:
                s.iteration_running(number=it.number, kickoff_turn_id=accepted.turn_id, at=_now())

        await self.book.change(session_id, record)

    async def git_step(self, session_id: str, it: Iteration) -> None:
        """The git step of an iteration whose ending was recorded without it (an abort, a time limit, a restart
        between the two): then record the end and branch on the signal."""
        commit, files = await self._keep_work(session_id, it.number, it.ending, it.commit_subject, it.commit_body,
                                              it.reason)
        limit = self.settings.loop_no_progress_limit

        def record(s: LoopSession) -> None:
            if not s.iteration(it.number).over:
                s.end_iteration(it.number, commit_hash=commit, files_changed=files, no_progress_limit=limit)

        session, _ = await self.book.change(session_id, record)
        self._log_end(session, it.number)

    async def _keep_work(self, session_id: str, number: int, ending: str | None, subject: str | None, body: str,
                         reason: str | None) -> tuple[str | None, list[str]]:
        """Commit an iteration that ended well (nothing when it changed nothing); keep any other's work as a
        recovery commit on its pulse branch. Idempotent on the pulse: a repeat answers the same."""
        pulse_id = f"i{number}"
        if ending == "complete":
            done = await self._ask("git", "checkpoint_pulse",
                                   CheckpointPulse(run_id=session_id, pulse_id=pulse_id,
                                                   summary=subject or f"chore(loop): iteration {number}",
                                                   body=body[:20_000], skip_if_unchanged=True),
                                   PulseCheckpointed)
            return (done.commit, list(done.paths)) if done.committed else (None, [])
        status: Literal["failed", "stopped"] = "failed" if ending == "failed" else "stopped"
        await self._ask("git", "recovery_checkpoint",
                        RecoveryCheckpoint(run_id=session_id, pulse_id=pulse_id, status=status,
                                           reason=(reason or status)[:10_000]), RecoveryCheckpointed)
        return None, []

    async def _keep_work_or_stop(self, session_id: str, number: int, ending: str | None, subject: str | None,
                                 body: str, reason: str | None
                                 ) -> tuple[str | None, list[str], Callable[[LoopSession], None] | None]:
        """:meth:`_keep_work`; when git refuses for good, how the session stops instead of branching on the signal
        (failed when its repository is gone, else blocked), with the iteration ended without a commit."""
        try:
            commit, files = await self._keep_work(session_id, number, ending, subject, body, reason)
        except RemoteError as exc:
            if exc.code in RETRIED:
                raise  # git restarting or busy: the turn event comes again
            failure, refusal = failure_of(exc), str(exc)
            if failure is not None:
                return None, [], lambda s: s.fail(failure)
            return None, [], lambda s: s.block(refusal)
        return commit, files, None

    def _log_end(self, session: LoopSession, number: int) -> None:
        ended = session.iteration(number)
        commit = f" · {ended.commit_hash[:10]}" if ended.commit_hash else ""
        log.info("loop %s: iteration %d/%d %s %s%s → %s", session.id, number, session.max_iterations, ended.status,
                 ended.signal, commit, session.status)

    async def close_agent(self, session_id: str, it: Iteration) -> None:
        await stop_agent_session(self.nc, self.settings, it.agent_session_id, "iteration over", close=True)
        await self.book.change(session_id, lambda s: None if s.iteration(it.number).session_closed
                               else s.iteration_session_closed(number=it.number))

    async def remove_worktree(self, session_id: str) -> None:
        """The session is over: its worktree goes (its branch, with every commit, stays)."""
        try:
            await self._ask("git", "remove_worktree", RemoveWorktree(run_id=session_id, force=True),
                            WorktreeRemoved)
        except RemoteError as exc:
            if exc.code in RETRIED:
                raise  # git restarting, or busy with the workflow: asked again
            # No repository to remove it from (or git refuses for good): the worktree stays where it is, said once,
            # rather than the ended session asking again and again.
            reason = failure_of(exc) or f"the worktree could not be removed: {exc}"
            await self.book.change(session_id, lambda s: s.leave_worktree(reason))
            return
        await self.book.change(session_id, lambda s: None if s.worktree_removed else s.worktree_removed_event())

    # --- turns ---------------------------------------------------------------------------------------

    async def on_turn(self, event: TurnCompleted) -> None:
        """Record what an iteration's finished turn says (idempotent: an iteration records one turn)."""
        # The turn events of an iteration's agent session are on the loop session's stream (its run token, so that
        # one wildcard follows one session): the event's run is the loop session.
        session_id = event.run_id
        if not self.book.is_loop(session_id):
            return  # a workflow's turn (the workflow driver's), or a discussion
        session = await self.book.read(session_id)
        it = session.iteration_of_session(event.session_id)
        if it is None or it.over or it.ending is not None:
            return
        ending: IterationEndKind
        source: SignalSource
        if event.outcome in ("end_turn", "block"):
            reading = signals.read_signal(event.text)
            ending, signal, source, reason = "complete", reading.signal, reading.source, reading.reason
        elif event.outcome == "cancelled":
            ending, signal, source, reason = "failed", "BLOCKED", "limit", "the iteration's turn was cancelled"
        else:
            detail = event.detail or event.outcome
            ending, signal, source, reason = "failed", "BLOCKED", "limit", f"the turn ended {event.outcome}: {detail}"
        hint = signals.anchor_hint(event.text)
        subject, body = signals.commit_message(event.text, it.number, session.goal)
        tokens = (event.input_tokens + event.output_tokens + event.cache_read_input_tokens
                  + event.cache_creation_input_tokens)
        summary = signals.summarise(event.text) if event.text.strip() else (reason or "(no output)")
        limit = self.settings.loop_no_progress_limit
        async with self._locks[session_id]:
            current = (await self.book.read(session_id)).iteration(it.number)
            if current.over or current.ending is not None:
                return  # recorded meanwhile (an abort, the time limit, a redelivery handled by another path)
            # The git step first, then the turn and the end in one save: the commit is idempotent on the pulse, so
            # a crash in between redoes it on the redelivered turn event and gets the same commit. The turn goes to
            # the turn memory meanwhile, so that once the iteration shows as ended its turn can be an anchor.
            (commit, files, stop), _ = await asyncio.gather(
                self._keep_work_or_stop(session_id, it.number, ending, subject, body, reason),
                self._remember_turn(session, it, event))

            def record(s: LoopSession) -> None:
                if s.record_turn(it.number, turn_id=event.turn_id, ending=ending, signal=signal, signal_source=source,
                                 reason=reason, output_summary=summary, output_full=event.text,
                                 commit_subject=subject, commit_body=body,
                                 anchor_hint_next=hint.turn_id if hint else None,
                                 anchor_hint_reason=hint.reason if hint else None, tokens_used=tokens,
                                 cost_usd=event.cost_usd):
                    if stop is None:
                        s.end_iteration(it.number, commit_hash=commit, files_changed=files, no_progress_limit=limit)
                    else:
                        stop(s)

            session, _ = await self.book.change(session_id, record)
        self._log_end(session, it.number)
        self.kick(session_id)

    async def _remember_turn(self, session: LoopSession, it: Iteration, event: TurnCompleted) -> None:
        """Give the iteration's turn to the turn memory (later anchors find it); best effort."""
        user_text = f"Iteration {it.number} of the goal: {session.goal}"
        record = TurnRecord(turn_id=event.turn_id, session_id=str(session.id), project_path=session.project_path,
                            index=it.number - 1, user_text=user_text, text=event.text, occurred_at=event.occurred_at,
                            loop_session_id=str(session.id), iteration_number=it.number,
                            tokens=estimate_tokens(user_text + event.text))
        try:
            await self._ask_memory("record_turns", RecordTurns(turns=[record]), TurnsRecorded)
        except RemoteError as exc:
            log.info("loop %s: turn %s not remembered (%s)", session.id, event.turn_id, exc.message)

    # --- controls and limits ---------------------------------------------------------------------------

    async def abort(self, session_id: str, reason: str, blocked_at: int | None = None) -> LoopSession:
        """Stop the session now: its running turn is cancelled, its work kept on the pulse branch."""
        async with self._locks[session_id]:
            session, running = await self.book.change(session_id, lambda s: s.abort(reason, blocked_at=blocked_at))
            if running is not None and running.kickoff_turn_id is not None:
                await stop_agent_session(self.nc, self.settings, running.agent_session_id, reason)
        self.kick(session_id)
        return session

    async def _watch_time_limits(self) -> None:
        """End an iteration that runs past ``loop_iteration_timeout`` (status ``timeout``; the session blocks)."""
        while True:
            limit = self.settings.loop_iteration_timeout
            await asyncio.sleep(min(5.0, max(0.2, limit / 4)))
            for session_id, view in list(self.book.views.items()):
                if view.status != "running" or not view.iterations:
                    continue
                current = view.iterations[-1]
                if current.ended_at is not None or current.started_at is None:
                    continue
                if (datetime.now(UTC) - current.started_at).total_seconds() <= limit:
                    continue
                try:
                    await self._time_out(session_id, current.iteration_number, limit)
                except Exception as exc:
                    log.warning("loop %s: time limit: %s", session_id, exc)

    async def _time_out(self, session_id: str, number: int, limit: float) -> None:
        reason = f"iteration {number} ran past its time limit ({limit:g}s)"
        async with self._locks[session_id]:
            session, recorded = await self.book.change(session_id, lambda s: s.record_turn(
                number, turn_id=f"timeout:{number}", ending="timeout", signal="BLOCKED", signal_source="limit",
                reason=reason, output_summary=reason, output_full="", commit_subject="", commit_body="",
                anchor_hint_next=None, anchor_hint_reason=None, tokens_used=0, cost_usd=0.0)
                if s.iteration(number).ending is None and not s.iteration(number).over else False)
            if recorded and session.iteration(number).kickoff_turn_id is not None:
                await stop_agent_session(self.nc, self.settings, session.iteration(number).agent_session_id, reason)
        self.kick(session_id)

