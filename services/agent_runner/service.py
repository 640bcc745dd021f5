"""The agent runner service: session endpoints on NATS, one task per running turn, resumption, the relay.

One instance owns every session: on start it rebuilds from the store each session whose turn was in progress and
resumes that turn; a session with no turn running is known by its kept summary (``kept.py``) and read from its
events only when a command or ``get_session`` names it, so a start-up does not grow with finished history.
Several instances (``autarch up --cluster``) run as hot standbys: only the holder of the service's leader lease
starts (``runtime/standby.py``), and a standby that takes over does exactly this. Running turns on several instances
at once would need a lease per session and requests routed to its owner.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import TypeVar

import msgspec
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.agents import (
    GetSession,
    ListSessions,
    SendMessage,
    SessionList,
    SessionStopped,
    SessionSummary,
    SessionView,
    StartSession,
    StopSession,
    TurnAccepted,
    WorkflowCostList,
    WorkflowCosts,
)
from autarch.contracts.base import encode
from autarch.contracts.errors import ErrorCode
from autarch.contracts.storage import StorageNotice, StorageProblem
from autarch.runtime import sqlite_store
from autarch.runtime.bus import ensure_event_stream
from autarch.runtime.conflicts import WriteConflict, is_write_conflict, recorded_already
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.eventstore import describe_store, event_store_env, store_path
from autarch.runtime.kept_views import KeptViews, kept_views_for
from autarch.runtime.leases import LeaseTable
from autarch.runtime.micro import TypedService
from autarch.runtime.retry import WRITE_CONFLICT
from autarch.runtime.settings import AgentRunnerSettings, narrow
from autarch.runtime.startup import yielding
from autarch.runtime.storage import STORAGE, StorageFull, StorageState, embedded_stream_dir, storage_full

from .agents import AgentConfig, AgentRegistry
from .application import SessionApplication
from .budget import WorkflowBudget
from .domainmodel import Session
from .kept import KIND, SHAPE, KeptSession, kept_of, settled
from .lease_renewal import renewing_leases
from .mail_push import MailPush
from .model_client import ModelClient
from .relay_thread import RelayThread
from .tool_cancel import STOP_TURN
from .turn_loop import RunnerDeps, TurnLoop
from .views import summary_of, view_of

__all__ = ["AgentRunner", "open_runner", "start"]

log = logging.getLogger("agent_runner")

T = TypeVar("T")

NOTICE_EVERY = 5.0
"""Seconds between repeats of a storage notice while a turn waits for space (an orchestrator that restarted in
the meantime hears it too)."""

HELD_SETTLED = 64
"""How many settled sessions (no turn running) the runner holds live beside the running ones, the most recently used:
a discussion's next message, or the orchestrator's stop of a turn that just ended, finds its session here rather than
rebuilding it from its events; one used less recently is dropped and read from its events again when a command names
it (:meth:`AgentRunner._find`). Unbounded, every session a process ever ran stayed in memory: a loop closes one
session per iteration, and the runner's peak memory grew with the iterations (93 MB at 100, 118 MB at 1,000)."""

CONFLICT_RETRIES = 10
"""How often one turn, or one command, of a session is decided again after another writer of the store recorded the
session's next version first (``runtime/conflicts.py``), before this process leaves the session to that writer."""


