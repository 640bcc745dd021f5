"""The git service's operations: synchronous, each run under its repository's lock.

The service (``service.py``) decides which lock an operation needs and runs it in a worker
thread; everything here may block on the filesystem. Each operation either completes, fails
with a typed error having changed nothing, or leaves a journaled step that
:meth:`GitEngine.finish_pending` completes.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from dulwich.objects import Commit
from dulwich.repo import Repo

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
from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import (
    CheckpointPulse,
    CreateWorkflowBranch,
    FileChange,
    GetWorkflowBranch,
    GetWorktreeRecord,
    GitErrorCode,
    ListWorktrees,
    ModifiedTrackedFiles,
    PulseCheckpointed,
    PulseStarted,
    PulseView,
    RecoveryCheckpoint,
    RecoveryCheckpointed,
    RegisterRepository,
    RemoveWorktree,
    RepositoryRegistered,
    StartPulse,
    TrackedChanges,
    WorkflowBranchView,
    WorktreeList,
    WorktreeRecord,
    WorktreeRemoved,
    WorktreeView,
)
from autarch.runtime.worktree_files import remove_tree

from . import checkpoints, merges, workers
from .checkout import commit_tree_id, index_trees, reset_worktree, tracked_state
from .commits import Identity
from .dulwich_ids import oid, ref_name
from .faults import FaultInjector
from .index_file import read_index
from .refs import (
    BranchNameError,
    branch_ref,
    break_ref_lock,
    clashing_ref,
    create_branch,
    delete_branch,
    pulse_branch_name,
    read_branch,
    validate_branch_name,
)
from .snapshots import DEFAULT_MAX_FILE_BYTES, Snapshot
from .store import ArtifactStore, GitStore, PulseRecord, RepositoryRecord, WorkflowRecord
from .swarm_records import SwarmStore
from .trees import MODE_SYMLINK, TreeSet, diff_trees
from .watch import WorktreeWatch
from .workspace import Workspace, fail, open_repository
from .worktrees import admin_dir, break_stale_locks, create_worktree_links, linked_worktrees, remove_worktree, set_head

__all__ = ["GitEngine", "repository_id_for"]


def repository_id_for(path: str) -> str:
    """The stable id of the repository at ``path`` (its real path, hashed)."""
    return hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:16]


def _check_branch_name(name: str) -> None:
    try:
        validate_branch_name(name)
    except BranchNameError as exc:
        raise fail(GitErrorCode.INVALID_BRANCH_NAME, f"illegal branch name: {exc}", branch=name) from None


def _commit_in(repo: Repo, commit: str) -> bytes:
    """``commit`` as the repository holds it; ``not_found`` when it holds no such commit."""
    try:
        found = repo.object_store[oid(commit.encode())]
    except KeyError:
        found = None
    if not isinstance(found, Commit):
        raise fail(ErrorCode.NOT_FOUND, f"the repository holds no commit {commit}", commit=commit)
    return commit.encode()


def _checked_out_branch(repo: Repo, path: str) -> str:
    """The branch HEAD names (a detached HEAD has none: the caller must name a base branch)."""
    head = repo.refs.read_ref(ref_name(b"HEAD")) or b""
    if not head.startswith(b"ref: refs/heads/"):
        raise fail(
            GitErrorCode.BASE_BRANCH_MISSING,
            f"{path} has no branch checked out (detached HEAD): name the base branch",
            path=path,
        )
    return head.removeprefix(b"ref: refs/heads/").decode(errors="surrogateescape")


class GitEngine:
    """Repositories, workflow branches, worktrees and pulses, stored under ``data_dir``."""

    def __init__(
        self,
        *,
        data_dir: Path,
        identity: Identity | None = None,
        faults: FaultInjector | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        watch_worktrees: bool = True,
    ):
        self.data_dir = data_dir
        self.max_file_bytes = max_file_bytes
        self.store = GitStore(data_dir / "git")
        self.artifacts = ArtifactStore(data_dir / "git" / "artifacts")
        self.swarms = SwarmStore(data_dir / "git" / "swarms")
        self.worktrees_root = data_dir / "worktrees"
        self.identity = identity or Identity()
        self.faults = faults or FaultInjector()
        self.watch = WorktreeWatch(enabled=watch_worktrees)

    def close(self) -> None:
        """Give up the worktree watches (the service is stopping)."""
        self.watch.close()

    # --- lookups (no lock needed: these fields never change) -------------------------------------

    def repository_of(self, run_id: str) -> str:
        """The repository id of a run (a workflow, or a loop session), or a ``not_found`` error."""
        return self._workflow(run_id).repository_id

    def pending_workflows(self) -> list[tuple[str, str]]:
        """(repository id, workflow id) of every workflow with an operation to finish."""
        return [(w.repository_id, w.id) for w in self.store.workflows() if w.pending is not None]

    def _workflow(self, run_id: str) -> WorkflowRecord:
        record = self.store.workflow(run_id)
        if record is None:
            raise fail(ErrorCode.NOT_FOUND, f"no branch for run {run_id} (workflow or loop session)", run_id=run_id)
        return record

    def _repository(self, repository_id: str) -> RepositoryRecord:
        record = self.store.repository(repository_id)
        if record is None:
            raise fail(
                ErrorCode.NOT_FOUND, f"repository {repository_id} is not registered", repository_id=repository_id
            )
        return record

    @contextmanager
    def _open(self, run_id: str, *, ready: bool = True, finish: bool = True) -> Iterator[Workspace]:
        record = self._workflow(run_id)
        if ready and record.state != "ready":
            raise fail(
                ErrorCode.CONFLICT,
                f"run {run_id} has no worktree ({record.state})",
                run_id=run_id,
                state=record.state,
            )
        ws = Workspace(repo=open_repository(record.repository_path), record=record, max_file_bytes=self.max_file_bytes)
        try:
            _break_stale_locks(ws)
            if finish:
                self._finish(ws)
            yield ws
        finally:
            ws.close()

    def _finish(self, ws: Workspace) -> str | None:
        return checkpoints.finish_pending(ws, store=self.store, identity=self.identity, faults=self.faults)

    def finish_pending(self, run_id: str) -> str | None:
        """Complete the workflow's interrupted checkpoint or recovery (crash recovery at start-up)."""
        with self._open(run_id, ready=False, finish=False) as ws:
            return self._finish(ws)

    # --- repositories ----------------------------------------------------------------------------

    def register_repository(self, cmd: RegisterRepository) -> RepositoryRegistered:
        if cmd.base_branch is not None:
            _check_branch_name(cmd.base_branch)
        real = os.path.realpath(cmd.path)
        repo = open_repository(real)
        try:
            base_branch = cmd.base_branch or _checked_out_branch(repo, real)
            base_commit = read_branch(repo, branch_ref(base_branch))
        finally:
            repo.close()
        if base_commit is None:
            raise fail(
                GitErrorCode.BASE_BRANCH_MISSING,
                f"{real} has no branch {base_branch}",
                path=real,
                base_branch=base_branch,
            )
        record = RepositoryRecord(
            id=repository_id_for(real), path=real, base_branch=base_branch, registered_at=time.time()
        )
        existing = self.store.repository(record.id)
        if existing is None or existing.base_branch != record.base_branch:
            self.store.save_repository(record)
        return RepositoryRegistered(
            repository_id=record.id, path=real, base_branch=base_branch, base_commit=base_commit.decode()
        )

    def list_worktrees(self, query: ListWorktrees) -> WorktreeList:
        record = self._repository(query.repository_id)
        repo = open_repository(record.path)
        try:
            found = linked_worktrees(repo)
        finally:
            repo.close()
        root = os.path.realpath(self.worktrees_root)
        items = [
            WorktreeView(
                run_id=os.path.basename(wt.path),
                path=wt.path,
                branch=wt.branch.removeprefix("refs/heads/") if wt.branch else None,
                head=wt.head,
                prunable=wt.prunable,
                locked=wt.locked,
            )
            for wt in found
            if os.path.dirname(os.path.realpath(wt.path)) == root
        ]
        return WorktreeList(repository_id=query.repository_id, items=items)

    def worktree_record(self, query: GetWorktreeRecord) -> WorktreeRecord:
        """Where git keeps the repository of ``query.path``, from this service's records alone.

        Nothing in the directory is read: its ``.git`` is the agent's to rewrite (docs/security.md).
        """
        real = os.path.realpath(query.path)
        for workflow in self.store.workflows():
            if workflow.state == "removed":
                continue
            if os.path.realpath(workflow.worktree_path) == real:
                return self._linked_record(real, workflow, workflow.worktree_id, None)
            for worker in self.swarms.load(workflow.id).workers.values():
                if worker.state != "closed" and os.path.realpath(worker.worktree_path) == real:
                    return self._linked_record(real, workflow, worker.worktree_id, worker.name)
        for repository in self.store.repositories():
            if os.path.realpath(repository.path) != real:
                continue
            dot_git = os.path.join(real, ".git")
            # A registered repository's own .git directory is what the sandbox keeps read-only; a .git file or
            # link there could be an agent's, so it is no record.
            if os.path.islink(dot_git) or not os.path.isdir(dot_git):
                raise fail(
                    ErrorCode.NOT_FOUND,
                    f"repository {real} has no .git directory of its own (a .git file or link is not trusted)",
                    path=real,
                )
            return WorktreeRecord(
                path=real, repository_id=repository.id, repository_path=real, git_dir=dot_git,
                common_dir=dot_git, linked=False,
            )
        raise fail(ErrorCode.NOT_FOUND, f"{real} is neither a worktree nor a repository Autarch knows", path=real)

    def _linked_record(
        self, real: str, workflow: WorkflowRecord, worktree_id: str, worker: str | None
    ) -> WorktreeRecord:
        repo = open_repository(workflow.repository_path)
        try:
            common = os.path.realpath(repo.commondir())
            admin = os.path.realpath(admin_dir(repo, worktree_id))
        finally:
            repo.close()
        return WorktreeRecord(
            path=real, repository_id=workflow.repository_id, repository_path=workflow.repository_path,
            git_dir=admin, common_dir=common, linked=True, run_id=workflow.id, worker=worker,
        )

    # --- workflow branches -----------------------------------------------------------------------

    def create_workflow_branch(self, cmd: CreateWorkflowBranch) -> WorkflowBranchView:
        repository = self._repository(cmd.repository_id)
        base_branch = cmd.base_branch or repository.base_branch
        record = self.store.workflow(cmd.run_id)
        if record is not None:
            if (record.repository_id, record.branch, record.base_branch) != (
                cmd.repository_id,
                cmd.branch,
                base_branch,
            ):
                raise fail(
                    ErrorCode.CONFLICT,
                    f"run {cmd.run_id} already has branch {record.branch} "
                    f"(off {record.base_branch}) in repository {record.repository_id}",
                    run_id=cmd.run_id,
                    branch=record.branch,
                )
            if record.state != "creating":
                return self.view(GetWorkflowBranch(run_id=cmd.run_id))
        _check_branch_name(cmd.branch)
        _check_branch_name(base_branch)
        repo = open_repository(repository.path)
        try:
            ref = branch_ref(cmd.branch)
            if record is None:
                start = _commit_in(repo, cmd.start_commit) if cmd.start_commit else None
                if start is None:
                    base_commit = read_branch(repo, branch_ref(base_branch))
                else:
                    base_commit = _commit_in(repo, cmd.base_commit) if cmd.base_commit else start
                if base_commit is None:
                    raise fail(
                        GitErrorCode.BASE_BRANCH_MISSING,
                        f"{repository.path} has no branch {base_branch}",
                        base_branch=base_branch,
                    )
                clash = clashing_ref(repo, ref)
                if clash is not None:
                    raise fail(
                        GitErrorCode.BRANCH_EXISTS,
                        f"cannot create branch {cmd.branch}: {clash.decode()} exists",
                        branch=cmd.branch,
                        existing=clash.decode(),
                    )
                worktree = self.worktrees_root / cmd.run_id
                record = WorkflowRecord(
                    id=cmd.run_id,
                    repository_id=cmd.repository_id,
                    repository_path=repository.path,
                    branch=cmd.branch,
                    base_branch=base_branch,
                    base_commit=base_commit.decode(),
                    worktree_path=str(worktree),
                    worktree_id=cmd.run_id,
                    start_commit=start.decode() if start is not None else None,
                    created_at=time.time(),
                )
                if admin_dir(repo, record.worktree_id).exists():
                    raise fail(
                        ErrorCode.CONFLICT,
                        f"{repository.path} already has a worktree named {record.worktree_id}",
                        run_id=cmd.run_id,
                    )
                self.store.save_workflow(record)
            self._make_branch_and_worktree(repo, record, ref)
        finally:
            repo.close()
        return self.view(GetWorkflowBranch(run_id=cmd.run_id))

    def _make_branch_and_worktree(self, repo: Repo, record: WorkflowRecord, ref: bytes) -> None:
        # The branch starts at the base, or for a fork where its original's branch was at the fork's event.
        base_commit = (record.start_commit or record.base_commit).encode()
        break_ref_lock(repo, ref)  # the record, saved before this step, makes the branch this workflow's
        current = read_branch(repo, ref)
        if current is None:
            created = create_branch(
                repo,
                ref,
                base_commit,
                committer=self.identity.committer,
                message=b"branch: Created from " + record.base_branch.encode(),
            )
            current = base_commit if created else read_branch(repo, ref)
        if current != base_commit:
            # Not the branch this workflow created (someone made it in between): leave it alone.
            self.store.delete_workflow(record.id)
            raise fail(
                GitErrorCode.BRANCH_EXISTS, f"branch {record.branch} already exists", branch=record.branch
            )
        self.faults.step_done("branch")
        worktree = Path(record.worktree_path)
        if worktree.exists():
            remove_tree(worktree)  # a checkout cut short: start it over
        admin = create_worktree_links(repo, worktree_id=record.worktree_id, path=worktree, branch_ref=ref)
        break_stale_locks(admin)
        (admin / "index").unlink(missing_ok=True)
        reset_worktree(worktree, admin / "index", repo.object_store, commit_tree_id(repo.object_store, base_commit))
        self.faults.step_done("worktree")
        record.state = "ready"
        record.worktree_commit = base_commit.decode()
        self.store.save_workflow(record)

    def view(self, query: GetWorkflowBranch) -> WorkflowBranchView:
        record = self._workflow(query.run_id)
        try:
            repo = open_repository(record.repository_path)
            head = read_branch(repo, branch_ref(record.branch))
            repo.close()
        except Exception:
            head = None
        return WorkflowBranchView(
            run_id=record.id,
            repository_id=record.repository_id,
            repository_path=record.repository_path,
            branch=record.branch,
            base_branch=record.base_branch,
            base_commit=record.base_commit,
            head=head.decode() if head else None,
            worktree_path=record.worktree_path,
            worktree_removed=record.state == "removed",
            active_pulse=record.active_pulse,
            pulses=[
                PulseView(
                    pulse_id=p.id,
                    branch=p.branch,
                    base_commit=p.base_commit,
                    state=p.state,
                    commit=p.commit,
                    is_recovery_checkpoint=p.recovery,
                )
                for p in self.store.all_pulses(record).values()
            ],
        )

    # --- the worktree's state ------------------------------------------------------------------

    def _changes(self, ws: Workspace, state: tuple[Snapshot, TreeSet], commit: str) -> list[FileChange]:
        changes = []
        kind: Literal["modified", "deleted", "added", "type_changed"]
        for path, ours, theirs in diff_trees(ws.objects, state[1], commit_tree_id(ws.objects, commit.encode())):
            if ours is None:
                kind = "deleted"
            elif theirs is None:
                kind = "added"
            elif (ours[0] == MODE_SYMLINK) != (theirs[0] == MODE_SYMLINK):
                kind = "type_changed"
            else:
                kind = "modified"
            changes.append(FileChange(path=path.decode("utf-8", "replace"), change=kind))
        return changes

    def modified_tracked_files(self, query: ModifiedTrackedFiles) -> TrackedChanges:
        with self._open(query.run_id) as ws:
            state = tracked_state(ws.worktree, ws.index_path, filemode=ws.filemode,
                                          max_file_bytes=ws.max_file_bytes)
            assert ws.record.worktree_commit is not None
            files = self._changes(ws, state, ws.record.worktree_commit)
        return TrackedChanges(run_id=query.run_id, clean=not files, files=files)

    def _tracked_since_checkpoint(self, ws: Workspace) -> tuple[Snapshot, TreeSet]:
        """The worktree's tracked state: the index's own when the watch proves nothing touched the worktree
        since the checkpoint that wrote it (:mod:`.watch`), else from a scan."""
        index = read_index(ws.index_path)
        if not index.conflicted and self.watch.unchanged(ws.worktree, index.checksum):
            snapshot = Snapshot(entries=dict(index.entries), index=index)
            trees = index_trees(ws.index_path, snapshot)
            if trees is not None:
                return snapshot, trees
        return tracked_state(ws.worktree, ws.index_path, filemode=ws.filemode, max_file_bytes=ws.max_file_bytes,
                             index=index)

    def _require_clean(self, ws: Workspace, state: tuple[Snapshot, TreeSet], head: bytes) -> None:
        """Clean: the tracked files match the last checkout, or the workflow head (a reset cut short)."""
        assert ws.record.worktree_commit is not None
        files = self._changes(ws, state, ws.record.worktree_commit)
        if files and head.decode() != ws.record.worktree_commit and not self._changes(ws, state, head.decode()):
            files = []
        if files:
            raise fail(
                GitErrorCode.DIRTY_WORKTREE,
                f"the worktree of workflow {ws.record.id} has {len(files)} modified tracked file(s): "
                + ", ".join(f.path for f in files[:10]),
                files=[f.path for f in files[:100]],
            )

    # --- pulses ----------------------------------------------------------------------------------

    def start_pulse(self, cmd: StartPulse) -> PulseStarted:
        with self._open(cmd.run_id) as ws:
            record = ws.record
            pulse = record.pulses.get(cmd.pulse_id) or self.store.ended_pulse(record.id, cmd.pulse_id)
            if pulse is not None:
                if pulse.state != "running" or record.active_pulse != pulse.id:
                    raise fail(
                        GitErrorCode.PULSE_IN_PROGRESS,
                        f"pulse {pulse.id} already ended ({pulse.state}); start a new pulse id",
                        pulse_id=pulse.id,
                        state=pulse.state,
                    )
                self._enter_pulse(ws, pulse)  # a retried start: make sure both steps happened
                return self._started(ws, pulse)
            if record.active_pulse is not None:
                raise fail(
                    GitErrorCode.PULSE_IN_PROGRESS,
                    f"pulse {record.active_pulse} is still running in workflow {record.id}",
                    active_pulse=record.active_pulse,
                )
            head = ws.workflow_head()
            name = pulse_branch_name(record.branch, cmd.pulse_id)
            _check_branch_name(name)
            clash = clashing_ref(ws.repo, branch_ref(name))
            if clash is not None:
                raise fail(
                    GitErrorCode.BRANCH_EXISTS,
                    f"cannot create pulse branch {name}: {clash.decode()} exists",
                    branch=name,
                    existing=clash.decode(),
                )
            state = self._tracked_since_checkpoint(ws)
            self._require_clean(ws, state, head)
            head_tree = commit_tree_id(ws.objects, head)
            if state[1].root != head_tree:
                # The workflow branch is ahead of the worktree: reset before the pulse starts.
                reset_worktree(ws.worktree, ws.index_path, ws.objects, head_tree, current=state, filemode=ws.filemode)
            pulse = PulseRecord(id=cmd.pulse_id, branch=name, base_commit=head.decode())
            record.pulses[pulse.id] = pulse
            record.active_pulse = pulse.id
            record.worktree_commit = pulse.base_commit
            self.store.save_workflow(record)
            self._enter_pulse(ws, pulse)
            return self._started(ws, pulse)

    def _enter_pulse(self, ws: Workspace, pulse: PulseRecord) -> None:
        ref = branch_ref(pulse.branch)
        if read_branch(ws.repo, ref) is None:
            create_branch(
                ws.repo,
                ref,
                pulse.base_commit.encode(),
                committer=self.identity.committer,
                message=b"branch: Created from " + ws.record.branch.encode(),
            )
        set_head(ws.admin, ref)

    def _started(self, ws: Workspace, pulse: PulseRecord) -> PulseStarted:
        return PulseStarted(
            run_id=ws.record.id,
            pulse_id=pulse.id,
            pulse_branch=pulse.branch,
            base_commit=pulse.base_commit,
            worktree_path=ws.record.worktree_path,
        )

    def checkpoint_pulse(self, cmd: CheckpointPulse) -> PulseCheckpointed:
        with self._open(cmd.run_id) as ws:
            return checkpoints.checkpoint_pulse(ws, cmd, store=self.store, identity=self.identity, faults=self.faults,
                                                watch=self.watch)

    def recovery_checkpoint(self, cmd: RecoveryCheckpoint) -> RecoveryCheckpointed:
        with self._open(cmd.run_id) as ws:
            return checkpoints.recovery_checkpoint(
                ws, cmd, store=self.store, identity=self.identity, faults=self.faults
            )

    # --- ending a workflow -------------------------------------------------------------------------

    def remove_worktree(self, cmd: RemoveWorktree) -> WorktreeRemoved:
        with self._open(cmd.run_id, ready=False) as ws:
            record = ws.record
            removed = False
            if record.state != "removed":
                if not cmd.force:
                    if record.active_pulse is not None:
                        raise fail(
                            GitErrorCode.PULSE_IN_PROGRESS,
                            f"pulse {record.active_pulse} is running; end it first or remove with force",
                            active_pulse=record.active_pulse,
                        )
                    if ws.worktree.exists() and record.worktree_commit:
                        state = tracked_state(ws.worktree, ws.index_path, filemode=ws.filemode,
                                          max_file_bytes=ws.max_file_bytes)
                        self._require_clean(ws, state, ws.workflow_head())
                if record.active_pulse is not None:
                    record.pulses[record.active_pulse].state = "discarded"
                    record.active_pulse = None
                self.watch.forget(ws.worktree)
                removed = remove_worktree(ws.repo, worktree_id=record.worktree_id, path=ws.worktree)
                record.state = "removed"
                self.store.save_workflow(record)
            # A worker's worktree and branch only serve the workflow's swarm: they end with it.
            deleted = workers.remove_all_workers(ws, swarms=self.swarms)
            if cmd.delete_branches:
                for pulse in self.store.all_pulses(record).values():
                    break_ref_lock(ws.repo, branch_ref(pulse.branch))  # a kill in an earlier try of this loop
                    if delete_branch(ws.repo, branch_ref(pulse.branch)):
                        deleted.append(pulse.branch)
                if delete_branch(ws.repo, ws.workflow_ref):
                    deleted.append(record.branch)
            return WorktreeRemoved(
                run_id=record.id, path=record.worktree_path, removed=removed, deleted_branches=deleted
            )

    # --- swarm workers (contracts.bead_git) --------------------------------------------------------

    def open_worker(self, cmd: OpenWorker) -> WorkerWorktree:
        with self._open(cmd.workflow_id) as ws:
            return workers.open_worker(
                ws, cmd, swarms=self.swarms, identity=self.identity, worktrees_root=self.worktrees_root
            )

    def begin_bead(self, cmd: BeginBead) -> BeadBegun:
        with self._open(cmd.workflow_id) as ws:
            return workers.begin_bead(ws, cmd, swarms=self.swarms, identity=self.identity)

    def commit_bead(self, cmd: CommitBead) -> BeadCommitted:
        with self._open(cmd.workflow_id) as ws:
            return workers.commit_bead(ws, cmd, swarms=self.swarms, identity=self.identity)

    def write_worker_files(self, cmd: WriteWorkerFiles) -> WorkerFilesWritten:
        with self._open(cmd.workflow_id) as ws:
            return workers.write_worker_files(ws, cmd, swarms=self.swarms)

    def merge_bead(self, cmd: MergeBead) -> BeadMerged:
        # Not ready=True: a repeat after the workflow's worktree was removed still answers the outcome.
        with self._open(cmd.workflow_id, ready=False) as ws:
            return merges.merge_bead(ws, cmd, swarms=self.swarms, store=self.store, identity=self.identity)

    def sync_workflow_worktree(self, cmd: SyncWorkflowWorktree) -> WorkflowWorktreeSynced:
        with self._open(cmd.workflow_id) as ws:
            return merges.sync_workflow_worktree(ws, cmd, store=self.store)

    def close_worker(self, cmd: CloseWorker) -> WorkerClosed:
        with self._open(cmd.workflow_id, ready=False) as ws:
            return workers.close_worker(ws, cmd, swarms=self.swarms)

    # --- helpers for diffs -----------------------------------------------------------------------

    @contextmanager
    def open_workspace(self, run_id: str) -> Iterator[Workspace]:
        """A workflow's workspace whether or not its worktree still exists (diffs need only refs)."""
        with self._open(run_id, ready=False) as ws:
            yield ws


def _break_stale_locks(ws: Workspace) -> None:
    """Remove the lock files a process killed mid-write left on this workflow's refs, HEAD and index.

    Every write of them happens under the repository's ``flock``, which the caller holds (the service runs
    each operation under it; the kernel released a killed holder's): a lock file found now is a dead
    writer's, and left alone it would refuse every later write of that ref (dulwich's ``FileLocked``).

    Only the refs an operation may still write are looked at: the workflow branch, and the branch of the pulse
    that is running or has a journaled step to finish. An ended pulse's branch is written only after its state
    says it ended when ``remove_worktree`` deletes it, which breaks its lock itself; a pulse's branch written when
    a kill struck belonged to a pulse still running or pending then, whose lock was broken by the next operation.
    Looking at every pulse's branch made each operation of a loop session cost more with every iteration before it.
    """
    break_stale_locks(ws.admin)
    live = {ws.record.active_pulse, ws.record.pending.pulse_id if ws.record.pending is not None else None}
    for ref in (ws.workflow_ref, *(ws.pulse_ref(pulse_id) for pulse_id in live if pulse_id is not None)):
        break_ref_lock(ws.repo, ref)
