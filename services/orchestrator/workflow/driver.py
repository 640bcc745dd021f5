"""The workflow driver: it moves each workflow along by asking the agent runner and the git service to act.

The driver keeps no state of its own. What to do next is a function of the workflow's recorded state
(:func:`next_action`); each action is an idempotent request (deterministic session ids, message ids
and git pulse ids) followed by recording its result. A driver that dies between the two redoes the
request after a restart and gets the same answer, so nothing runs twice and nothing is lost.

Agent turns end with ``turn:completed`` on the event stream; a durable JetStream consumer hands each
one to :meth:`WorkflowDriver.on_turn`, which records the outcome (a card, a pulse completion, a halt)
keyed by the turn id, and acknowledges it only then.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, TypeVar

import msgspec
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.agents import (
    GetSession,
    PlannedPulse,
    SendMessage,
    SessionView,
    StartSession,
    TurnAccepted,
)
from autarch.contracts.events import TurnCompleted
from autarch.contracts.git import (
    CheckpointPulse,
    CreateWorkflowBranch,
    DiffArtifactRef,
    ModifiedTrackedFiles,
    PulseCheckpointed,
    PulseDiff,
    RecoveryCheckpoint,
    RecoveryCheckpointed,
    RegisterRepository,
    RemoveWorktree,
    RepositoryRegistered,
    StartPulse,
    TrackedChanges,
    WorkflowBranchView,
    WorktreeRemoved,
)
from autarch.contracts.git import PulseStarted as GitPulseStarted
from autarch.contracts.indexer import IndexAccepted, IndexProject, IndexWorktree
from autarch.contracts.tool_catalog import Role
from autarch.contracts.workflows import WorkflowErrorCode
from autarch.runtime.errors import RemoteError, ServiceFailure
from autarch.runtime.requests import request
from autarch.runtime.service_gate import gate_for
from autarch.runtime.settings import OrchestratorSettings
from autarch.runtime.storage import StorageFull

from ..caught_up import turn_completed
from ..partition import WHOLE, Partition
from ..stepping import TURN_ACK_WAIT, Stepper, TurnFeed, ask_service, stop_agent_session
from ..swarm.driver import IDLE, SwarmDriver
from . import controls, kickoffs
from .lifecycle import LifecycleError
from .model import Workflow
from .outcomes import handle_turn
from .state import HaltDetails, PulseRun, QueuedMessage
from .steps import (
    all_pulses_done,
    close_reason,
    current_step,
    fixing,
    next_pulse,
    preflight_overdue,
    session_baselines,
    session_notes,
    sessions_to_close,
    step_over,
    swarm_executes,
)

if TYPE_CHECKING:
    from .book import WorkflowBook

__all__ = ["STEP_ROLES", "WorkflowDriver", "all_pulses_done", "next_action", "next_pulse", "session_id_for"]

log = logging.getLogger("orchestrator.driver")

STEP_ROLES: dict[str, Role] = {"scoping": "scoping", "research": "research", "planning": "plan",
                               "preflight": "preflight", "review": "review"}
"""Agent role of each stage step; pulse steps (``pulse:<run id>``) use ``pulsing``."""

_SESSIONS = uuid.UUID("6f1d7c1e-9a43-4f0e-8a35-3f6d2b7c9e01")
_CONSUMER = "orchestrator-turns"


Action = Callable[[], Awaitable[object]]
T = TypeVar("T")
R = TypeVar("R")


def session_id_for(workflow_id: str, step: str) -> str:
    """The session of one workflow step: deterministic, so a repeated start opens one session."""
    return str(uuid.uuid5(_SESSIONS, f"{workflow_id}:{step}"))


def _role(step: str) -> Role:
    return "pulsing" if step.startswith("pulse:") else STEP_ROLES[step]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def next_action(driver: WorkflowDriver, wf: Workflow) -> Action | None:
    """The one external step ``wf`` needs now, or None while it waits (for an agent, the user, or nothing)."""
    wid = str(wf.id)
    closing = sessions_to_close(wf)
    if closing:
        return lambda: driver.close_session(wid, closing[0])
    if wf.execution is None and wf.fork_start_commit is not None:
        # A fork of a workflow that had a branch: its own branch is cut first, whatever stage it is in.
        return lambda: driver.prepare_execution(wid)
    if wf.abandoned or wf.stage == "done":
        if wf.execution is not None and not wf.worktree_removed:
            return lambda: driver.remove_worktree(wid)
        return None
    for message in wf.outbox:
        # A message to a step that is over (a nudge overtaken by a stop) would only reach a closed session.
        if not message.delivered and not step_over(wf, message.step):
            return partial(driver.deliver, wid, message)
    for step, session in wf.sessions.items():
        if not session.started and not step_over(wf, step):
            return partial(driver.start_session, wid, step)
    run = wf.running_run()
    if run is not None and run.ending == "succeeded":
        return lambda: driver.checkpoint(wid, run)
    if run is not None and run.ending in ("failed", "stopped"):
        return lambda: driver.recover(wid, run)
    if wf.halt is not None:
        if driver.swarm is not None and swarm_executes(wf):
            # Halted (stopped, bounced beads): no new work, but ended attempts still let go of their sessions
            # and leases.
            swarm = driver.swarm
            return lambda: swarm.settle(wid)
        return None
    if wf.stage in ("scoping", "research", "planning", "review"):
        if not wf.awaiting_approval and wf.stage not in wf.sessions:
            return lambda: driver.open_session(wid, wf.stage)
        return None
    # execution
    if wf.execution is None:
        return lambda: driver.prepare_execution(wid)
    if wf.preflight is None:
        if "preflight" not in wf.sessions:
            return lambda: driver.open_session(wid, "preflight")
        return None
    if wf.preflight.status != "completed" or run is not None:
        return None
    if wf.execution_mode == "swarm" and driver.swarm is not None and fixing(wf) is None:
        # A fix round after a swarm's review runs as pulses in the workflow's worktree, like any other.
        swarm = driver.swarm
        return lambda: swarm.step(wf)
    pulse = next_pulse(wf)
    if pulse is not None:
        return lambda: driver.start_pulse(wid, pulse)
    if all_pulses_done(wf):
        return lambda: driver.finish_execution(wid)
    return None


def _worktree(wf: Workflow) -> str:
    # Only execution's steps (preflight, pulses, review) run in the worktree, and execution begins by making it.
    assert wf.execution is not None, f"workflow {wf.id} has no worktree yet"
    return wf.execution.worktree_path


class WorkflowDriver:
    """Runs every workflow's next step; one workflow's steps and turn outcomes are handled one at a time."""

    def __init__(self, *, nc: Client, book: WorkflowBook, settings: OrchestratorSettings,
                 partition: Partition = WHOLE, steps: Stepper | None = None, swarm: SwarmDriver | None = None,
                 no_space: Callable[[str, StorageFull], Awaitable[None]] | None = None) -> None:
        """
        Args:
            no_space: halts a workflow whose step failed for lack of space (``space.py``; None: such a step is
                retried like any unexpected failure).
            book: the workflows it moves (their reads, changes and views).
            steps: what the workflows' book kicks when a workflow changed (by default one of its own).
            swarm: runs the execution of bead plans (seed 002) with parallel workers (None: no swarm execution).
        """
        self.nc = nc
        self.workflows = book
        self.settings = settings
        self.partition = partition
        """The share of the workflows this driver moves (its turn consumer hands on only theirs)."""
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Looked up at each turn, not bound here: a test may put its own ``on_turn`` in.
        self._feed = TurnFeed(nc, durable=_CONSUMER, kind="workflow", partition=partition,
                              on_turn=lambda event: self.on_turn(event), log=log)
        self.steps = steps or Stepper(kind="workflow", log=log, gate=gate_for(nc))
        self.swarm = swarm
        self._no_space = no_space

    # --- running -------------------------------------------------------------------------------------

    async def start(self, workflow_ids: list[str]) -> None:
        """Follow turn completions and pick up every workflow where the last process left it."""
        self.steps.start(advance=self._advance, fail=self._fail, no_space=self._no_space)
        await self._feed.start(self._watch_preflights(), self.steps, workflow_ids, self.kick, self.catch_up)

    async def catch_up(self, workflow_id: str) -> None:
        """Handle the turns of ``workflow_id``'s open sessions that ended but were never recorded here.

        A process that died while handling a ``turn:completed`` leaves that message unacknowledged, and
        JetStream hands it out again only after the consumer's ``ack_wait``: the workflow would stand still
        that long. Asked at start, the agent runner tells at once. Best effort: with the runner away, the
        redelivery still comes (and, like every turn, is handled once: the turn id is recorded). A runner
        that is restarting too (both killed at once) is waited for until that redelivery would come anyway.
        """
        wf = await self.workflows.read(workflow_id)
        for step, s in list(wf.sessions.items()):
            if not s.started or s.closed:
                continue
            try:
                view = await request(self.nc, subjects.request("agent_runner", "get_session"),
                                     GetSession(session_id=s.session_id), SessionView,
                                     timeout=self.settings.request_timeout, retry_unavailable=TURN_ACK_WAIT,
                                     idempotent=True)
            except (RemoteError, ServiceFailure) as exc:
                log.info("workflow %s: %s not caught up (%s); its turn events will come again", workflow_id, step,
                         exc)
                continue
            for turn in view.turns:
                if turn.outcome is not None and turn.turn_id not in wf.seen:
                    await self.on_turn(turn_completed(workflow_id, view, turn))

    async def stop(self) -> None:
        await self._feed.stop(self.steps)

    def kick(self, workflow_id: str) -> None:
        """Make sure ``workflow_id`` is advanced soon (coalesces kicks that come while it advances)."""
        self.steps.kick(workflow_id)

    async def _advance(self, workflow_id: str) -> None:
        while not self.steps.stopping:
            async with self._locks[workflow_id]:
                workflow = await self.workflows.read(workflow_id)
                action = next_action(self, workflow)
                if action is None or await action() is IDLE:
                    return

    async def _fail(self, workflow_id: str, message: str) -> None:
        """A step failed for a reason a retry will not fix: record it and halt for the user."""
        log.warning("workflow %s halts: %s", workflow_id, message)

        def record(wf: Workflow) -> None:
            wf.record_error(stage=wf.stage, message=message)
            if wf.halt is None and not wf.abandoned and wf.stage != "done":
                wf.halt_for("error", message, details=HaltDetails(step=current_step(wf)))

        await self.workflows.change(workflow_id, record)

    async def _record(self, workflow_id: str, command: Callable[[Workflow], R]) -> R:
        _, result = await self.workflows.change(workflow_id, command)
        return result

    # --- actions ---------------------------------------------------------------------------------------

    async def _ask(self, service: str, verb: str, payload: msgspec.Struct, reply: type[T]) -> T:
        return await ask_service(self.nc, self.settings, service, verb, payload, reply)

    async def open_session(self, workflow_id: str, step: str) -> None:
        """Open the session of a stage step (a pulse's session is assigned with its run: ``start_pulse``)."""
        wf = await self.workflows.read(workflow_id)
        root = wf.repo if step in ("scoping", "research", "planning") else _worktree(wf)
        text = kickoffs.kickoff(step, wf)
        script = wf.script
        await self._record(workflow_id, lambda w: w.assign_session(
            step=step, session_id=session_id_for(workflow_id, step), role=_role(step), root=root, kickoff=text,
            script=script, notes=session_notes(w, step), assigned_at=_now()))

    def index_in_background(self, repo: str, worktree: str | None = None, base: str | None = None) -> None:
        """Ask the indexer to index the project (and a pulse's worktree: its embedding scope), without waiting.

        Best effort: without an indexer, ``semantic_search`` tells the agent the index is missing.
        """
        async def index() -> None:
            try:
                project = await request(self.nc, subjects.request("indexer", "index_project"),
                                        IndexProject(path=repo), IndexAccepted, timeout=self.settings.request_timeout)
                if worktree is not None:
                    await request(self.nc, subjects.request("indexer", "index_worktree"),
                                  IndexWorktree(project=project.project, worktree=worktree, base=base),
                                  IndexAccepted, timeout=self.settings.request_timeout)
            except RemoteError as exc:
                log.info("indexing %s skipped: %s", worktree or repo, exc.message)

        self.steps.in_background(index())

    async def start_session(self, workflow_id: str, step: str) -> None:
        wf = await self.workflows.read(workflow_id)
        s = wf.sessions[step]
        baselines = session_baselines(wf, step)
        command = StartSession(session_id=s.session_id, role=s.role, root=s.root, kickoff=s.kickoff,
                               run_id=workflow_id, script=s.script, notes=list(s.notes), baselines=baselines)
        accepted = await self._ask("agent_runner", "start_session", command, TurnAccepted)
        await self._record(workflow_id, lambda w: w.confirm_session(step=step, kickoff_turn_id=accepted.turn_id))
        if step == "scoping":
            self.index_in_background(wf.repo)
        elif step.startswith("pulse:"):
            run = wf.run(step.split(":", 1)[1])
            self.index_in_background(wf.repo, s.root, run.base_commit)

    async def deliver(self, workflow_id: str, message: QueuedMessage) -> None:
        command = SendMessage(session_id=message.session_id, text=message.text, message_id=message.message_id)
        await self._ask("agent_runner", "send_message", command, TurnAccepted)
        await self._record(workflow_id, lambda w: w.message_delivered(message_id=message.message_id))

    async def close_session(self, workflow_id: str, step: str) -> None:
        """Close the session of a step that is over (the runner emits ``session:completed``); idempotent."""
        wf = await self.workflows.read(workflow_id)
        reason = close_reason(wf, step)
        # Closing also cancels a turn still running (a preflight abandoned at its timeout).
        await stop_agent_session(self.nc, self.settings, wf.sessions[step].session_id, reason, close=True)

        def record(w: Workflow) -> None:
            if not w.sessions[step].closed:
                w.session_closed(step=step, reason=reason)

        await self._record(workflow_id, record)

    async def prepare_execution(self, workflow_id: str) -> None:
        wf = await self.workflows.read(workflow_id)
        repo = await self._ask("git", "register_repository",
                               RegisterRepository(path=wf.repo, base_branch=wf.base_branch), RepositoryRegistered)
        branch = await self._ask("git", "create_workflow_branch",
                                 CreateWorkflowBranch(run_id=workflow_id, repository_id=repo.repository_id,
                                                      branch=wf.branch, base_branch=wf.base_branch,
                                                      start_commit=wf.fork_start_commit,
                                                      base_commit=wf.fork_base_commit),
                                 WorkflowBranchView)
        await self._record(workflow_id, lambda w: w.execution_prepared(
            branch=branch.branch, worktree_path=branch.worktree_path, base_commit=branch.base_commit,
            repository_id=repo.repository_id))

    async def start_pulse(self, workflow_id: str, pulse: PlannedPulse) -> None:
        wf = await self.workflows.read(workflow_id)
        attempt = 1 + sum(1 for r in wf.runs if r.planned_pulse_id == pulse.id)
        run_id = pulse.id if attempt == 1 else f"{pulse.id}-a{attempt}"
        started = await self._ask("git", "start_pulse", StartPulse(run_id=workflow_id, pulse_id=run_id),
                                  GitPulseStarted)
        step = f"pulse:{run_id}"
        fix_round = fixing(wf)
        # The ``PulseStarted`` payload (stored as is: its keys stay those of earlier logs).
        payload = {"id": run_id, "planned_pulse_id": pulse.id, "title": pulse.title, "attempt": attempt,
               "status": "running", "session_id": session_id_for(workflow_id, step),
               "pulse_branch": started.pulse_branch, "base_commit": started.base_commit,
               "checkpoint_commit": None, "diff_artifact_id": None, "description": None, "files_changed": [],
               "has_unresolved_issues": False, "unresolved_issues": [], "is_recovery_checkpoint": False,
               "completion_rejections": 0, "extensions": 0, "failure_reason": None, "started_at": _now(),
               "ended_at": None, "ending": None, "worktree_path": started.worktree_path,
               "fix_round": fix_round.round if fix_round is not None else None}

        def record(w: Workflow) -> None:
            w.pulse_started(run=payload)
            text = kickoffs.kickoff("pulse", w, w.run(run_id))
            # Notes belong to the stage (seed 004): every pulse sees what earlier execution agents noted.
            w.assign_session(step=step, session_id=session_id_for(workflow_id, step), role="pulsing",
                             root=_worktree(w), kickoff=text, script=run_id,
                             notes=session_notes(w, step), assigned_at=_now())

        await self._record(workflow_id, record)

    async def checkpoint(self, workflow_id: str, run: PulseRun) -> None:
        # An accepted completion always carries its summary (``Workflow.accept_completion``).
        summary, _, body = (run.description or "").partition("\n")
        done = await self._ask("git", "checkpoint_pulse",
                               CheckpointPulse(run_id=workflow_id, pulse_id=run.id, summary=summary.strip(),
                                               body=body.strip()), PulseCheckpointed)
        diff = await self._ask("git", "pulse_diff", PulseDiff(run_id=workflow_id, pulse_id=run.id),
                               DiffArtifactRef)

        def record(w: Workflow) -> None:
            w.pulse_ended(run_id=run.id, status="succeeded", commit=done.commit, diff_artifact_id=diff.artifact_id,
                          is_recovery_checkpoint=False, ended_at=_now())
            if run.unresolved_issues:
                w.halt_for("unresolved_issues",
                           f"{run.id} succeeded with unresolved issues; review them, then resume",
                           pulse_id=run.id, details=HaltDetails(unresolved_issues=list(run.unresolved_issues)))

        await self._record(workflow_id, record)

    async def recover(self, workflow_id: str, run: PulseRun) -> None:
        status = run.ending
        assert status == "failed" or status == "stopped", run  # ``next_action`` recovers only these
        reason = run.failure_reason or status
        done = await self._ask("git", "recovery_checkpoint",
                               RecoveryCheckpoint(run_id=workflow_id, pulse_id=run.id, status=status,
                                                  reason=reason[:10_000]), RecoveryCheckpointed)

        def record(w: Workflow) -> None:
            w.pulse_ended(run_id=run.id, status=status, commit=done.commit, diff_artifact_id=None,
                          is_recovery_checkpoint=done.is_recovery_checkpoint, ended_at=_now())
            if w.halt is None:
                w.halt_for("pulse_failed" if status == "failed" else "stopped",
                           f"{run.id} {status}: {reason}; resume runs it again", pulse_id=run.id,
                           details=HaltDetails(recovery_commit=done.commit, pulse_branch=done.pulse_branch))

        await self._record(workflow_id, record)

    async def finish_execution(self, workflow_id: str) -> None:
        await self.workflows.finish_execution(workflow_id)

    async def remove_worktree(self, workflow_id: str) -> None:
        await self._ask("git", "remove_worktree", RemoveWorktree(run_id=workflow_id, force=True),
                        WorktreeRemoved)
        await self._record(workflow_id, lambda w: w.worktree_removed_event())

    async def _watch_preflights(self) -> None:
        """Abandon a workflow whose preflight runs longer than ``preflight_timeout`` (seed 000: a timeout fails it)."""
        period = min(5.0, self.settings.preflight_timeout / 4)
        while True:
            await asyncio.sleep(period)
            for workflow_id, view in list(self.workflows.views.items()):
                if view.stage != "execution" or view.status != "active" or "preflight" not in view.sessions:
                    continue
                try:
                    await self._time_out_preflight(workflow_id)
                except Exception as exc:
                    log.warning("workflow %s: preflight watchdog: %s", workflow_id, exc)

    async def _time_out_preflight(self, workflow_id: str) -> None:
        timeout = self.settings.preflight_timeout
        message = f"preflight timed out after {timeout:g}s"

        def record(w: Workflow) -> None:
            # Checked again under the lock: a preflight that completed meanwhile keeps its outcome.
            if preflight_overdue(w, timeout):
                w.complete_preflight(status="failed", error=message)
                w.abandon(message)

        if preflight_overdue(await self.workflows.read(workflow_id), timeout):
            # The session is closed (its running turn cancelled) by the driver's next action.
            async with self._locks[workflow_id]:
                await self.workflows.change(workflow_id, record)

    # --- turn outcomes ---------------------------------------------------------------------------------

    async def on_turn(self, event: TurnCompleted) -> None:
        """Record what a finished agent turn means for its workflow (idempotent on the turn id)."""
        workflow_id = event.run_id
        try:
            uuid.UUID(workflow_id)
        except ValueError:
            return  # a channel discussion: no workflow
        try:
            wf = await self.workflows.read(workflow_id)
        except ServiceFailure:
            return
        step = wf.step_of(event.session_id)
        if step is None and self.swarm is not None:
            # Not under the workflow's lock: a worker's turn is recorded under the swarm's own lock, at once, so
            # that turns ending together are verified and merged in one pass rather than one pass each.
            handled = await self.swarm.on_turn(event)
            if handled:
                self.kick(workflow_id)
            return
        if step is None or event.turn_id in wf.seen:
            return
        log.info("workflow %s: %s turn ended %s%s", workflow_id, step, event.outcome,
                 f" ({event.tool})" if event.tool else "")
        async with self._locks[workflow_id]:
            session = tracked = None
            if step.startswith("pulse:"):
                session = await self._ask("agent_runner", "get_session", GetSession(session_id=event.session_id),
                                          SessionView)
            elif step == "preflight" and event.tool == "complete_preflight" and wf.preflight is None:
                # Preflight must not modify tracked files (seed 000): checked before its completion counts.
                tracked = await self._ask("git", "modified_tracked_files",
                                          ModifiedTrackedFiles(run_id=workflow_id), TrackedChanges)
            settings = self.settings
            await self._record(workflow_id, lambda w: handle_turn(w, step, event, settings, session=session,
                                                                        tracked=tracked))
        self.kick(workflow_id)

    # --- user controls -----------------------------------------------------------------------------------

    async def stop_workflow(self, workflow_id: str, reason: str) -> Workflow:
        async with self._locks[workflow_id]:
            wf = await self.workflows.read(workflow_id)
            try:
                controls.check_open(wf)
            except LifecycleError as exc:
                raise exc.failure(workflow_id=workflow_id) from None
            step = current_step(wf)
            if self.swarm is not None and swarm_executes(wf) and wf.halt is None:
                return await self._stop_swarm(wf, reason)
            if wf.halt is not None or step is None or wf.awaiting_approval:
                state = f"halted ({wf.halt.reason})" if wf.halt else (
                    "awaiting approval" if wf.awaiting_approval else "between steps")
                raise ServiceFailure(WorkflowErrorCode.NOT_RUNNING,
                                     f"no agent is working on this workflow: it is {state}",
                                     {"workflow_id": workflow_id, "stage": wf.stage})

            def record(w: Workflow) -> None:
                run = w.running_run()
                w.halt_for("stopped", reason, pulse_id=run.id if run else None, details=HaltDetails(step=step))
                if run is not None:
                    w.end_pulse_as(run.id, "stopped", reason)

            wf, _ = await self.workflows.change(workflow_id, record)
            session_id = wf.sessions[step].session_id if step in wf.sessions else None
            if session_id is not None:
                await stop_agent_session(self.nc, self.settings, session_id, reason)
        self.kick(workflow_id)
        return wf

    async def _stop_swarm(self, wf: Workflow, reason: str) -> Workflow:
        """Halt first (no new claim is made from here on), then stop every worker at once. Called under the
        workflow's lock, so no swarm step is half-made."""
        assert self.swarm is not None
        workflow_id = str(wf.id)
        wf, _ = await self.workflows.change(workflow_id, lambda w: w.halt_for("stopped", reason,
                                                                             details=HaltDetails()))
        await self.swarm.stop_workers(workflow_id, reason)
        return wf

    async def resume_workflow(self, workflow_id: str, message: str | None, *, source: str | None = None,
                              halt_version: int | None = None) -> Workflow:
        return await self._user_change(workflow_id, lambda w: controls.resume(w, message, source=source,
                                                                              halt_version=halt_version))

    async def abandon_workflow(self, workflow_id: str, version: int, reason: str, source: str) -> Workflow:
        return await self._user_change(workflow_id,
                                       lambda w: controls.abandon_waiting(w, version, reason, source))

    async def approve_extension(self, workflow_id: str, message: str | None) -> Workflow:
        return await self._user_change(workflow_id, lambda w: controls.approve_extension(w, message))

    async def answer_questions(self, workflow_id: str, answers: list[str]) -> Workflow:
        return await self._user_change(workflow_id, lambda w: controls.answer_questions(w, answers))

    async def _user_change(self, workflow_id: str, record: Callable[[Workflow], None]) -> Workflow:
        async with self._locks[workflow_id]:
            wf, _ = await self.workflows.change(workflow_id, record)
        self.kick(workflow_id)
        return wf
