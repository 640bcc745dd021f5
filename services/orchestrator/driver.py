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
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.js import api

from autarch.contracts import subjects
from autarch.contracts.agents import (
    BLOCK_TOOL_ARGUMENTS,
    GetSession,
    SendMessage,
    SessionStopped,
    SessionView,
    StartSession,
    StopSession,
    TurnAccepted,
)
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import TurnCompleted
from autarch.contracts.git import (
    CheckpointPulse,
    CreateWorkflowBranch,
    DiffArtifactRef,
    PulseCheckpointed,
    PulseDiff,
    RecoveryCheckpoint,
    RecoveryCheckpointed,
    RegisterRepository,
    RemoveWorktree,
    RepositoryRegistered,
    StartPulse,
    WorkflowBranchView,
    WorktreeRemoved,
)
from autarch.contracts.git import PulseStarted as GitPulseStarted
from autarch.contracts.indexer import IndexAccepted, IndexProject, IndexWorktree
from autarch.contracts.workflows import WorkflowErrorCode
from autarch.runtime.errors import RemoteError, ServiceFailure
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings

from . import kickoffs
from .completion import CONVENTIONAL_COMMIT, completion_rejections
from .domainmodel import Workflow
from .lifecycle import LifecycleError

__all__ = ["STEP_ROLES", "WorkflowDriver", "next_action", "session_id_for"]

log = logging.getLogger("orchestrator.driver")

STEP_ROLES = {"scoping": "scoping", "research": "research", "planning": "plan", "preflight": "preflight",
              "review": "review"}
"""Agent role of each stage step; pulse steps (``pulse:<run id>``) use ``pulsing``."""

BLOCK_OF_STEP = {"scoping": "submit_scope", "research": "submit_research", "planning": "submit_plan",
                 "preflight": "complete_preflight", "review": "complete_review"}

_SESSIONS = uuid.UUID("6f1d7c1e-9a43-4f0e-8a35-3f6d2b7c9e01")
_TRANSIENT = {ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT}
_CONSUMER = "orchestrator-turns"

Action = Callable[[], Awaitable[None]]


def session_id_for(workflow_id: str, step: str) -> str:
    """The session of one workflow step: deterministic, so a repeated start opens one session."""
    return str(uuid.uuid5(_SESSIONS, f"{workflow_id}:{step}"))


def _role(step: str) -> str:
    return "pulsing" if step.startswith("pulse:") else STEP_ROLES[step]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def next_pulse(workflow: Workflow) -> dict[str, Any] | None:
    """The first planned pulse whose dependencies succeeded and whose latest run did not (None: none can run)."""
    latest: dict[str, dict[str, Any]] = {}
    for run in workflow.runs:
        latest[run["planned_pulse_id"]] = run
    done = {pid for pid, run in latest.items() if run["status"] == "succeeded"}
    for pulse in workflow.pulses:
        if pulse["id"] in done:
            continue
        if all(dep in done for dep in pulse.get("dependsOn") or []):
            return pulse
    return None


def all_pulses_done(workflow: Workflow) -> bool:
    latest = {run["planned_pulse_id"]: run["status"] for run in workflow.runs}
    return all(latest.get(p["id"]) == "succeeded" for p in workflow.pulses)


def next_action(driver: WorkflowDriver, wf: Workflow) -> Action | None:
    """The one external step ``wf`` needs now, or None while it waits (for an agent, the user, or nothing)."""
    wid = str(wf.id)
    if wf.abandoned or wf.stage == "done":
        if wf.execution is not None and not wf.worktree_removed:
            return lambda: driver.remove_worktree(wid)
        return None
    for message in wf.outbox:
        if not message["delivered"]:
            return lambda m=message: driver.deliver(wid, m)  # type: ignore[misc]
    for step, session in wf.sessions.items():
        if not session["started"]:
            return lambda s=step: driver.start_session(wid, s)  # type: ignore[misc]
    run = wf.running_run()
    if run is not None and run.get("ending") == "succeeded":
        return lambda: driver.checkpoint(wid, run)
    if run is not None and run.get("ending") in ("failed", "stopped"):
        return lambda: driver.recover(wid, run)
    if wf.halt is not None:
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
    if wf.preflight["status"] != "completed" or run is not None:
        return None
    pulse = next_pulse(wf)
    if pulse is not None:
        return lambda: driver.start_pulse(wid, pulse)
    if all_pulses_done(wf):
        return lambda: driver.finish_execution(wid)
    return None


