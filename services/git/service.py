"""The ``git`` service: one ``nats.micro`` endpoint per verb of ``contracts.git``.

Each request runs in a worker thread under its repository's lock (see ``locks.py``), so two
operations on one repository never interleave while different repositories proceed in
parallel. Before serving, the service finishes any checkpoint or recovery a previous instance
was killed in the middle of.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from nats.aio.client import Client

from autarch.contracts.bead_git import (
    BeginBead,
    CloseWorker,
    CommitBead,
    MergeBead,
    OpenWorker,
    SyncWorkflowWorktree,
    WriteWorkerFiles,
)
from autarch.contracts.git import (
    CheckpointPulse,
    CreateWorkflowBranch,
    GetDiffArtifact,
    GetWorkflowBranch,
    GetWorktreeRecord,
    ListWorktrees,
    ModifiedTrackedFiles,
    PulseDiff,
    RecoveryCheckpoint,
    RegisterRepository,
    RemoveWorktree,
    StartPulse,
    WorkflowDiff,
)
from autarch.runtime.micro import TypedService
from autarch.runtime.settings import GitSettings, narrow

from . import artifacts
from .commits import Identity
from .engine import GitEngine, repository_id_for
from .faults import FaultInjector
from .locks import RepositoryLocks
from .snapshots import DEFAULT_MAX_FILE_BYTES

__all__ = ["GitService", "identity_from_settings", "start"]

log = logging.getLogger("git")

T = TypeVar("T")


def identity_from_settings(settings: GitSettings) -> Identity:
    """The commit identity configured in the settings (default author and committer "Autarch")."""
    return Identity(
        author_name=settings.git_author_name,
        author_email=settings.git_author_email,
        committer_name=settings.git_committer_name,
        committer_email=settings.git_committer_email,
    )


class GitService:
    """The engine behind typed endpoints, with per-repository serialisation."""

    def __init__(
        self,
        nc: Client,
        *,
        data_dir: Path,
        identity: Identity | None = None,
        faults: FaultInjector | None = None,
        max_workers: int = 8,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        watch_worktrees: bool = True,
    ) -> None:
        self.engine = GitEngine(data_dir=data_dir, identity=identity, faults=faults, max_file_bytes=max_file_bytes,
                                watch_worktrees=watch_worktrees)
        self.locks = RepositoryLocks(self.engine.store.lock_path, max_workers=max_workers)
        self.micro = TypedService(nc, name="git", description="branches, worktrees, checkpoints and diffs")
        engine = self.engine
        by_run, by_workflow = self._by_run, self._by_workflow
        self._add("register_repository", RegisterRepository, self._register)
        self._add("list_worktrees", ListWorktrees, self._list_worktrees)
        # Records only, read without the repository lock (they are replaced atomically): the tools service
        # asks before its first git or command in a worktree.
        self._add("worktree_record", GetWorktreeRecord,
                  lambda q: asyncio.to_thread(engine.worktree_record, q))
        self._add("create_workflow_branch", CreateWorkflowBranch, self._create_workflow_branch)
        self._add("get_workflow_branch", GetWorkflowBranch, by_run(engine.view))
        self._add("start_pulse", StartPulse, by_run(engine.start_pulse))
        self._add("checkpoint_pulse", CheckpointPulse, by_run(engine.checkpoint_pulse))
        self._add("recovery_checkpoint", RecoveryCheckpoint, by_run(engine.recovery_checkpoint))
        self._add("modified_tracked_files", ModifiedTrackedFiles, by_run(engine.modified_tracked_files))
        self._add("remove_worktree", RemoveWorktree, by_run(engine.remove_worktree))
        self._add("workflow_diff", WorkflowDiff, by_run(lambda q: artifacts.workflow_diff(engine, q)))
        self._add("pulse_diff", PulseDiff, by_run(lambda q: artifacts.pulse_diff(engine, q)))
        self._add("get_diff_artifact", GetDiffArtifact, self._get_diff_artifact)
        # The swarm's verbs (contracts.bead_git); merges are serialised by the repository lock.
        self._add("open_worker", OpenWorker, by_workflow(engine.open_worker))
        self._add("begin_bead", BeginBead, by_workflow(engine.begin_bead))
        self._add("commit_bead", CommitBead, by_workflow(engine.commit_bead))
        self._add("merge_bead", MergeBead, by_workflow(engine.merge_bead))
        self._add("sync_workflow_worktree", SyncWorkflowWorktree, by_workflow(engine.sync_workflow_worktree))
        self._add("close_worker", CloseWorker, by_workflow(engine.close_worker))
        self._add("write_worker_files", WriteWorkerFiles, by_workflow(engine.write_worker_files))

    def _add(self, verb: str, request_type: type[Any], handler: Callable[[Any], Awaitable[Any]]) -> None:
        self.micro.endpoint(verb, request_type, handler)

    def _by_run(self, operation: Callable[[Any], T]) -> Callable[[Any], Awaitable[T]]:
        """A request of ``contracts.git``, serialised on the repository of the run (workflow or loop session) it
        names in ``run_id``."""
        return self._on_repository_of(lambda request: request.run_id, operation)

    def _by_workflow(self, operation: Callable[[Any], T]) -> Callable[[Any], Awaitable[T]]:
        """A request of ``contracts.bead_git`` (swarms are a workflow's only), serialised on its workflow's
        repository."""
        return self._on_repository_of(lambda request: request.workflow_id, operation)

    def _on_repository_of(self, owner: Callable[[Any], str],
                          operation: Callable[[Any], T]) -> Callable[[Any], Awaitable[T]]:
        async def handle(request: Any) -> T:
            repository_id = self.engine.repository_of(owner(request))
            return await self.locks.run(repository_id, lambda: operation(request))

        return handle

    async def _register(self, cmd: RegisterRepository) -> Any:
        return await self.locks.run(repository_id_for(cmd.path), lambda: self.engine.register_repository(cmd))

    async def _list_worktrees(self, query: ListWorktrees) -> Any:
        return await self.locks.run(query.repository_id, lambda: self.engine.list_worktrees(query))

    async def _create_workflow_branch(self, cmd: CreateWorkflowBranch) -> Any:
        return await self.locks.run(cmd.repository_id, lambda: self.engine.create_workflow_branch(cmd))

    async def _get_diff_artifact(self, query: GetDiffArtifact) -> Any:
        # Artifacts never change once written: no lock.
        return await asyncio.to_thread(artifacts.get_diff_artifact, self.engine.artifacts, query)

    async def recover(self) -> None:
        """Finish every operation a killed instance left half done."""
        for repository_id, workflow_id in self.engine.pending_workflows():
            try:
                kind = await self.locks.run(repository_id, functools.partial(self.engine.finish_pending, workflow_id))
            except Exception:
                log.exception("could not finish the interrupted operation of workflow %s", workflow_id)
                continue
            if kind:
                log.info("finished the interrupted %s of workflow %s", kind, workflow_id)

    async def start(self) -> None:
        await self.recover()
        await self.micro.start()

    async def stop(self) -> None:
        await self.micro.stop()
        await asyncio.to_thread(self.locks.close)
        self.engine.close()


async def start(nc: Client, settings: GitSettings) -> Callable[[], Awaitable[None]]:
    """The ``run_service`` starter: serve on ``nc`` with the data dir and identity from ``settings``."""
    settings = narrow(settings, GitSettings)
    service = GitService(
        nc,
        data_dir=settings.data_path,
        identity=identity_from_settings(settings),
        faults=FaultInjector.from_env(),
        max_file_bytes=settings.git_max_file_bytes,
        watch_worktrees=settings.git_watch_worktrees,
    )
    await service.start()
    return service.stop
