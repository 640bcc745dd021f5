"""The indexer service: ``semantic_search`` and indexing endpoints on NATS, jobs in the background.

Indexing runs in a worker thread (the model and SQLite release the GIL for the heavy parts) and
publishes :class:`IndexProgress` events on ``autarch.indexer.progress.<project>`` over core NATS.
One job per scope at a time: asking again while one runs answers with the running job.

The service answers before its index is open: the engine's imports (numpy, onnxruntime, tokenizers) and the
embedding model's load take a second or more of CPU, which at ``autarch up`` every other service's start-up shares
on a small machine. They are made after the service serves, in a worker thread; a request that comes meanwhile
waits for them (``TypedService.hold_until_loaded``), as a first search would wait for the model in any case.
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
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.base import encode
from autarch.contracts.errors import ErrorCode
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

if TYPE_CHECKING:  # imported when the index opens, after the service serves (see above)
    from .engine import Indexer, ScopeRef
    from .turn_memory import TurnMemory

__all__ = ["IndexerService", "start"]

log = logging.getLogger("indexer")

Req = TypeVar("Req")
Resp = TypeVar("Resp")

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
        from .engine import JobCancelled  # imported by now: the job ran on the engine

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


def _open(nc: Client, settings: IndexerSettings) -> tuple[IndexerService, TurnMemoryService]:
    """Open the index and the turn memory, and mark jobs a previous process left unfinished (in a worker thread)."""
    from .engine import Indexer
    from .turn_memory import TurnMemory

    indexer = Indexer.from_settings(settings)
    try:
        interrupted = indexer.mark_interrupted()
        if interrupted:
            log.warning("%d indexing jobs were interrupted by a restart; index them again", interrupted)
        log.info("embedder %s, store %s", indexer.embedder.id, type(indexer.store).__name__)
        # Under the embedder's id, as the index is: vectors of another model would not compare.
        memory = TurnMemory(settings.data_path / "indexer" / indexer.embedder.id / "turns.sqlite", indexer.embedder)
    except BaseException:
        indexer.close()
        raise
    return IndexerService(nc=nc, indexer=indexer), TurnMemoryService(memory)


def _when_open(opened: list[tuple[IndexerService, TurnMemoryService]],
               pick: Callable[[IndexerService, TurnMemoryService], Callable[[Req], Awaitable[Resp]]]
               ) -> Callable[[Req], Awaitable[Resp]]:
    """The handler ``pick`` chooses of the open index; called only once it is open (requests wait till then)."""

    async def handle(request: Req) -> Resp:
        return await pick(*opened[0])(request)

    return handle


async def start(nc: Client, settings: IndexerSettings) -> Callable[[], Awaitable[None]]:
    """Serve the endpoints, then open the index (requests wait for it) and mark jobs a previous process left
    unfinished."""
    settings = narrow(settings, IndexerSettings)
    opened: list[tuple[IndexerService, TurnMemoryService]] = []
    service = TypedService(nc, name="indexer", description="Semantic index of projects and pulse worktrees")
    service.endpoint("index_project", IndexProject, _when_open(opened, lambda i, _: i.index_project))
    service.endpoint("index_worktree", IndexWorktree, _when_open(opened, lambda i, _: i.index_worktree))
    service.endpoint("index_status", IndexStatus, _when_open(opened, lambda i, _: i.index_status))
    service.endpoint("semantic_search", SemanticSearch, _when_open(opened, lambda i, _: i.semantic_search))
    service.endpoint("record_turns", RecordTurns, _when_open(opened, lambda _, t: t.record_turns))
    service.endpoint("find_turn", FindTurn, _when_open(opened, lambda _, t: t.find_turn))
    service.endpoint("latest_turn", LatestTurn, _when_open(opened, lambda _, t: t.latest_turn))
    service.endpoint("search_turns", SearchTurns, _when_open(opened, lambda _, t: t.search_turns))
    service.endpoint("turn_slice", TurnSlice, _when_open(opened, lambda _, t: t.turn_slice))
    loaded = service.hold_until_loaded()
    await service.start()
    try:
        opened.append(await asyncio.to_thread(_open, nc, settings))
    except BaseException as exc:
        # The waiting requests are told (a caller retries "unavailable"); the start then fails as it did before.
        loaded(ServiceFailure(ErrorCode.UNAVAILABLE, f"the indexer could not open its index: {exc!r}"))
        await service.stop()
        raise
    loaded(None)
    handlers, turns = opened[0]

    async def stop() -> None:
        await service.stop()
        await handlers.stop()
        handlers.indexer.close()
        turns.memory.close()

    return stop