class WorkflowDriver:
    """Runs every workflow's next step; one workflow's steps and turn outcomes are handled one at a time."""

    def __init__(self, *, nc: Client, orchestrator: Any, settings: Settings) -> None:
        self.nc = nc
        self.orch = orchestrator
        self.settings = settings
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._consumer: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._stopping = False

    # --- running -------------------------------------------------------------------------------------

    async def start(self, workflow_ids: list[str]) -> None:
        """Follow turn completions and pick up every workflow where the last process left it."""
        js = self.nc.jetstream()
        config = api.ConsumerConfig(durable_name=_CONSUMER, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=60,
                                    max_ack_pending=256, deliver_policy=api.DeliverPolicy.ALL,
                                    filter_subject=subjects.event("*", "turn", "*", "completed"))
        sub = await js.pull_subscribe(config.filter_subject, durable=_CONSUMER, stream=subjects.EVENTS_STREAM,
                                      config=config)
        self._consumer = asyncio.create_task(self._consume(sub), name="driver-turns")
        self._watchdog = asyncio.create_task(self._watch_preflights(), name="driver-preflight-watchdog")
        for workflow_id in workflow_ids:
            self.kick(workflow_id)

    async def stop(self) -> None:
        self._stopping = True
        tasks = [t for t in [self._consumer, self._watchdog, *self._tasks.values(), *self._background]
                 if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def kick(self, workflow_id: str) -> None:
        """Make sure ``workflow_id`` is advanced soon (coalesces kicks that come while it advances)."""
        if self._stopping:
            return
        if workflow_id in self._tasks:
            self._again.add(workflow_id)
            return
        self._tasks[workflow_id] = asyncio.create_task(self._advance_loop(workflow_id), name=f"drive-{workflow_id}")

    async def _advance_loop(self, workflow_id: str) -> None:
        delay = 0.2
        try:
            while True:
                self._again.discard(workflow_id)
                try:
                    await self._advance(workflow_id)
                    delay = 0.2
                except RemoteError as exc:
                    if exc.code not in _TRANSIENT and exc.code != ErrorCode.CONFLICT:
                        await self._fail(workflow_id, f"{exc.subject}: {exc.code}: {exc.message}")
                        continue
                    # A service restarting (or a session finishing its turn): try again shortly.
                    log.info("workflow %s waits for %s (%s); retrying in %.1fs", workflow_id, exc.subject,
                             exc.code, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    self._again.add(workflow_id)
                except ServiceFailure as exc:
                    log.warning("workflow %s: %s", workflow_id, exc)
                except Exception:
                    log.exception("workflow %s: driving failed", workflow_id)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    self._again.add(workflow_id)
                if workflow_id not in self._again:
                    break
        finally:
            self._tasks.pop(workflow_id, None)

    async def _advance(self, workflow_id: str) -> None:
        while not self._stopping:
            async with self._locks[workflow_id]:
                workflow = await self.orch.read(workflow_id)
                action = next_action(self, workflow)
                if action is None:
                    return
                await action()

    async def _fail(self, workflow_id: str, message: str) -> None:
        """A step failed for a reason a retry will not fix: record it and halt for the user."""
        log.warning("workflow %s halts: %s", workflow_id, message)

        def record(wf: Workflow) -> None:
            wf.record_error(stage=wf.stage, message=message)
            if wf.halt is None and not wf.abandoned and wf.stage != "done":
                wf.halt_for("error", message, details={"step": _current_step(wf)})

        await self.orch.change(workflow_id, record)

    async def _record(self, workflow_id: str, command: Callable[[Workflow], Any]) -> Any:
        _, result = await self.orch.change(workflow_id, command)
        return result

    # --- actions ---------------------------------------------------------------------------------------

    async def _ask(self, service: str, verb: str, payload: Any, reply: type) -> Any:
        # Every request here is idempotent, so a timeout (a service killed mid-request) is simply retried.
        timeout = self.settings.git_request_timeout if service == "git" else self.settings.request_timeout
        return await request(self.nc, subjects.request(service, verb), payload, reply, timeout=timeout,
                             retry_unavailable=2.0)

    async def open_session(self, workflow_id: str, step: str, run: dict[str, Any] | None = None) -> None:
        wf = await self.orch.read(workflow_id)
        root = wf.repo if step in ("scoping", "research", "planning") else wf.execution["worktree_path"]
        script = run["id"] if run is not None else wf.script
        notes = [n["note"] for n in wf.notes if n["stage"] == wf.stage]
        text = kickoffs.kickoff(step if run is None else "pulse", wf, run)
        await self._record(workflow_id, lambda w: w.assign_session(
            step=step, session_id=session_id_for(workflow_id, step), role=_role(step), root=root, kickoff=text,
            script=script, notes=notes, assigned_at=_now()))

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

        task = asyncio.create_task(index())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def start_session(self, workflow_id: str, step: str) -> None:
        wf = await self.orch.read(workflow_id)
        s = wf.sessions[step]
        command = StartSession(session_id=s["session_id"], role=s["role"], root=s["root"], kickoff=s["kickoff"],
                               workflow_id=workflow_id, script=s["script"], notes=s["notes"])
        await self._ask("agent_runner", "start_session", command, TurnAccepted)
        await self._record(workflow_id, lambda w: w.confirm_session(step=step))
        if step == "scoping":
            self.index_in_background(wf.repo)
        elif step.startswith("pulse:"):
            run = wf.run(step.split(":", 1)[1])
            self.index_in_background(wf.repo, s["root"], run["base_commit"])

    async def deliver(self, workflow_id: str, message: dict[str, Any]) -> None:
        command = SendMessage(session_id=message["session_id"], text=message["text"],
                              message_id=message["message_id"])
        await self._ask("agent_runner", "send_message", command, TurnAccepted)
        await self._record(workflow_id, lambda w: w.message_delivered(message_id=message["message_id"]))

    async def prepare_execution(self, workflow_id: str) -> None:
        wf = await self.orch.read(workflow_id)
        repo = await self._ask("git", "register_repository",
                               RegisterRepository(path=wf.repo, base_branch=wf.base_branch), RepositoryRegistered)
        branch = await self._ask("git", "create_workflow_branch",
                                 CreateWorkflowBranch(workflow_id=workflow_id, repository_id=repo.repository_id,
                                                      branch=wf.branch, base_branch=wf.base_branch),
                                 WorkflowBranchView)
        await self._record(workflow_id, lambda w: w.execution_prepared(
            branch=branch.branch, worktree_path=branch.worktree_path, base_commit=branch.base_commit,
            repository_id=repo.repository_id))

    async def start_pulse(self, workflow_id: str, pulse: dict[str, Any]) -> None:
        wf = await self.orch.read(workflow_id)
        attempt = 1 + sum(1 for r in wf.runs if r["planned_pulse_id"] == pulse["id"])
        run_id = pulse["id"] if attempt == 1 else f"{pulse['id']}-a{attempt}"
        started = await self._ask("git", "start_pulse", StartPulse(workflow_id=workflow_id, pulse_id=run_id),
                                  GitPulseStarted)
        step = f"pulse:{run_id}"
        run = {"id": run_id, "planned_pulse_id": pulse["id"], "title": pulse["title"], "attempt": attempt,
               "status": "running", "session_id": session_id_for(workflow_id, step),
               "pulse_branch": started.pulse_branch, "base_commit": started.base_commit,
               "checkpoint_commit": None, "diff_artifact_id": None, "description": None, "files_changed": [],
               "has_unresolved_issues": False, "unresolved_issues": [], "is_recovery_checkpoint": False,
               "completion_rejections": 0, "extensions": 0, "failure_reason": None, "started_at": _now(),
               "ended_at": None, "ending": None}

        def record(w: Workflow) -> None:
            w.pulse_started(run=run)
            text = kickoffs.kickoff("pulse", w, run)
            w.assign_session(step=step, session_id=run["session_id"], role="pulsing",
                             root=w.execution["worktree_path"], kickoff=text, script=run_id, notes=[],
                             assigned_at=_now())

        await self._record(workflow_id, record)

    async def checkpoint(self, workflow_id: str, run: dict[str, Any]) -> None:
        summary, _, body = run["description"].partition("\n")
        done = await self._ask("git", "checkpoint_pulse",
                               CheckpointPulse(workflow_id=workflow_id, pulse_id=run["id"], summary=summary.strip(),
                                               body=body.strip()), PulseCheckpointed)
        diff = await self._ask("git", "pulse_diff", PulseDiff(workflow_id=workflow_id, pulse_id=run["id"]),
                               DiffArtifactRef)

        def record(w: Workflow) -> None:
            w.pulse_ended(run_id=run["id"], status="succeeded", commit=done.commit, diff_artifact_id=diff.artifact_id,
                          is_recovery_checkpoint=False, ended_at=_now())
            if run["unresolved_issues"]:
                w.halt_for("unresolved_issues",
                           f"{run['id']} succeeded with unresolved issues; review them, then resume",
                           pulse_id=run["id"], details={"unresolved_issues": run["unresolved_issues"]})

        await self._record(workflow_id, record)

    async def recover(self, workflow_id: str, run: dict[str, Any]) -> None:
        status = run["ending"]
        reason = run.get("failure_reason") or status
        done = await self._ask("git", "recovery_checkpoint",
                               RecoveryCheckpoint(workflow_id=workflow_id, pulse_id=run["id"], status=status,
                                                  reason=reason[:10_000]), RecoveryCheckpointed)

        def record(w: Workflow) -> None:
            w.pulse_ended(run_id=run["id"], status=status, commit=done.commit, diff_artifact_id=None,
                          is_recovery_checkpoint=done.is_recovery_checkpoint, ended_at=_now())
            if w.halt is None:
                w.halt_for("pulse_failed" if status == "failed" else "stopped",
                           f"{run['id']} {status}: {reason}; resume runs it again", pulse_id=run["id"],
                           details={"recovery_commit": done.commit, "pulse_branch": done.pulse_branch})

        await self._record(workflow_id, record)

    async def finish_execution(self, workflow_id: str) -> None:
        await self._record(workflow_id, Workflow.finish_execution)

    async def remove_worktree(self, workflow_id: str) -> None:
        await self._ask("git", "remove_worktree", RemoveWorktree(workflow_id=workflow_id, force=True),
                        WorktreeRemoved)
        await self._record(workflow_id, lambda w: w.worktree_removed_event())

    async def _watch_preflights(self) -> None:
        """Abandon a workflow whose preflight runs longer than ``preflight_timeout`` (seed 000: a timeout fails it)."""
        period = min(5.0, self.settings.preflight_timeout / 4)
        while True:
            await asyncio.sleep(period)
            for workflow_id, view in list(self.orch.views.items()):
                if view.stage != "execution" or view.status != "active" or "preflight" not in view.sessions:
                    continue
                try:
                    await self._time_out_preflight(workflow_id)
                except Exception as exc:
                    log.warning("workflow %s: preflight watchdog: %s", workflow_id, exc)

    async def _time_out_preflight(self, workflow_id: str) -> None:
        async with self._locks[workflow_id]:
            wf = await self.orch.read(workflow_id)
            session = wf.sessions.get("preflight")
            if wf.preflight is not None or session is None or wf.abandoned or wf.halt is not None:
                return
            ran = (datetime.now(UTC) - datetime.fromisoformat(session["assigned_at"])).total_seconds()
            if ran < self.settings.preflight_timeout:
                return
            message = f"preflight timed out after {self.settings.preflight_timeout:g}s"

            def record(w: Workflow) -> None:
                if w.preflight is None and not w.abandoned:
                    w.complete_preflight(status="failed", error=message)
                    w.abandon(message)

            await self.orch.change(workflow_id, record)
            await self._ask("agent_runner", "stop_session",
                            StopSession(session_id=session["session_id"], reason=message, close=True), SessionStopped)
        self.kick(workflow_id)

    # --- turn outcomes ---------------------------------------------------------------------------------

    async def _consume(self, sub: Any) -> None:
        decoder = msgspec.json.Decoder(TurnCompleted)
        while True:
            try:
                messages = await sub.fetch(batch=32, timeout=5)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # fetch timeouts, reconnects
                if type(exc).__name__ != "TimeoutError":
                    log.warning("turn consumer: %r", exc)
                    await asyncio.sleep(0.5)
                continue
            for msg in messages:
                try:
                    event = decoder.decode(msg.data)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    log.warning("turn consumer: undecodable event on %s: %s", msg.subject, exc)
                    await msg.ack()
                    continue
                try:
                    await self.on_turn(event)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("turn %s of workflow %s not handled yet (%s); redelivering", event.turn_id,
                                event.workflow_id, exc)
                    await msg.nak(delay=1)
                    continue
                await msg.ack()

    async def on_turn(self, event: TurnCompleted) -> None:
        """Record what a finished agent turn means for its workflow (idempotent on the turn id)."""
        try:
            uuid.UUID(event.workflow_id)
        except ValueError:
            return  # a channel discussion: no workflow
        try:
            wf = await self.orch.read(event.workflow_id)
        except ServiceFailure:
            return
        step = wf.step_of(event.session_id)
        if step is None or event.turn_id in wf.seen:
            return
        log.info("workflow %s: %s turn ended %s%s", event.workflow_id, step, event.outcome,
                 f" ({event.tool})" if event.tool else "")
        async with self._locks[event.workflow_id]:
            session = None
            if step.startswith("pulse:"):
                session = await self._ask("agent_runner", "get_session", GetSession(session_id=event.session_id),
                                          SessionView)
            settings = self.settings
            await self._record(event.workflow_id, lambda w: _handle_turn(w, step, event, session, settings))
        self.kick(event.workflow_id)

    # --- user controls -----------------------------------------------------------------------------------

    async def stop_workflow(self, workflow_id: str, reason: str) -> Workflow:
        async with self._locks[workflow_id]:
            wf = await self.orch.read(workflow_id)
            try:
                _check_open(wf)
            except LifecycleError as exc:
                raise ServiceFailure(exc.code, exc.message, {"workflow_id": workflow_id, **exc.details}) from None
            step = _current_step(wf)
            if wf.halt is not None or step is None or wf.awaiting_approval:
                state = f"halted ({wf.halt['reason']})" if wf.halt else (
                    "awaiting approval" if wf.awaiting_approval else "between steps")
                raise ServiceFailure(WorkflowErrorCode.NOT_RUNNING,
                                     f"no agent is working on this workflow: it is {state}",
                                     {"workflow_id": workflow_id, "stage": wf.stage})

            def record(w: Workflow) -> None:
                run = w.running_run()
                w.halt_for("stopped", reason, pulse_id=run["id"] if run else None, details={"step": step})
                if run is not None:
                    w.end_pulse_as(run["id"], "stopped", reason)

            wf, _ = await self.orch.change(workflow_id, record)
            session_id = wf.sessions[step]["session_id"] if step in wf.sessions else None
            if session_id is not None:
                await self._ask("agent_runner", "stop_session", StopSession(session_id=session_id, reason=reason),
                                SessionStopped)
        self.kick(workflow_id)
        return wf

    async def resume_workflow(self, workflow_id: str, message: str | None) -> Workflow:
        def record(w: Workflow) -> None:
            _check_open(w)
            halt = w.resume(("unresolved_issues", "pulse_failed", "stopped", "error"), message)
            step = halt["details"].get("step")
            # A stopped or failed pulse runs again as a new attempt (next_action); any other step continues.
            if halt["pulse_id"] is None and step in w.sessions:
                w.queue_message(step, kickoffs.resume_note(halt["reason"], message))

        return await self._user_change(workflow_id, record)

    async def approve_extension(self, workflow_id: str, message: str | None) -> Workflow:
        def record(w: Workflow) -> None:
            _check_open(w)
            halt = w.resume(("extension_requested",), message)
            w.queue_message(halt["details"]["step"], kickoffs.extension_approved(halt["details"], message))

        return await self._user_change(workflow_id, record)

    async def answer_questions(self, workflow_id: str, answers: list[str]) -> Workflow:
        def record(w: Workflow) -> None:
            _check_open(w)
            halt = w.resume(("questions",), "\n".join(answers))
            questions = halt["details"].get("questions") or []
            w.queue_message(halt["details"]["step"], kickoffs.questions_answered(questions, answers))

        return await self._user_change(workflow_id, record)

    async def _user_change(self, workflow_id: str, record: Callable[[Workflow], None]) -> Workflow:
        async with self._locks[workflow_id]:
            wf, _ = await self.orch.change(workflow_id, record)
        self.kick(workflow_id)
        return wf


def _check_open(wf: Workflow) -> None:
    if wf.abandoned or wf.stage == "done":
        raise LifecycleError(WorkflowErrorCode.FINISHED,
                             f"the workflow is {'abandoned' if wf.abandoned else 'done'}", stage=wf.stage)


def _current_step(wf: Workflow) -> str | None:
    """The step whose agent works now (or last worked), if any."""
    if wf.stage in ("scoping", "research", "planning", "review"):
        return wf.stage if wf.stage in wf.sessions else None
    if wf.stage != "execution":
        return None
    run = wf.running_run()
    if run is not None:
        return f"pulse:{run['id']}"
    if wf.preflight is None and "preflight" in wf.sessions:
        return "preflight"
    return None


def _handle_turn(wf: Workflow, step: str, event: TurnCompleted, session: SessionView | None,
                 settings: Settings) -> None:
    """Record the meaning of one finished turn of ``step``'s session (runs in the workflow's mailbox)."""
    if event.turn_id in wf.seen:
        return
    wf.turn_handled(turn_id=event.turn_id, step=step, outcome=event.outcome)
    if wf.abandoned or wf.stage == "done":
        return
    run = wf.run(step.split(":", 1)[1]) if step.startswith("pulse:") else None
    if run is not None and (run["status"] != "running" or run.get("ending")):
        return  # the pulse already ended (stopped by the user, or failed): a late outcome changes nothing
    if run is not None and session is not None:
        # The run counts the refusals it recorded, so each refusal is recorded once whatever turn reports it.
        for _, message, revealed in completion_rejections(session)[run["completion_rejections"]:]:
            wf.reject_completion(run["id"], [message], revealed)
    if step == "preflight" and wf.preflight is not None:
        return
    outcome = event.outcome
    if outcome == "cancelled":
        if wf.halt is None:  # cancelled by someone else than the workflow's stop
            wf.halt_for("stopped", event.detail or "the agent's turn was cancelled", details={"step": step},
                        pulse_id=run["id"] if run else None)
            if run is not None:
                wf.end_pulse_as(run["id"], "stopped", event.detail or "cancelled")
        return
    if outcome in ("error", "budget_exceeded", "step_limit"):
        detail = event.detail or outcome
        if step == "preflight":
            wf.complete_preflight(status="failed", error=detail)
            wf.abandon(f"preflight failed: {detail}")
        elif run is not None and outcome == "step_limit":
            wf.end_pulse_as(run["id"], "failed", f"iteration limit: {detail}")
        else:
            wf.record_error(stage=wf.stage, message=f"{step}: {detail}")
            wf.halt_for("error", f"the {step} agent failed: {detail}", details={"step": step},
                        pulse_id=run["id"] if run else None)
        return
    turns = sum(1 for m in wf.outbox if m["step"] == step) + 1
    if run is not None and turns >= settings.pulse_max_turns and not (
            outcome == "block" and event.tool == "complete_pulse"):
        wf.end_pulse_as(run["id"], "failed", f"iteration limit: {turns} turns without completing the pulse")
        return
    block = BLOCK_OF_STEP.get(step, "complete_pulse")
    if outcome == "end_turn":
        if wf.nudges.get(step, 0) >= settings.stage_nudges:
            message = f"the {step} agent ended its turn without {block} {settings.stage_nudges + 1} times"
            if run is not None:
                wf.end_pulse_as(run["id"], "failed", message)
            else:
                wf.record_error(stage=wf.stage, message=message)
                wf.halt_for("error", message, details={"step": step})
        else:
            wf.nudge(step, kickoffs.nudge(step, block))
        return
    tool, args = event.tool or "", event.arguments or {}
    if tool == "ask_questions":
        wf.halt_for("questions", "the agent asks questions; answer them to continue",
                    pulse_id=run["id"] if run else None, details={"step": step, "questions": args.get("questions", [])})
    elif tool == "request_extension":
        if run is not None:
            wf.extend_pulse(run["id"])
        wf.halt_for("extension_requested", f"the {step} agent asks for more time: {args.get('reason', '')}",
                    pulse_id=run["id"] if run else None, details={"step": step, **args})
    elif tool in ("submit_scope", "submit_research", "submit_plan"):
        _submit(wf, step, tool, args)
    elif tool == "complete_preflight":
        success = bool(args.get("buildSuccess"))
        wf.complete_preflight(status="completed" if success else "failed", summary=args.get("summary"),
                              setup_commands=list(args.get("setupCommands") or []), build_success=success,
                              baselines_recorded=int(args.get("baselinesRecorded") or 0),
                              error=None if success else "the baseline build does not succeed")
        if not success:
            wf.abandon(f"preflight failed: {args.get('summary', 'the build does not succeed')}")
    elif tool == "complete_pulse" and run is not None:
        _complete_pulse(wf, step, run, args)
    elif tool == "complete_review":
        if not wf.awaiting_approval:
            wf.nudge(step, kickoffs.nudge(step, block))


def _submit(wf: Workflow, step: str, tool: str, args: dict[str, Any]) -> None:
    card = msgspec.to_builtins(msgspec.convert(args, BLOCK_TOOL_ARGUMENTS[tool]))
    try:
        wf.submit_artifact(step, card)  # the turn id already made this once-only (TurnHandled)
    except LifecycleError as exc:
        wf.queue_message(step, f"{tool} was refused: {exc.message}. Fix it and call {tool} again.")


def _complete_pulse(wf: Workflow, step: str, run: dict[str, Any], args: dict[str, Any]) -> None:
    # The runner only lets complete_pulse end a turn once no tool failure is left unresolved, or once the
    # escape hatch was revealed and the agent listed what it could not fix.
    summary = str(args.get("summary", "")).strip()
    if not CONVENTIONAL_COMMIT.match(summary.partition("\n")[0]):
        wf.queue_message(step, "complete_pulse was not accepted: the summary's first line must be a Conventional "
                               "Commit such as `feat(auth): validate JWT tokens`. Call complete_pulse again.")
        return
    wf.accept_completion(run["id"], description=summary, files_changed=list(args.get("filesChanged") or []),
                         unresolved_issues=list(args.get("unresolvedIssues") or []))