class AgentRunner:
    """Every session of this process, the task of each running turn, and the session commands."""

    def __init__(self, *, nc: Client, app: SessionApplication, settings: AgentRunnerSettings, model: ModelClient,
                 after_save: Callable[[Session], None] | None = None, inline_writes: bool = False,
                 on_model_wait: Callable[[], None] | None = None, store_path: str = "",
                 storage: StorageState = STORAGE, leases: LeaseTable | None = None,
                 kept: KeptViews | None = None, held_settled: int = HELD_SETTLED) -> None:
        self.app = app
        self.nc = nc
        self.store_path = store_path
        """What a storage problem of the store names (its SQLite file)."""
        self.storage = storage
        self._stalled: dict[str, str] = {}
        """Sessions whose turn waits for space: the path each waits for."""
        self._later: set[asyncio.Task[None]] = set()
        """Stops waiting for space to be recorded (cancelled at shutdown: the next process sees the turn running)."""
        self._inline_writes = inline_writes
        self.settings = settings
        self.registry = AgentRegistry(settings=settings)
        self.budget = WorkflowBudget(token_limit=settings.workflow_token_budget,
                                     cost_limit=settings.workflow_cost_budget)
        self.mail = MailPush(nc=nc, save=self.save, timeout=min(settings.request_timeout, 5.0),
                             orchestrator_partitions=settings.orchestrator_partitions)
        self.deps = RunnerDeps(nc=nc, model=model, budget=self.budget, settings=settings, save=self.save,
                               before_model=self.mail.deliver, on_model_wait=on_model_wait)
        self.sessions: dict[str, Session] = {}
        """The sessions held live: every one with a turn running, and the ``held_settled`` settled ones used last."""
        self.held_settled = held_settled
        self._settled: OrderedDict[str, None] = OrderedDict()
        """The settled sessions held live, the least recently used first (:meth:`_hold`)."""
        self.known: dict[str, SessionSummary] = {}
        """Every session, in creation order, by its summary (what ``list_sessions`` shows of one not held live)."""
        self.kept = kept or KeptViews(None)
        """Settled sessions' summaries on disk (``kept.py``), which a start-up reads instead of rebuilding them."""
        self.rebuilt: list[str] = []
        """The sessions the last :meth:`load` rebuilt from their events (the others came from their kept summary)."""
        self._after_save = after_save
        self._running: dict[str, tuple[asyncio.Task[None], TurnLoop]] = {}
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        """Each session's lock while something holds or awaits it (:meth:`_lock`): one per session ever named would
        grow with every session the process served."""
        self._agents: dict[tuple[str, str], AgentConfig] = {}
        self._shutting_down = False
        self._conflicts: dict[str, int] = {}
        """Turn id → how often another writer recorded its session's next version first (while it lasts)."""
        self.leases = leases
        """The swarm's lease table: a turn of a lease holder's session renews the holder's leases in it."""

    # --- lifecycle -------------------------------------------------------------------------------------

    def load(self) -> None:
        """Know every session and count its spend towards its workflow's budget: a settled one by its kept summary
        when nothing was recorded on it since, any other rebuilt from its events (and held live when its turn was
        running, for :meth:`resume`)."""
        # The embedded store's ids and kept summaries come in one query; with none kept (a networked store), every
        # session is rebuilt.
        every: Iterable[tuple[str, KeptSession | None]] | None = self.kept.of_every(
            KIND, KeptSession, SHAPE, list(self.app.started_topics))
        if every is None:
            every = ((session_id, None) for session_id in self.app.session_ids())
        for session_id, found in every:
            if found is None:
                self.rebuilt.append(session_id)
                session = self.app.get_session(session_id)
                found = kept_of(session)
                if settled(session):
                    self.kept.put(KIND, session_id, session.version, SHAPE, found)  # the next start reads it
                else:
                    self._hold(session)
            self.known[session_id] = found.summary
            self.budget.add_spent(found.summary.run_id, found.tokens, found.cost_usd)

    def _adopt(self, session: Session) -> None:
        """Take a session read from the store into this process: its spend counts towards its workflow's budget."""
        sid = str(session.id)
        self._hold(session)
        self.known[sid] = summary_of(session)
        for turn in session.turns:
            for reply in turn.replies:
                self.budget.add(session.run_id, reply.usage, reply.cost_usd)

    def _lock(self, session_id: str) -> asyncio.Lock:
        """The session's lock: every command and every turn restart decides under it, and looks the session up
        (:meth:`_find`) only once it holds it. A lock nobody holds or awaits is gone, and the next is a new one."""
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def _hold(self, session: Session) -> None:
        """Hold ``session`` live (it was just read, made, or saved); when it is settled it becomes the settled
        session used last, and the least recently used beyond ``held_settled`` are dropped (:data:`HELD_SETTLED`)."""
        sid = str(session.id)
        self.sessions[sid] = session
        if not settled(session):
            self._settled.pop(sid, None)  # a turn running is never dropped
            return
        self._settled[sid] = None
        self._settled.move_to_end(sid)
        excess = len(self._settled) - self.held_settled
        for old in list(self._settled):
            if excess <= 0:
                break
            lock = self._locks.get(old)
            if old in self._running or (lock is not None and lock.locked()):
                # Its turn task is still finishing, or a command is deciding on it: dropped at a later save.
                continue
            del self._settled[old]
            dropped = self.sessions.pop(old, None)
            if dropped is not None:
                self.known[old] = summary_of(dropped)  # what list_sessions shows of it from now on
            excess -= 1

    def saved(self, session: Session) -> None:
        """After each save: a session that settled keeps its summary, which the next start-up reads."""
        sid = str(session.id)
        if settled(session):
            found = kept_of(session)
            self.known[sid] = found.summary
            self.kept.put(KIND, sid, session.version, SHAPE, found)
        elif sid not in self.known:
            self.known[sid] = summary_of(session)

    async def _find(self, session_id: str) -> Session | None:
        """The session held live, or read from its events when it is known but not held (it becomes held); None
        when there is no such session. Callers hold the session's lock, so one read makes it live."""
        session = self.sessions.get(session_id)
        if session is None and session_id in self.known:
            session = await asyncio.to_thread(self.app.get_session, session_id)
            self._hold(session)
        elif session is not None and session_id in self._settled:
            self._settled.move_to_end(session_id)  # used now: the last to be dropped
        return session

    async def _held(self, session_id: str) -> Session:
        """:meth:`_find`, ``not_found`` when there is no such session."""
        session = await self._find(session_id)
        if session is None:
            raise ServiceFailure.not_found(f"no session {session_id}", session_id=session_id)
        return session

    def resume(self) -> int:
        """Start a task for every turn that was in progress when the last process stopped."""
        resumed = 0
        for session in self.sessions.values():
            if session.current_turn is not None and str(session.id) not in self._running:
                self._spawn(session)
                resumed += 1
        return resumed

    async def shutdown(self) -> None:
        """Stop every turn task without recording anything: the next process resumes them."""
        self._shutting_down = True
        tasks = [task for task, _ in self._running.values()] + list(self._later)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def save(self, session: Session) -> None:
        """Durably record ``session``'s pending events (finishes the write even if the caller is cancelled).

        Raises :class:`StorageFull` (and reports it) when the store has no space left: nothing was recorded, and
        ``session`` holds events the store does not (:meth:`_reload` takes it back to what was recorded). Raises
        :class:`WriteConflict` when another writer of the store recorded the session's next version first (a
        standby that took over, or its paused predecessor's turn in flight) unless it recorded exactly these
        events: nothing was recorded, and the caller decides again on what was (:meth:`_reload`).
        """
        pending = list(session.pending_events)  # saving takes them from the session: kept for a conflict's check
        try:
            await self._save(session)
        except StorageFull:
            raise
        except Exception as exc:
            if is_write_conflict(exc):
                if not await asyncio.to_thread(recorded_already, self.app, pending):
                    raise WriteConflict(str(session.id), pending[0].originator_version) from exc
                # An earlier try of this very save went through (its answer lost): recorded, as asked.
                log.info("session %s: versions %d-%d were recorded already, as this save would have", session.id,
                         pending[0].originator_version, pending[-1].originator_version)
                self._recorded(session)
                return
            full = storage_full(exc, self.store_path)
            if full is None:
                raise
            self.storage.report(full)
            raise full from exc

    async def _reload(self, session_id: str) -> Session:
        """The session as recorded: the changes a failed save left in memory are dropped (reading needs no space)."""
        stored = await asyncio.to_thread(self.app.get_session, session_id)
        self._hold(stored)
        self.known[session_id] = summary_of(stored)
        return stored

    async def _save(self, session: Session) -> None:
        if self._inline_writes:
            # An embedded SQLite commit (WAL, synchronous=NORMAL) takes ~0.1 ms: less than a hop to a
            # worker thread and back, so it is done right here. A networked store goes to a thread.
            self.app.save(session)
            self._recorded(session)
            return
        write = asyncio.ensure_future(asyncio.to_thread(self.app.save, session))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await write
            raise
        self._recorded(session)

    def _recorded(self, session: Session) -> None:
        """``session``'s pending events are recorded: a held session may have settled (or started a turn)."""
        if self.sessions.get(str(session.id)) is session:
            self._hold(session)
        if self._after_save is not None:
            self._after_save(session)

    def run_of(self, session_id: str) -> str | None:
        session = self.sessions.get(session_id)
        if session is not None:
            return session.run_id
        summary = self.known.get(session_id)
        return summary.run_id if summary is not None else None

    # --- commands --------------------------------------------------------------------------------------

    async def start_session(self, command: StartSession) -> TurnAccepted:
        sid = command.session_id
        async with self._lock(sid):
            existing = await self._find(sid)
            if existing is not None:
                return _already_started(existing, command)
            agent = self.registry.get(command.role)
            session = Session(session_id=sid, role=command.role, model=agent.model, root=command.root,
                              run_id=command.run_id, channel_id=command.channel_id, script=command.script,
                              notes=list(command.notes), baselines=msgspec.to_builtins(command.baselines),
                              lease_holder=command.lease_holder,
                              discipline=msgspec.to_builtins(command.discipline) if command.discipline else None)
            turn_id = str(uuid.uuid4())
            session.start_turn(turn_id=turn_id, index=0, text=command.kickoff, notes=list(command.notes),
                               message_id=None, stage_notes=None, at=datetime.now(UTC))
            try:
                await self.save(session)
            except StorageFull as full:
                raise ServiceFailure.storage_full(full.path, str(full)) from None
            except WriteConflict:
                # The store has this session although this process does not: an earlier try's commit went
                # through but its answer was lost (a connection cut at the commit), or another runner started it
                # before this one took over. The stored session is the one; answer as for a repeat.
                stored = await asyncio.to_thread(self.app.get_session, sid)
                self._adopt(stored)
                if stored.current_turn is not None and sid not in self._running:
                    self._spawn(stored)  # nobody runs its first turn yet, as after a restart (see resume)
                return _already_started(stored, command)
            self._hold(session)
            self.known[sid] = summary_of(session)
            self._spawn(session)
            return TurnAccepted(session_id=sid, turn_id=turn_id)

    async def send_message(self, command: SendMessage) -> TurnAccepted:
        return await self._decided_again(command.session_id, lambda: self._send_message(command))

    async def _send_message(self, command: SendMessage) -> TurnAccepted:
        sid = command.session_id
        async with self._lock(sid):
            session = await self._held(sid)
            repeated = session.message_turns.get(command.message_id) if command.message_id is not None else None
            if repeated is not None:
                return TurnAccepted(session_id=sid, turn_id=repeated, created=False)
            if session.closed:
                raise ServiceFailure.conflict(f"session {sid} is closed ({session.closed_reason})", session_id=sid)
            running = session.current_turn
            if running is not None:
                raise ServiceFailure.conflict(f"session {sid} is still running turn {running.turn_id}; stop it or "
                                              "wait for turn:completed", session_id=sid, turn_id=running.turn_id)
            stage_notes = command.notes if command.notes is not None else session.stage_notes
            turn_id = str(uuid.uuid4())
            session.start_turn(turn_id=turn_id, index=len(session.turns), text=command.text,
                               notes=[*stage_notes, *session.session_notes()], message_id=command.message_id,
                               stage_notes=command.notes, at=datetime.now(UTC))
            try:
                await self.save(session)
            except StorageFull as full:
                await self._reload(sid)
                raise ServiceFailure.storage_full(full.path, str(full)) from None
            self._spawn(session)
            return TurnAccepted(session_id=sid, turn_id=turn_id)

    async def stop_session(self, command: StopSession) -> SessionStopped:
        return await self._decided_again(command.session_id, lambda: self._stop_session(command))

    async def _stop_session(self, command: StopSession) -> SessionStopped:
        sid = command.session_id
        async with self._lock(sid):
            session = await self._held(sid)
            turn_id = None
            entry = self._running.get(sid)
            if entry is not None:
                task, loop = entry
                turn_id = loop.turn.turn_id
                loop.stop_reason = command.reason
                # The message tells a running tool call to stop too (a shutdown cancels without it).
                task.cancel(msg=STOP_TURN)
                # The task stops its tool call, then records turn:completed (cancelled) before it ends; wait.
                await asyncio.gather(task, return_exceptions=True)
                if loop.unrecorded_stop is not None:
                    # Not recorded for lack of space: the session is what the store holds (the turn running), and
                    # the stop is recorded once there is room (_drive); the caller hears it now.
                    full = loop.unrecorded_stop
                    await self._reload(sid)
                    raise ServiceFailure.storage_full(
                        full.path, f"the stop is recorded once there is room: {full}")
                if loop.stop_conflicted:
                    # Another writer recorded the session first: the stop is recorded on what it recorded, if the
                    # turn still runs there (a conflict again is retried as a whole, by _decided_again).
                    session = await self._reload(sid)
                    turn = session.current_turn
                    if turn is not None and turn.turn_id == turn_id:
                        stopper = TurnLoop(deps=self.deps, session=session, turn=turn, agent=self._agent(session))
                        stopper.stop_reason = command.reason
                        await stopper.record_stop()
            if command.close and not session.closed:
                session.close(reason=command.reason)
                try:
                    await self.save(session)
                except StorageFull as full:
                    await self._reload(sid)
                    raise ServiceFailure.storage_full(full.path, str(full)) from None
                await self.mail.unwatch(session)
            return SessionStopped(session_id=sid, turn_id=turn_id, closed=session.closed)

    async def _decided_again(self, sid: str, decide: Callable[[], Awaitable[T]]) -> T:
        """``decide`` (a command on session ``sid``), run again on the session as recorded each time another writer
        of the store recorded its next version first; a typed conflict when that keeps happening."""
        for tries in range(1, CONFLICT_RETRIES + 1):
            try:
                return await decide()
            except WriteConflict as conflict:
                log.info("session %s: %s; deciding again on what was recorded", sid, conflict)
                async with self._lock(sid):
                    stored = await self._reload(sid)
                    if stored.current_turn is not None and sid not in self._running and not self._shutting_down:
                        self._spawn(stored)  # the other writer's turn, which nobody here runs yet (see resume)
                await asyncio.sleep(WRITE_CONFLICT.delay(tries))
        raise ServiceFailure.conflict(f"session {sid} keeps being changed by another writer; try again",
                                      session_id=sid)

    async def get_session(self, query: GetSession) -> SessionView:
        sid = query.session_id
        session = self.sessions.get(sid)
        if session is None and sid in self.known:
            # A settled session is read for this answer only, not held: reading one does not make it live.
            session = await asyncio.to_thread(self.app.get_session, sid)
        if session is None:
            raise ServiceFailure.not_found(f"no session {sid}", session_id=sid)
        return view_of(session, replies=query.replies)

    async def list_sessions(self, query: ListSessions) -> SessionList:
        items = []
        for sid, summary in self.known.items():
            session = self.sessions.get(sid)
            if session is not None:
                summary = summary_of(session)
            if query.run_id is not None and summary.run_id != query.run_id:
                continue
            if query.running is not None and (summary.status == "running") != query.running:
                continue
            items.append(summary)
        return SessionList(items=items)

    async def workflow_costs(self, query: WorkflowCosts) -> WorkflowCostList:
        # The budget's running totals hold every recorded reply's cost per workflow (counted as each reply is
        # recorded, and from kept summaries or rebuilt sessions at start-up): no session is read or scanned.
        # ``get`` rather than ``[]``: asking about an unknown id must not add it to the defaultdict.
        return WorkflowCostList(costs={wid: self.budget.cost.get(wid, 0.0) for wid in query.workflow_ids})

    # --- turns -----------------------------------------------------------------------------------------

    def _agent(self, session: Session) -> AgentConfig:
        # The model is fixed when the session starts; a later settings change applies to new sessions.
        key = (session.role, session.model)
        agent = self._agents.get(key)
        if agent is None:
            agent = self.registry.get(session.role)
            if agent.model != session.model:
                agent = dataclasses.replace(agent, model=session.model)
            self._agents[key] = agent
        return agent

    def _spawn(self, session: Session) -> None:
        turn = session.current_turn
        assert turn is not None
        sid = str(session.id)
        loop = TurnLoop(deps=self.deps, session=session, turn=turn, agent=self._agent(session))
        task = asyncio.create_task(self._drive(loop), name=f"turn-{turn.turn_id}")
        self._running[sid] = (task, loop)

        def forget(done: asyncio.Task[None]) -> None:
            if self._running.get(sid, (None,))[0] is done:
                del self._running[sid]

        task.add_done_callback(forget)

    async def _drive(self, loop: TurnLoop) -> None:
        session = loop.session
        try:
            try:
                await self.mail.watch(session)
                async with renewing_leases(self.leases, scope=session.run_id, holder=session.lease_holder,
                                           ttl=self.settings.lease_ttl):
                    await loop.run(record_cancel=lambda: not self._shutting_down)
                self._conflicts.pop(loop.turn.turn_id, None)
            except WriteConflict as conflict:
                await self._run_again(loop, conflict)
            except StorageFull as full:
                try:
                    await self._retry_when_room(session, full)
                except asyncio.CancelledError:
                    if not self._shutting_down:
                        # Stopped while it waited for room: the stop is recorded once there is room, as the
                        # turn's own would have been.
                        loop.unrecorded_stop = full
                    raise
        except asyncio.CancelledError:
            if loop.unrecorded_stop is not None and not self._shutting_down:
                later = asyncio.create_task(self._stop_when_room(loop, loop.unrecorded_stop))
                self._later.add(later)
                later.add_done_callback(self._later.discard)

    async def _run_again(self, loop: TurnLoop, conflict: WriteConflict) -> None:
        """Another writer recorded the session of ``loop``'s turn first: run the turn on from what was recorded, as a
        restarted runner would (a recorded reply is not asked for again, a tool call repeated carries its
        idempotency key), unless the turn ended there. Left to that writer when it keeps winning."""
        sid, turn_id = str(loop.session.id), loop.turn.turn_id
        tries = self._conflicts[turn_id] = self._conflicts.get(turn_id, 0) + 1
        if tries > CONFLICT_RETRIES:
            self._conflicts.pop(turn_id, None)
            log.error("session %s: %s, %d times in a row; turn %s is left to that writer", sid, conflict,
                      CONFLICT_RETRIES, turn_id)
            return
        log.warning("session %s: %s; turn %s runs on from what was recorded", sid, conflict, turn_id)
        await asyncio.sleep(WRITE_CONFLICT.delay(tries))
        async with self._lock(sid):
            stored = await self._reload(sid)
            if self._shutting_down or stored.current_turn is None:
                self._conflicts.pop(turn_id, None)  # ended by the other writer: nothing left to run here
                return
            self._spawn(stored)

    async def _wait_for_room(self, session: Session, full: StorageFull) -> None:
        """Wait until ``full.path`` has room, telling the orchestrator meanwhile which workflow waits for it."""
        sid = str(session.id)
        self._stalled[sid] = full.path
        self.storage.report(full)  # its own store's (reported already), or the tools service's that it waits for
        try:
            while not self.storage.has_room(full.path):
                await self._notify(full.path, full.problem)
                for _ in range(max(1, round(NOTICE_EVERY / self.storage.interval))):
                    if self.storage.has_room(full.path):
                        break
                    await asyncio.sleep(self.storage.interval)
            self.storage.clear(full.path)
        finally:
            self._stalled.pop(sid, None)

    async def _stop_when_room(self, loop: TurnLoop, full: StorageFull) -> None:
        """Record the stop of ``loop``'s turn that found no space, once there is room (unless the turn ended since)."""
        sid = str(loop.session.id)
        log.error("the stop of turn %s of session %s waits for space: %s", loop.turn.turn_id, sid, full)
        while True:
            await self._wait_for_room(loop.session, full)
            try:
                async with self._lock(sid):
                    stored = await self._reload(sid)
                    turn = stored.current_turn
                    if turn is not None and turn.turn_id == loop.turn.turn_id and sid not in self._running:
                        stopper = TurnLoop(deps=self.deps, session=stored, turn=turn, agent=self._agent(stored))
                        stopper.stop_reason = loop.stop_reason
                        await stopper.record_stop()
                break
            except StorageFull as again:  # full again before the stop fitted: wait once more
                full = again
        await self._notify(full.path, None, also=(stored.run_id,))

    async def _retry_when_room(self, session: Session, full: StorageFull) -> None:
        """A save of the turn failed for lack of space: wait for room, then run the turn again from what was
        recorded, as a restarted runner would (a recorded reply is not asked for again, a tool call repeated
        carries its idempotency key). Meanwhile the orchestrator hears which workflow waits for what."""
        sid = str(session.id)
        log.error("turn %s of session %s waits for space: %s", _turn_of(session), sid, full)
        async with self._lock(sid):
            stored = await self._reload(sid)
        await self._wait_for_room(session, full)
        await self._notify(full.path, None, also=(stored.run_id,))
        async with self._lock(sid):
            current = self.sessions.get(sid)
            if self._shutting_down or current is None or current.current_turn is None:
                return
            log.warning("session %s: space is back; its turn %s runs again from what was recorded", sid,
                        current.current_turn.turn_id)
            self._spawn(current)

    async def _notify(self, path: str, problem: StorageProblem | None, *, also: tuple[str | None, ...] = ()) -> None:
        """Tell the orchestrator which workflows wait for ``path`` (or, ``problem`` None, that they go on)."""
        waiting = {self.sessions[s].run_id for s, p in self._stalled.items() if p == path and s in self.sessions}
        workflow_ids = sorted({w for w in (*waiting, *also) if w})
        notice = StorageNotice(service="agent_runner", problem=problem, path=path, workflow_ids=workflow_ids)
        try:
            await self.nc.publish(subjects.storage("agent_runner"), encode(notice))
        except Exception as exc:  # disconnected: the next repeat (or the orchestrator's own check) tells it
            log.info("storage notice not sent: %s", exc)


