"""The indexer service: ``semantic_search`` and indexing endpoints on NATS, jobs in the background.

Indexing runs in a worker thread (the model and SQLite release the GIL for the heavy parts) and
publishes :class:`IndexProgress` events on ``autarch.indexer.progress.<project>`` over core NATS.
One job per scope at a time: asking again while one runs answers with the running job.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import msgspec
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.base import encode
from autarch.contracts.indexer import (
    IndexAccepted,
    IndexProgress,
    IndexProject,
    IndexStatus,
    IndexStatusReply,
    IndexWorktree,
    SearchResults,
    SemanticSearch,
)
from autarch.contracts.turns import (
    FindTurn,
    LatestTurn,
    RecordTurns,
    SearchTurns,
    SliceView,
    TurnFound,
    TurnHits,
    TurnRecord,
    TurnSlice,
    TurnsRecorded,
)
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.micro import TypedService
from autarch.runtime.settings import IndexerSettings, narrow

from .engine import Indexer, JobCancelled, ScopeRef
from .turn_memory import TurnMemory

__all__ = ["IndexerService", "start"]

log = logging.getLogger("indexer")

PROGRESS_INTERVAL = 0.5
"""Seconds between two progress events of one job within a phase (phase changes always go out)."""


@dataclass
class _RunningJob:
    ref: ScopeRef
    job_id: str
    task: asyncio.Task[IndexAccepted]
    cancel: threading.Event


@dataclass
class IndexerService:
    """Endpoint handlers over an :class:`Indexer`, with the jobs it runs."""

    nc: Client
    indexer: Indexer
    jobs: dict[tuple[str, str], _RunningJob] = field(default_factory=dict)

    async def index_project(self, command: IndexProject) -> IndexAccepted:
        ref = await asyncio.to_thread(self.indexer.project_target, command.path)
        if command.commit:
            # Validate the commit now so a typo is a typed error, not a failed background job.
            await asyncio.to_thread(self.indexer.resolve_commit, ref, command.commit)
        return await self._run(
            ref,
            lambda progress, job_id, cancel: self.indexer.index_project(
                command.path, commit=command.commit, progress=progress, job_id=job_id, cancel=cancel
            ),
            wait=command.wait,
        )

    async def index_worktree(self, command: IndexWorktree) -> IndexAccepted:
        ref = await asyncio.to_thread(self.indexer.worktree_target, command.project, command.worktree)
        return await self._run(
            ref,
            lambda progress, job_id, cancel: self.indexer.index_worktree(
                command.project, command.worktree, base=command.base, progress=progress, job_id=job_id, cancel=cancel
            ),
            wait=command.wait,
        )

    async def index_status(self, query: IndexStatus) -> IndexStatusReply:
        return await asyncio.to_thread(self.indexer.status, project=query.project, root=query.root)

    async def semantic_search(self, query: SemanticSearch) -> SearchResults:
        return await asyncio.to_thread(self.indexer.search, query)

    async def _run(
        self,
        ref: ScopeRef,
        work: Callable[[Callable[[IndexProgress], None], str, threading.Event], IndexAccepted],
        *,
        wait: bool,
    ) -> IndexAccepted:
        key = (ref.project, ref.scope)
        running = self.jobs.get(key)
        if running is None:
            job_id = uuid.uuid4().hex[:12]
            cancel = threading.Event()
            progress = self._publisher(asyncio.get_running_loop())
            task = asyncio.create_task(asyncio.to_thread(work, progress, job_id, cancel))
            running = self.jobs[key] = _RunningJob(ref=ref, job_id=job_id, task=task, cancel=cancel)
            task.add_done_callback(functools.partial(self._finished, key, running))
        if wait:
            return await asyncio.shield(running.task)
        return IndexAccepted(
            project=ref.project,
            scope=ref.scope,
            job_id=running.job_id,
            root=ref.root,
            state="indexing",
            progress_subject=subjects.indexer_progress(ref.project),
        )

    def _finished(self, key: tuple[str, str], job: _RunningJob, task: asyncio.Task[IndexAccepted]) -> None:
        if self.jobs.get(key) is job:
            del self.jobs[key]
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, JobCancelled):
            log.info("%s/%s: job %s cancelled", job.ref.project, job.ref.scope, job.job_id)
        elif exc is not None:
            log.error("%s/%s: job %s failed: %s", job.ref.project, job.ref.scope, job.job_id, exc, exc_info=exc)
        else:
            result = task.result()
            log.info(
                "%s/%s: indexed %d files, %d chunks (%d embedded) in %.1fs",
                result.project,
                result.scope,
                result.files,
                result.chunks,
                result.embedded_chunks,
                result.seconds,
            )

    def _publisher(self, loop: asyncio.AbstractEventLoop) -> Callable[[IndexProgress], None]:
        """A thread-safe progress callback that publishes at most every PROGRESS_INTERVAL per phase."""
        last: dict[str, Any] = {"phase": "", "at": 0.0}

        def publish(event: IndexProgress) -> None:
            now = time.monotonic()
            final = event.phase in ("done", "failed")
            if not final and event.phase == last["phase"] and now - float(last["at"]) < PROGRESS_INTERVAL:
                return
            last["phase"], last["at"] = event.phase, now
            data = encode(event)
            subject = subjects.indexer_progress(event.project)
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._publish(subject, data)))

        return publish

    async def _publish(self, subject: str, data: bytes) -> None:
        try:
            await self.nc.publish(subject, data)
        except Exception:  # progress is best effort; the job's result and status stay authoritative
            log.debug("could not publish progress on %s", subject, exc_info=True)

    async def stop(self) -> None:
        for job in list(self.jobs.values()):
            job.cancel.set()
        await asyncio.gather(*(job.task for job in list(self.jobs.values())), return_exceptions=True)


@dataclass
class TurnMemoryService:
    """The turn memory's endpoints (loop anchors): each query runs in a worker thread."""

    memory: TurnMemory

    async def record_turns(self, command: RecordTurns) -> TurnsRecorded:
        turns = [_checked_turn(turn, n) for n, turn in enumerate(command.turns)]
        recorded, total = await asyncio.to_thread(self.memory.record, turns)
        return TurnsRecorded(recorded=recorded, total=total)

    async def find_turn(self, query: FindTurn) -> TurnFound:
        return TurnFound(turn=self.memory.find(query.turn_id, query.project_path))

    async def latest_turn(self, query: LatestTurn) -> TurnFound:
        return TurnFound(turn=self.memory.latest(query.project_path))

    async def search_turns(self, query: SearchTurns) -> TurnHits:
        if not query.query.strip():
            raise ServiceFailure.bad_request("query is blank", field="query")
        hits = await asyncio.to_thread(self.memory.search, query.project_path, query.query, query.limit)
        return TurnHits(items=hits)

    async def turn_slice(self, query: TurnSlice) -> SliceView:
        view = self.memory.slice(query.turn_id, query.token_budget)
        if view is None:
            raise ServiceFailure.not_found(f"no recorded turn {query.turn_id}", turn_id=query.turn_id)
        return view


