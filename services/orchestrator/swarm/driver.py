"""The swarm driver: it runs a bead plan's execution with parallel pulse workers (seed 002).

Like the workflow driver it keeps no state of its own: the next step is a function of the swarm's recorded
state, and each step is an idempotent request (git's worker verbs are keyed by bead and attempt, sessions
and tool calls by deterministic ids) followed by recording its result. Each worker loops: take the top-ranked
ready bead → claim it (a conditional write) → start from the workflow branch tip → lease its files → run the
agent → verify → one commit → merge (serialized by the git service) → release → next. Agent turns run in
the agent runner concurrently; this driver only makes the short steps between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from nats.aio.client import Client

from autarch.contracts.agents import (
    GetSession,
    SendMessage,
    SessionView,
    StartSession,
    TurnAccepted,
)
from autarch.contracts.bead_git import (
    BeadBegun,
    BeadCommitted,
    BeadMerged,
    BeginBead,
    CloseWorker,
    CommitBead,
    MergeBead,
    OpenWorker,
    SyncWorkflowWorktree,
    WorkerClosed,
    WorkerFilesWritten,
    WorkerWorktree,
    WorkflowWorktreeSynced,
    WriteWorkerFiles,
)
from autarch.contracts.beads import ConflictRecord, RequestScope, ScopeAnswer, WorkerDiscipline
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import TurnCompleted
from autarch.contracts.mail import COORDINATOR, MailMessage
from autarch.runtime.cancel import cancel_and_wait
from autarch.runtime.errors import RemoteError
from autarch.runtime.leases import patterns_overlap
from autarch.runtime.settings import OrchestratorSettings

from ..caught_up import turn_completed
from ..stepping import Stepper, ask_service, stop_agent_session
from . import kickoffs
from .book import SwarmBook, ranked
from .evidence import evidence_markdown
from .handoffs import (
    MANIFEST,
    STATE_FILE,
    handoff_document,
    handoff_mail_request,
    manifest_document,
    owner_file,
    resume_briefing,
    state_document,
)
from .model import Attempt, Bead, ScopeRequest, Swarm, SwarmError
from .plan import auto_workers, bead_dicts, plan_feature

if TYPE_CHECKING:
    from autarch.runtime.leases import LeaseTable

    from ..workflow.model import Workflow

PostMail = Callable[..., Awaitable[MailMessage]]
"""Posts a message on an epic: ``(epic, sender, to, subject, body, *, key)`` (``MailBook.post``)."""

__all__ = ["IDLE", "SwarmDriver", "worker_names"]

log = logging.getLogger("orchestrator.swarm")

T = TypeVar("T")
IDLE = object()
"""What a pass answers when the swarm has nothing to do now (it waits for agents or a person)."""

_ADJECTIVES = ("Amber", "Copper", "Silver", "Cobalt", "Crimson", "Ivory", "Jade", "Onyx", "Scarlet", "Teal",
               "Violet", "Golden")
_ANIMALS = ("Falcon", "Heron", "Otter", "Lynx", "Badger", "Raven", "Marten", "Wren", "Ibex", "Panda", "Tern",
            "Fox")
_MAX_ATTEMPTS = 3
"""Attempts at one bead that end without landing before it is bounced to a person."""


def worker_names(workflow_id: str, count: int) -> list[tuple[str, str]]:
    """(registered name, runtime nickname) of each worker: deterministic, distinct, readable."""
    seed = int(hashlib.sha256(workflow_id.encode()).hexdigest()[:8], 16)
    names: list[tuple[str, str]] = []
    used: set[str] = set()
    i = 0
    while len(names) < count:
        name = _ADJECTIVES[(seed + i) % len(_ADJECTIVES)] + _ANIMALS[(seed // 7 + 5 * i) % len(_ANIMALS)]
        if name in used:
            name = f"{name}{i}"
        used.add(name)
        names.append((name, f"w{len(names) + 1}"))
        i += 1
    return names


def _now() -> str:
    return datetime.now(UTC).isoformat()


class SwarmDriver:
    """Makes each epic's next step; called by the workflow driver inside the workflow's lock."""

    def __init__(self, *, nc: Client, book: SwarmBook, settings: OrchestratorSettings, leases: LeaseTable | None,
                 steps: Stepper, finish_workflow: Callable[[str], Awaitable[object]],
                 halt_workflow: Callable[[str, str], Awaitable[object]], post_mail: PostMail | None = None) -> None:
        """
        Args:
            steps: the workflows' stepper (an epic is advanced as a step of its workflow's execution).
            finish_workflow: ends a workflow's execution once its epic finished (on to review).
            halt_workflow: halts a workflow's execution for a person, with the message saying why.
            post_mail: posts coordination mail (seed 002): the workers' acknowledgments and reports, the
                coordinator's answers (None: no mail).
        """
        self.nc = nc
        self.book = book
        self.settings = settings
        self.leases = leases
        self.steps = steps
        self._finish_workflow = finish_workflow
        self._halt_workflow = halt_workflow
        self._post_mail = post_mail
        self._watch: asyncio.Task[None] | None = None
        self._releases: asyncio.Task[None] | None = None

    def kick(self, workflow_id: str) -> None:
        self.steps.kick(workflow_id)

    async def start(self, epics: list[str]) -> None:
        self._watch = asyncio.create_task(self._watch_leases(), name="swarm-leases")
        self._releases = asyncio.create_task(self._follow_releases(), name="swarm-releases")
        for epic in epics:
            self.kick(epic)
            self.steps.in_background(self.catch_up(epic))

    async def stop(self) -> None:
        for task in (self._watch, self._releases):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._watch = self._releases = None

    # --- requests --------------------------------------------------------------------------------------

    async def _ask(self, service: str, verb: str, payload: msgspec.Struct, reply: type[T]) -> T:
        return await ask_service(self.nc, self.settings, service, verb, payload, reply)

    # --- one pass ---------------------------------------------------------------------------------------

    async def step(self, wf: Workflow) -> object:
        """Make one step of ``wf``'s swarm; :data:`IDLE` when there is none to make now."""
        wid = str(wf.id)
        swarm = await self.book.find(wid)
        if swarm is None:
            await self._create(wf)
            return None
        if swarm.finished:
            return await self._finish_execution(wf)
        # Each worker's next step is independent of the others' (their own attempt, their own worktree): they
        # run at once, and each records its result on a fresh read of the swarm. Merges stay one at a time
        # (the git service serializes them); only claims are made one after another, below.
        jobs = self._clean_up(wid, swarm)
        names = worker_names(wid, swarm.max_workers)
        jobs.extend(self._open_worker(wid, name, nickname) for name, nickname in names[len(swarm.workers):])
        jobs.extend(self._advance_attempt(wf, swarm, a) for a in swarm.open_attempts() if _needs_step(a))
        if jobs:
            await _all(jobs)
            # Claims need not wait for the clean-up above: a worker whose bead landed is free at once.
            await self._assign(wid, await self.book.read(wid))
            return None
        claimed = await self._assign(wid, swarm)
        if claimed is not IDLE:
            return claimed
        if swarm.all_closed() and not swarm.open_attempts():
            await self._wind_up(wid, swarm)
            return None
        if not swarm.open_attempts() and wf.halt is None:
            stuck = [b for b in swarm.beads.values() if b.status == "bounced"]
            if stuck:
                await self._halt_for_people(wid, stuck)
                return None
        return IDLE

    def _clean_up(self, wid: str, swarm: Swarm) -> list[Awaitable[object]]:
        """What ended attempts leave to do: close their sessions (cancelling a turn still running), then
        release their leases; and close the sessions a handoff left behind."""
        jobs: list[Awaitable[object]] = []
        for a in swarm.attempts.values():
            if not a.open and a.session_started and not a.session_closed:
                jobs.append(self._close_session(wid, a))
            elif not a.open and a.leased and not a.leases_released:
                jobs.append(self._release(wid, a, "done" if a.ended == "merged" else "reopened"))
            if not a.open:
                # A session that handed off and never got to its mail (the attempt ended meanwhile) is closed too.
                jobs.extend(self._close_stale(wid, a, sid) for sid in a.stale_sessions)
        for a in swarm.open_attempts():
            if a.handoff_mail is not None and not a.handoff_mail_asked:
                jobs.append(self._ask_handoff_mail(wid, swarm, a))
            # The session that handed off stays open until its [HANDOFF] mail turn ended.
            jobs.extend(self._close_stale(wid, a, sid) for sid in a.stale_sessions if sid != a.handoff_mail)
        return jobs

    async def settle(self, wid: str) -> object:
        """One round of clean-up, as a step of a halted workflow (no claims, no new work); :data:`IDLE` when
        there is none left."""
        swarm = await self.book.find(wid)
        jobs = self._clean_up(wid, swarm) if swarm is not None else []
        if not jobs:
            return IDLE
        await _all(jobs)
        return None

    async def stop_workers(self, wid: str, reason: str) -> list[str]:
        """Stop every worker of ``wid``'s swarm at once (the workflow is halted first, so nothing new is claimed):
        attempts at work are reopened, their turns cancelled and their sessions closed, then their leases
        released. Returns the beads reopened."""
        swarm = await self.book.find(wid)
        if swarm is None or swarm.finished:
            return []
        _, stopped = await self.book.change(wid, lambda s: s.stop(reason))
        # Sessions close before leases go (two passes): a running turn must not write once its files are free.
        # Should a request fail here, the halted workflow's own steps finish the clean-up (``settle``).
        while await self.settle(wid) is not IDLE:
            pass
        log.info("workflow %s: swarm stopped (%s); reopened %s", wid, reason, [a.bead_id for a in stopped] or "none")
        return [a.bead_id for a in stopped]

    async def _create(self, wf: Workflow) -> None:
        plan = wf.artifacts.planning
        assert plan is not None and wf.execution is not None
        at = _now()
        beads = bead_dicts(plan, feature=plan_feature(wf.execution.branch), at=at)
        standalone = wf.swarm_advice == "single-worker"
        typed = [msgspec.convert(b, Bead) for b in beads]
        workers = auto_workers(typed, self.settings.swarm_workers, standalone=standalone)
        swarm = Swarm(workflow_id=str(wf.id), mode="standalone" if standalone else "swarm", max_workers=workers,
                      beads=beads, at=at)
        await self.book.create(swarm)
        log.info("workflow %s: epic of %d beads, %d workers (%s)", wf.id, len(beads), workers, swarm.mode)

    async def _held_elsewhere(self, wid: str, swarm: Swarm) -> set[str]:
        """Beads whose last attempt met a lease held outside this swarm (or a worker's own reservation) that is
        still held: they wait for its release (the lease watch kicks the epic then) instead of meeting the same
        conflict again."""
        blocked = [b for b in swarm.beads.values() if b.status == "open" and b.conflicts
                   and b.conflicts[-1].kind == "lease"]
        if not blocked or self.leases is None:
            return set()
        live = await self.leases.leases(wid)
        ours = {a.worker for a in swarm.open_attempts()}
        # A worker's own reservation counts too: unlike its bead's files, it is not released by a claim's turn-over.
        held = [lease.pattern for lease in live if lease.holder not in ours or lease.origin == "worker"]
        return {b.id for b in blocked if any(patterns_overlap(p, f) for p in held for f in b.files)}

    async def _open_worker(self, wid: str, name: str, nickname: str) -> None:
        opened = await self._ask("git", "open_worker", OpenWorker(workflow_id=wid, worker=name), WorkerWorktree)
        # The startup acknowledgment is the worker's own first act (its kickoff asks for it), not posted here.
        await self.book.change(wid, lambda s: s.join(name, nickname, opened.worktree_path))

    async def _assign(self, wid: str, swarm: Swarm) -> object:
        """Give each free worker the top-ranked ready bead whose files no other worker has (the coordinator's
        choice: a bead whose files are taken waits, reordered behind the others)."""
        # A worker takes new work once its last attempt let go of its files (a release names the holder, so it
        # must not meet the next bead's leases) and, if that attempt was reopened, once its session is closed:
        # its turn may still be running (a lapsed lease) and would write into the worktree the next bead uses.
        unsettled = {a.worker for a in swarm.attempts.values() if not a.open and (
            (a.leased and not a.leases_released)
            or (a.ended == "reopened" and a.session_started and not a.session_closed))}
        free = [w.name for w in swarm.workers.values() if w.status in ("idle", "waiting") and w.name not in unsettled]
        if not free:
            return IDLE
        ready = ranked(swarm).ready
        if not ready:
            return IDLE
        # Files are taken from a claim until the release: an attempt that landed still holds its leases until
        # the release is recorded, and a claim meanwhile would only meet a lease conflict.
        taken = {f for a in swarm.attempts.values() if a.open or (a.leased and not a.leases_released)
                 for f in swarm.beads[a.bead_id].files}
        claimed = 0
        waiting_on_release = await self._held_elsewhere(wid, swarm)
        for candidate in ready:
            if not free:
                break
            bead = swarm.beads[candidate.bead_id]
            if taken & set(bead.files) or bead.id in waiting_on_release:
                continue
            worker = free.pop(0)
            await self.book.change(wid, lambda s, b=bead.id, w=worker: s.claim(b, w))  # type: ignore[misc]  # bound now
            log.info("workflow %s: %s claimed %s", wid, worker, bead.id)
            taken |= set(bead.files)
            claimed += 1
        idle = [w for w in free if swarm.workers[w].status != "waiting"]
        if idle and len(ready) > claimed:
            # Ready work is left but its files are taken: these workers wait for a release (which kicks them).
            await self.book.change(wid, lambda s: [s.wait(w) for w in idle])  # type: ignore[func-returns-value]  # unused
            return None
        return None if claimed else IDLE

    async def _advance_attempt(self, wf: Workflow, swarm: Swarm, a: Attempt) -> object:
        wid = str(wf.id)
        bead = swarm.beads[a.bead_id]
        if a.base_commit is None:
            # Starting from the tip and leasing the files do not depend on each other: both at once.
            await _all([self._begin(wid, bead, a), *([] if a.leased else [self._lease(wid, swarm, a)])])
            return None
        if not a.leased:
            await self._lease(wid, swarm, a)
            return None
        if not a.session_started:
            await self._start_session(wf, swarm, a)
            return None
        if a.pending_message is not None:
            await self._ask("agent_runner", "send_message",
                            SendMessage(session_id=a.session_id, text=a.pending_message,
                                        message_id=f"{a.session_id}:{a.message_count + 1}"), TurnAccepted)
            await self.book.change(wid, lambda s: s.message_delivered(s.attempts[(a.bead_id, a.number)]))
            return None
        if a.verified and not a.committed:
            if not await self._still_holding(wid, a):
                return None
            files = {}
            if a.evidence is not None and bead.verification_evidence:
                files[bead.verification_evidence] = evidence_markdown(bead, a, a.evidence)
            done = await self._ask("git", "commit_bead", CommitBead(
                workflow_id=wid, worker=a.worker, bead_id=a.bead_id, attempt=a.number,
                summary=kickoffs.commit_summary(a.summary or bead.title, bead), files=files), BeadCommitted)
            await self.book.change(wid, lambda s: s.committed(s.attempts[(a.bead_id, a.number)], done.commit,
                                                              done.files_changed))
            return None
        if a.committed:
            await self._merge(wid, a)
            return None
        return IDLE

    async def _begin(self, wid: str, bead: Bead, a: Attempt) -> None:
        """Reset the worker's worktree to the workflow branch tip and put the bead's card in it (to read, and to
        read again after a compaction)."""
        begun = await self._ask("git", "begin_bead", BeginBead(workflow_id=wid, worker=a.worker, bead_id=a.bead_id,
                                                               attempt=a.number), BeadBegun)
        await self._ask("git", "write_worker_files", WriteWorkerFiles(
            workflow_id=wid, worker=a.worker, files={_card(bead.id): kickoffs.bead_card(bead)}),
            WorkerFilesWritten)
        await self.book.change(wid, lambda s: s.begun(s.attempts[(a.bead_id, a.number)], begun.base_commit))

    async def _lease(self, wid: str, swarm: Swarm, a: Attempt) -> None:
        bead = swarm.beads[a.bead_id]
        if not bead.files or self.leases is None:
            await self.book.change(wid, lambda s: s.leased(s.attempts[(a.bead_id, a.number)], []))
            return
        outcome = await self.leases.acquire(wid, a.worker, list(bead.files), mode="exclusive", bead_id=bead.id,
                                            ttl=self.settings.lease_ttl)
        holders = _refusal_holders(outcome)
        if holders is None:
            await self.book.change(wid, lambda s: s.leased(s.attempts[(a.bead_id, a.number)], list(bead.files)))
            return
        files, held_by = holders
        log.info("workflow %s: %s cannot lease %s (held by %s)", wid, a.worker, files, held_by)
        await self.book.change(wid, lambda s: s.lease_conflict(s.attempts[(a.bead_id, a.number)], files, held_by))
        # The coordinator found the conflict and settles it (the worker asked for nothing, so nothing is posted in
        # its name): the bead goes back to ready, the worker waits for the release (pushed).
        await self._post(wid, COORDINATOR, f"File conflict on {a.bead_id}",
                         f"Your claim of {a.bead_id} needs {', '.join(files)}, held by {', '.join(held_by)}. "
                         f"{a.bead_id} is back in the ready list; you wait until {', '.join(held_by)} releases "
                         f"{', '.join(files)} and are then given the next ready bead.", to=[a.worker],
                         key=f"conflict:{a.bead_id}:{a.number}")

    async def _start_session(self, wf: Workflow, swarm: Swarm, a: Attempt) -> None:
        wid = str(wf.id)
        bead = swarm.beads[a.bead_id]
        worker = swarm.workers[a.worker]
        assert worker.worktree_path is not None
        script = bead.id if a.number == 1 else f"{bead.id}-a{a.number}"
        kickoff = kickoffs.bead_kickoff(wf, swarm, bead, a)
        read_first: list[str] = []
        if a.generation:
            script += f"-h{a.generation}"
            path = owner_file(swarm, a.worker)
            handoff = next(d for d in reversed(swarm.handoff_documents) if d.owner_id.endswith(a.worker)
                           or swarm.mode == "standalone")
            files = {path: json.dumps(msgspec.to_builtins(handoff), indent=2) + "\n",
                     MANIFEST: manifest_document(swarm.handoffs)}
            await self._ask("git", "write_worker_files",
                            WriteWorkerFiles(workflow_id=wid, worker=a.worker, files=files), WorkerFilesWritten)
            kickoff = resume_briefing(handoff, path) + "\n" + kickoff
            read_first = [path]
        discipline = WorkerDiscipline(bead_id=bead.id, verify=list(bead.verify), testing_mode=bead.testing_mode,
                                      tdd_steps=bead.tdd_steps, read_first=read_first,
                                      handoff_at=self.settings.handoff_threshold, bead_file=_card(bead.id),
                                      decision_refs=list(bead.decision_refs),
                                      context_file=f"history/{_feature_of(bead)}/CONTEXT.md")
        command = StartSession(session_id=a.session_id, role="pulsing", root=worker.worktree_path,
                               kickoff=kickoff, run_id=wid, script=script, baselines=[], lease_holder=a.worker,
                               discipline=discipline)
        accepted = await self._ask("agent_runner", "start_session", command, TurnAccepted)
        await self.book.change(wid, lambda s: s.session_opened(s.attempts[(a.bead_id, a.number)], accepted.turn_id))

    def _give_up(self, s: Swarm, a: Attempt, reason: str) -> None:
        """End an attempt that cannot land; after too many, the bead goes to a person (bounced)."""
        s.reopen(a, reason)
        # Attempts that never ran (their files were leased elsewhere) or that the user stopped are not failures of
        # the bead.
        failures = sum(1 for x in s.attempts.values() if x.bead_id == a.bead_id and x.ended == "reopened"
                       and x.session_started and not x.stopped)
        if failures >= _MAX_ATTEMPTS:
            s.bounce(a.bead_id, f"{failures} attempts did not land; the last: {reason}")

    async def _merge(self, wid: str, a: Attempt) -> None:
        merged = await self._ask("git", "merge_bead", MergeBead(workflow_id=wid, worker=a.worker, bead_id=a.bead_id,
                                                                attempt=a.number), BeadMerged)
        if merged.status == "merged":
            swarm, _ = await self.book.change(wid, lambda s: s.merged_as(s.attempts[(a.bead_id, a.number)],
                                                                         merged.commit))
            log.info("workflow %s: %s landed as %s", wid, a.bead_id, (merged.commit or "")[:12])
            if a.leased:
                # The seed's order: the files are released before the completion report goes out.
                await self._release(wid, a, "done")
            await self._report_completion(wid, swarm, a, merged.commit)
            return
        conflict = ConflictRecord(kind="merge", attempt=a.number, files=list(merged.conflicting_files),
                                  landed_since=list(merged.landed_since), at=datetime.now(UTC))
        log.info("workflow %s: %s conflicts on %s; reopened", wid, a.bead_id, merged.conflicting_files)
        await self.book.change(wid, lambda s: s.reopen(
            s.attempts[(a.bead_id, a.number)],
            f"merge conflict: {', '.join(merged.conflicting_files)} changed on the workflow branch since the "
            "attempt began", conflict))

    async def _release(self, wid: str, a: Attempt, reason: str) -> None:
        if self.leases is not None:
            await self.leases.release(wid, a.worker)
        await self.book.change(wid, lambda s: s.released(s.attempts[(a.bead_id, a.number)], reason))

    async def _ask_handoff_mail(self, wid: str, swarm: Swarm, a: Attempt) -> None:
        """Write the handoff into the worktree, then ask the session that handed off to send the coordinator its
        ``[HANDOFF]`` mail (seed 002, worker mode): the mail is the worker's own tool call, never posted for it."""
        assert a.handoff_mail is not None
        worker = swarm.workers[a.worker]
        path = owner_file(swarm, a.worker)
        handoff = next(d for d in reversed(swarm.handoff_documents) if d.owner_id.endswith(a.worker))
        files = {path: json.dumps(msgspec.to_builtins(handoff), indent=2) + "\n",
                 MANIFEST: manifest_document(swarm.handoffs)}
        await self._ask("git", "write_worker_files", WriteWorkerFiles(workflow_id=wid, worker=a.worker, files=files),
                        WorkerFilesWritten)
        session = a.handoff_mail
        try:
            await self._ask("agent_runner", "send_message",
                            SendMessage(session_id=session, text=handoff_mail_request(handoff, path, worker.nickname,
                                                                                      worker.name),
                                        message_id=f"{session}:handoff-mail"), TurnAccepted)
        except RemoteError as exc:
            if exc.code != ErrorCode.CONFLICT:
                raise
            view = await self._ask("agent_runner", "get_session", GetSession(session_id=session), SessionView)
            if view.status != "closed":
                raise  # a turn still running: asked again on the next pass
            # The session cannot take a turn any more: no mail is sent, and the work goes on without it.
            why = f"not asked: {exc.message}"
            log.warning("workflow %s: %s's handoff session %s %s", wid, a.worker, session, why)
            await self.book.change(wid, lambda s: s.handoff_mail_turn_ended(
                s.attempts[(a.bead_id, a.number)], f"{session}:handoff-mail", why))
            return
        await self.book.change(wid, lambda s: s.handoff_mail_asked(s.attempts[(a.bead_id, a.number)]))

    async def _close_stale(self, wid: str, a: Attempt, session_id: str) -> None:
        """Close a session a handoff left behind (its turn ended; the attempt goes on in a fresh one)."""
        await stop_agent_session(self.nc, self.settings, session_id, "handed off", close=True)
        await self.book.change(wid, lambda s: s.stale_session_closed(s.attempts[(a.bead_id, a.number)], session_id))

    async def _close_session(self, wid: str, a: Attempt) -> None:
        await stop_agent_session(self.nc, self.settings, a.session_id, a.end_reason or "bead attempt over", close=True)
        await self.book.change(wid, lambda s: s.session_closed(s.attempts[(a.bead_id, a.number)]))

    async def _wind_up(self, wid: str, swarm: Swarm) -> None:
        await self._ask("git", "sync_workflow_worktree", SyncWorkflowWorktree(workflow_id=wid),
                        WorkflowWorktreeSynced)
        for w in swarm.workers.values():
            if w.status != "retired":
                await self._ask("git", "close_worker", CloseWorker(workflow_id=wid, worker=w.name), WorkerClosed)
                await self.book.change(wid, lambda s, n=w.name: s.retire(n))  # type: ignore[misc]  # the default binds now
        await self.book.change(wid, Swarm.finish)

    async def _finish_execution(self, wf: Workflow) -> object:
        if wf.stage != "execution":
            return IDLE
        await self._finish_workflow(str(wf.id))
        return None

    async def _halt_for_people(self, wid: str, stuck: list[Any]) -> None:
        names = ", ".join(f"{b.id} ({b.bounce_reason})" for b in stuck)
        await self._halt_workflow(wid, f"beads need a person: {names}. Edit them (PATCH /api/beads/{wid}/<bead>) or "
                                       "close them, then resume")

    # --- coordination mail -------------------------------------------------------------------------------

    async def _post(self, wid: str, sender: str, subject: str, body: str, *, to: list[str] | None = None,
                    key: str) -> object:
        """Post on the epic thread (best effort: mail must never hold back the work it reports on)."""
        if self._post_mail is None:
            return None
        try:
            return await self._post_mail(wid, sender, to or [COORDINATOR], subject, body, key=key)
        except Exception as exc:
            log.warning("epic %s: mail %r not posted: %s", wid, subject, exc)
            return None

    async def _report_completion(self, wid: str, swarm: Swarm, a: Attempt, commit: str | None) -> None:
        worker = swarm.workers[a.worker]
        bead = swarm.beads[a.bead_id]
        attempt = swarm.attempts[(a.bead_id, a.number)]
        verification = "passed" if attempt.evidence is not None and attempt.evidence.passed else "none recorded"
        if swarm.mode == "standalone":
            # One worker and no coordinator: the completion is recorded in .pulse/STATE.md (seed 002), not mailed.
            await self._ask("git", "write_worker_files", WriteWorkerFiles(
                workflow_id=wid, worker=a.worker, files={STATE_FILE: state_document(swarm)}), WorkerFilesWritten)
            return
        # The coordinator's record of what landed (the platform saw the commit and the evidence), sent to every worker
        # of the epic: the worker did not write this mail, so it does not go out in its name.
        await self._post(wid, COORDINATOR, f"Completed {a.bead_id}",
                         f"Landed by {worker.name} (runtime nickname {worker.nickname}). Implemented: "
                         f"{attempt.summary or bead.title}. Files: {', '.join(attempt.files_changed or bead.files)}. "
                         f"Verification: {verification} ({bead.verification_evidence or '-'}). "
                         f"Commit: {(commit or '-')[:12]}.", to=sorted(swarm.workers),
                         key=f"done:{a.bead_id}:{a.number}")

    # --- a worker's request for more files ----------------------------------------------------------------

    async def request_scope(self, command: RequestScope) -> ScopeAnswer:
        """Record a worker's request for files beyond its bead's, then answer it as the coordinator: widen the bead
        and its lease, or refuse with the reason. Files another worker holds are waited for up to
        ``wait_seconds`` (woken by the lease table's changes); then the request is refused."""
        wid = command.epic_id
        try:
            _, (a, request) = await self.book.change(
                wid, lambda s: s.request_scope(command.worker, command.request_id, command.paths, command.why))
        except SwarmError as exc:
            raise exc.failure(epic_id=wid) from None
        changed = asyncio.Event()
        watch = asyncio.create_task(self._watch_table(wid, changed)) if command.wait_seconds else None
        deadline = asyncio.get_running_loop().time() + command.wait_seconds
        try:
            while request.granted is None:
                changed.clear()
                held, reason = await self._decide_scope(wid, a, request)
                left = deadline - asyncio.get_running_loop().time()
                if held and left > 0:
                    # Woken by the table's change; the cap only covers a release made before the watch was up.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), timeout=min(left, 1.0))
                    continue
                if reason is not None:
                    await self.book.change(wid, functools.partial(_refuse_scope, key=(a.bead_id, a.number),
                                                                  request_id=request.request_id, reason=reason,
                                                                  held_by=held))
                swarm = await self.book.read(wid)
                a = swarm.attempts[(a.bead_id, a.number)]
                request = next(r for r in a.scope_requests if r.request_id == request.request_id)
        finally:
            if watch is not None:
                await cancel_and_wait([watch])
        swarm = await self.book.read(wid)
        return ScopeAnswer(request_id=request.request_id, granted=bool(request.granted), bead_id=a.bead_id,
                           added=list(request.added), files=list(swarm.beads[a.bead_id].files),
                           reason=request.reason, held_by=list(request.held_by))

    async def _watch_table(self, wid: str, changed: asyncio.Event) -> None:
        """Set ``changed`` whenever ``wid``'s lease table changes (a release may free what a request waits for)."""
        if self.leases is None:
            return
        async for scope in self.leases.watch():
            if scope == wid:
                changed.set()

    async def _decide_scope(self, wid: str, a: Attempt, request: ScopeRequest) -> tuple[list[str], str | None]:
        """Widen now if the paths are free ((held_by, None) after recording it); else (held_by, why refused)."""
        swarm = await self.book.read(wid)
        a = swarm.attempts[(a.bead_id, a.number)]
        bead = swarm.beads[a.bead_id]
        if not a.open or a.verified or a.committed:
            return [], f"the attempt at {bead.id} is {'over' if not a.open else 'completed'}: nothing to widen"
        swarms_own = [p for p in request.paths if p.split("/")[0] in (".pulse", ".git")]
        if swarms_own:
            return [], f"{', '.join(swarms_own)}: the swarm's own files are never a bead's"
        added = [p for p in request.paths if p not in bead.files]
        if not added:
            await self.book.change(wid, lambda s: s.widen(s.attempts[(a.bead_id, a.number)], request.request_id, []))
            return [], None
        # Files of another worker's bead (claimed, maybe not leased yet) are that worker's until it lets go.
        held = sorted({x.worker for x in swarm.open_attempts() if x.worker != a.worker
                       and any(patterns_overlap(p, f) for p in added for f in swarm.beads[x.bead_id].files)})
        if not held and self.leases is not None:
            outcome = await self.leases.acquire(wid, a.worker, added, mode="exclusive", bead_id=bead.id,
                                                ttl=self.settings.lease_ttl, origin="coordinator")
            refused = _refusal_holders(outcome)
            if refused is not None:
                held = refused[1]
        if held:
            return held, f"{', '.join(added)} held by {', '.join(held)}; ask again once they are released"
        await self.book.change(wid, lambda s: s.widen(s.attempts[(a.bead_id, a.number)], request.request_id, added))
        log.info("workflow %s: %s widened by %s for %s", wid, bead.id, added, a.worker)
        return [], None

    # --- leases ------------------------------------------------------------------------------------------

    async def _still_holding(self, wid: str, a: Attempt) -> bool:
        """Renew the worker's leases before a step that relies on them; a lapsed lease reopens the bead."""
        if self.leases is None or not a.leased:
            return True
        record = (await self.book.read(wid)).leases.get(a.worker)
        if record is None or not record.patterns:
            return True
        if await self.leases.renew(wid, a.worker, self.settings.lease_ttl) > 0:
            return True
        await self.book.change(wid, lambda s: s.reopen(s.attempts[(a.bead_id, a.number)],
                                                       f"the leases of {a.worker} lapsed"))
        return False

    @contextlib.asynccontextmanager
    async def _renewing(self, wid: str, holder: str) -> AsyncIterator[None]:
        if self.leases is None:
            yield
            return
        leases = self.leases

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.settings.lease_ttl / 3)
                with contextlib.suppress(Exception):
                    await leases.renew(wid, holder, self.settings.lease_ttl)

        task = asyncio.create_task(renew())
        try:
            yield
        finally:
            await cancel_and_wait([task])

    async def _follow_releases(self) -> None:
        """Kick an epic whenever its lease table changes: a release by anyone (another workflow's worker, a
        person) wakes the workers waiting for those files at once, without their polling."""
        if self.leases is None:
            return
        while True:
            try:
                async for scope in self.leases.watch():
                    if scope in self.book.active:
                        self.kick(scope)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the watch ended (a reconnect): follow again
                log.info("lease watch ended (%s); following again", exc)
                await asyncio.sleep(1.0)

    async def _watch_leases(self) -> None:
        """Reopen beads whose worker stopped renewing (its runner died): the lease TTL ran out."""
        if self.leases is None:
            return
        period = max(0.2, min(5.0, self.settings.lease_ttl / 2))
        while True:
            await asyncio.sleep(period)
            for epic in sorted(self.book.active):
                try:
                    await self._expire(epic)
                except Exception as exc:
                    log.warning("epic %s: lease watch: %s", epic, exc)

    async def _expire(self, epic: str) -> None:
        assert self.leases is not None
        swarm = await self.book.find(epic)
        if swarm is None or swarm.finished:
            return
        expired = await self.leases.expire(epic)
        holders = {lease.holder for lease in expired}
        if not holders:
            return
        lapsed = [a for a in swarm.open_attempts() if a.worker in holders and a.leased]
        if not lapsed:
            return
        log.info("epic %s: leases of %s lapsed; their beads are ready again", epic, sorted(holders))

        def record(s: Swarm) -> None:
            for a in lapsed:
                s.reopen(s.attempts[(a.bead_id, a.number)], f"the leases of {a.worker} lapsed (no renewal within "
                                                            f"{self.settings.lease_ttl:g}s)")
                s.released(s.attempts[(a.bead_id, a.number)], "expired")

        await self.book.change(epic, record)

    # --- turns ---------------------------------------------------------------------------------------------

    async def on_turn(self, event: TurnCompleted) -> bool:
        """Record a worker's finished turn; False when the session is no worker's."""
        swarm = await self.book.find(event.run_id)
        if swarm is None:
            return False
        a = swarm.attempt_of_session(event.session_id)
        if a is None:
            return False
        # Not waiting for the asked flag: the mail turn may end before the request to it is recorded. The handoff
        # turn itself is in ``seen`` already.
        if a.open and event.session_id == a.handoff_mail and event.turn_id not in swarm.seen:
            # The handed-off session's mail turn ended (whatever it sent is its own record): the next one may start.
            await self.book.change(event.run_id, lambda s: s.handoff_mail_turn_ended(
                s.attempts[(a.bead_id, a.number)], event.turn_id, event.outcome))
            return True
        if event.turn_id in swarm.seen or not a.open or event.session_id != a.session_id:
            return True
        bead = swarm.beads[a.bead_id]
        if event.outcome == "handoff":
            await self._hand_off(event, swarm, a)
            return True
        summary = None
        nudge = None
        evidence = event.evidence
        if event.tool == "complete_pulse" and event.arguments:
            summary = str(event.arguments.get("summary") or "").strip() or bead.title
        elif a.nudges < self.settings.stage_nudges and event.outcome != "error":
            nudge = kickoffs.bead_nudge(bead)
        wid = event.run_id

        def record(s: Swarm) -> None:
            attempt = s.attempts[(a.bead_id, a.number)]
            s.turn_handled(attempt, event.turn_id, event.outcome, summary=summary, nudge=nudge)
            if summary is not None and evidence is not None and evidence.passed:
                path = s.beads[a.bead_id].verification_evidence
                s.evidence_recorded(attempt, msgspec.structs.replace(evidence, attempt=a.number, path=path))
            elif summary is not None:
                # The runner lets a worker's close through only with a passing verification: none is a fault.
                self._give_up(s, attempt, "the bead was closed without a passing verification")
            elif nudge is None:
                detail = event.detail or event.outcome
                self._give_up(s, attempt, f"the worker's turn ended without completing ({detail})")

        await self.book.change(wid, record)
        if summary is not None and self.leases is not None and a.leased:
            # The runner stopped renewing when the turn ended; verification comes next: keep the files meanwhile.
            with contextlib.suppress(Exception):
                await self.leases.renew(wid, a.worker, self.settings.lease_ttl)
        return True

    async def _hand_off(self, event: TurnCompleted, swarm: Swarm, a: Attempt) -> None:
        """The worker's context passed its limit: record its handoff; a fresh session resumes the attempt."""
        bead = swarm.beads[a.bead_id]
        feature = _feature_of(bead)
        path = owner_file(swarm, a.worker)
        handoff = handoff_document(swarm, a, bead, feature=feature, tokens_used_pct=event.tokens_used_pct or 0.0,
                                   paused_at=event.occurred_at)
        log.info("workflow %s: %s hands off %s at %s", event.run_id, a.worker, a.bead_id, event.detail)
        await self.book.change(event.run_id, lambda s: s.handed_off(s.attempts[(a.bead_id, a.number)],
                                                                         event.turn_id, path, handoff))

    async def catch_up(self, epic: str) -> None:
        """Handle worker turns that ended while no orchestrator recorded them (see the workflow driver's)."""
        swarm = await self.book.find(epic)
        if swarm is None:
            return
        for a in swarm.open_attempts():
            if not a.session_started:
                continue
            try:
                view = await self._ask("agent_runner", "get_session", GetSession(session_id=a.session_id),
                                       SessionView)
            except RemoteError as exc:
                log.info("epic %s: %s not caught up (%s)", epic, a.session_id, exc)
                continue
            for turn in view.turns:
                if turn.outcome is not None and turn.turn_id not in swarm.seen:
                    await self.on_turn(turn_completed(epic, view, turn))