def _turn_of(session: Session) -> str:
    turn = session.current_turn
    return turn.turn_id if turn is not None else "-"


def _already_started(existing: Session, command: StartSession) -> TurnAccepted:
    """The answer to a start of a session that exists: its first turn when the command repeats the one that
    started it, a conflict when it names other fields."""
    first = existing.turns[0]
    same = (existing.role, existing.root, existing.run_id, existing.channel_id, first.text,
            existing.lease_holder) == (command.role, command.root, command.run_id, command.channel_id,
                                       command.kickoff, command.lease_holder)
    if not same:
        sid = command.session_id
        raise ServiceFailure.conflict(f"session {sid} already exists with other fields", session_id=sid)
    return TurnAccepted(session_id=command.session_id, turn_id=first.turn_id, created=False)


async def start(nc: Client, settings: AgentRunnerSettings) -> Callable[[], Awaitable[None]]:
    """Open the store, rebuild the sessions, resume their turns, start the relay and serve the endpoints."""
    _, stop = await open_runner(nc, settings)
    return stop


async def open_runner(
    nc: Client, settings: AgentRunnerSettings, *, model: ModelClient | None = None
) -> tuple[AgentRunner, Callable[[], Awaitable[None]]]:
    """:func:`start`, also handing back the runner itself (for benchmarks and in-process tests)."""
    settings = narrow(settings, AgentRunnerSettings)
    env = event_store_env(settings, "agent_runner")
    app = SessionApplication(env=env)
    log.info("event store: %s", describe_store(env))
    await ensure_event_stream(nc, duplicate_window=settings.duplicate_window, replicas=settings.stream_replicas)
    model = model or ModelClient(settings=settings)
    inline = sqlite_store.commits_inline(env)
    relay_box: list[RelayThread] = []
    leases = await LeaseTable.open(nc, replicas=settings.stream_replicas)
    kept = kept_views_for(env)

    def after_save(session: Session) -> None:
        relay_box[0].saved(session)
        runner.saved(session)

    runner = AgentRunner(nc=nc, app=app, settings=settings, model=model, inline_writes=inline, after_save=after_save,
                         on_model_wait=lambda: relay_box[0].model_wait(), store_path=store_path(env), leases=leases,
                         kept=kept)
    # The relay runs on a thread of its own, where its rounds do not queue behind the turns' work (relay_thread.py).
    relay = RelayThread(app=app, nc=nc, run_of=runner.run_of, store_path=store_path(env),
                        stream_path=embedded_stream_dir(settings.data_path))
    relay_box.append(relay)
    service = TypedService(nc, name="agent_runner", description="Agent sessions: turns, tools, the model")
    service.endpoint("start_session", StartSession, runner.start_session)
    service.endpoint("send_message", SendMessage, runner.send_message)
    service.endpoint("stop_session", StopSession, runner.stop_session)
    service.endpoint("get_session", GetSession, runner.get_session)
    service.endpoint("list_sessions", ListSessions, runner.list_sessions)
    service.endpoint("workflow_costs", WorkflowCosts, runner.workflow_costs)
    # Answering before every session is known (a second or more with 80,000 of them): a request waits, held, until
    # the load below is done and is then answered from every session, as it would be once started.
    loaded = service.hold_until_loaded()
    await service.start()
    try:
        # At a lower CPU priority: the other services starting beside it (the orchestrator, the gateway) come first.
        await yielding(runner.load, name="load-sessions")
        await relay.start()
        resumed = runner.resume()
    except BaseException as exc:
        # The waiting requests are told (a caller retries "unavailable"); the start then fails as it did before.
        loaded(ServiceFailure(ErrorCode.UNAVAILABLE, f"the agent runner could not load its sessions: {exc!r}"))
        await service.stop()
        raise
    loaded(None)
    # The model SDK's import is left out of the start-up (model_client.py); made now, the first turn finds it done.
    warm = asyncio.create_task(model.warm(), name="model-sdk-import")
    log.info("knew %d sessions (%d rebuilt from the event store, the others from their kept summaries); resumed %d "
             "running turns", len(runner.known), len(runner.rebuilt), resumed)

    async def stop() -> None:
        await service.stop()
        await asyncio.gather(warm, return_exceptions=True)  # an import in a thread cannot be cancelled
        await runner.shutdown()
        await runner.mail.close()
        # The relay finishes its round in flight, then publishes what is left, on its own thread.
        failure = await relay.stop()
        if failure is not None:
            log.warning("relay did not finish on stop: %s", failure)
        await model.close()
        # An EventRelay.stop() that cancels mid-round leaves its store read or tracking write running in a
        # worker thread, and closing the store under it crashes SQLite: give such a write time to finish.
        await asyncio.sleep(0.2)
        kept.close()
        app.close()

    return runner, stop