def _checked_turn(turn: TurnRecord, n: int) -> TurnRecord:
    """``turn`` as remembered, or a bad_request naming the field: ids are non-empty, counts not negative."""
    for name in ("turn_id", "session_id", "project_path"):
        if not getattr(turn, name).strip():
            raise ServiceFailure.bad_request(f"turns[{n}].{name} is empty", field=f"turns[{n}].{name}")
    for name in ("index", "tokens"):
        if getattr(turn, name) < 0:
            raise ServiceFailure.bad_request(f"turns[{n}].{name} is negative", field=f"turns[{n}].{name}")
    if turn.occurred_at.tzinfo is None:
        # A naive time is taken as UTC: mixed with aware ones, "latest" could not compare them.
        return msgspec.structs.replace(turn, occurred_at=turn.occurred_at.replace(tzinfo=UTC))
    return turn


async def start(nc: Client, settings: IndexerSettings) -> Callable[[], Awaitable[None]]:
    """Open the index, mark jobs a previous process left unfinished, and serve the endpoints."""
    settings = narrow(settings, IndexerSettings)
    indexer = await asyncio.to_thread(Indexer.from_settings, settings)
    interrupted = await asyncio.to_thread(indexer.mark_interrupted)
    if interrupted:
        log.warning("%d indexing jobs were interrupted by a restart; index them again", interrupted)
    log.info("embedder %s, store %s", indexer.embedder.id, type(indexer.store).__name__)
    handlers = IndexerService(nc=nc, indexer=indexer)
    service = TypedService(nc, name="indexer", description="Semantic index of projects and pulse worktrees")
    service.endpoint("index_project", IndexProject, handlers.index_project)
    service.endpoint("index_worktree", IndexWorktree, handlers.index_worktree)
    service.endpoint("index_status", IndexStatus, handlers.index_status)
    service.endpoint("semantic_search", SemanticSearch, handlers.semantic_search)
    # Under the embedder's id, as the index is: vectors of another model would not compare.
    memory = await asyncio.to_thread(TurnMemory, settings.data_path / "indexer" / indexer.embedder.id / "turns.sqlite",
                                     indexer.embedder)
    turns = TurnMemoryService(memory)
    service.endpoint("record_turns", RecordTurns, turns.record_turns)
    service.endpoint("find_turn", FindTurn, turns.find_turn)
    service.endpoint("latest_turn", LatestTurn, turns.latest_turn)
    service.endpoint("search_turns", SearchTurns, turns.search_turns)
    service.endpoint("turn_slice", TurnSlice, turns.turn_slice)
    await service.start()

    async def stop() -> None:
        await service.stop()
        await handlers.stop()
        indexer.close()
        memory.close()

    return stop