def _refuse_scope(s: Swarm, *, key: tuple[str, int], request_id: str, reason: str, held_by: list[str]) -> None:
    s.refuse_scope(s.attempts[key], request_id, reason, held_by)


def _feature_of(bead: Bead) -> str:
    """The feature a bead's evidence path names (``history/<feature>/verification/…``), for its handoff."""
    parts = (bead.verification_evidence or "").split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "history" else "feature"


def _card(bead_id: str) -> str:
    return f".pulse/beads/{bead_id}.md"


def _needs_step(a: Attempt) -> bool:
    """Whether an open attempt has a step for the driver (else it waits for its agent)."""
    if a.handoff_mail is not None:
        return False  # the session that handed off sends its [HANDOFF] mail first (a clean-up job asks it)
    return (a.base_commit is None or not a.leased or not a.session_started or a.pending_message is not None
            or a.verified)


async def _all(jobs: list[Awaitable[object]]) -> None:
    """Run ``jobs`` at once; the first failure is raised once all have ended (the stepper retries the pass)."""
    results = await asyncio.gather(*jobs, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _refusal_holders(outcome: Any) -> tuple[list[str], list[str]] | None:
    """(files, holders) of a refused acquire; None when the leases were granted."""
    conflicts = getattr(outcome, "conflicts", None)
    if conflicts is None:
        return None
    files = sorted({getattr(c, "pattern", str(c)) for c in conflicts})
    holders = sorted({getattr(c, "holder", "?") for c in conflicts})
    return files, holders
