"""Swarm workers: one linked worktree and branch per worker, one commit per bead attempt.

A worker's branch is ``<workflow branch>.w-<worker>`` (a sibling of the workflow branch, as pulse
branches are) and its worktree ``<data dir>/worktrees/<workflow id>.workers/<worker>``: beside the
workflow's, but not one of the directories ``list_worktrees`` reports as workflows. Every verb
runs under the repository's lock and journals in the workflow's swarm record (``swarm_records``)
before it moves a branch, so a repeat answers the first outcome or finishes what was cut short.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import msgspec

from autarch.contracts.bead_git import (
    BeadBegun,
    BeadCommitted,
    BeginBead,
    CloseWorker,
    CommitBead,
    OpenWorker,
    WorkerClosed,
    WorkerFilesWritten,
    WorkerWorktree,
    WriteWorkerFiles,
)
from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import GitErrorCode
from autarch.runtime.worktree_files import UnsafeWorktreePath, remove_tree, replace_file

from .checkout import commit_tree_id, reset_worktree, snapshot_trees
from .checkpoints import Current, snapshot_all, store_commit, store_snapshot
from .commits import Identity, checkpoint_message, make_commit
from .index_file import read_index
from .refs import (
    BranchNameError,
    RefConflict,
    branch_ref,
    break_ref_lock,
    clashing_ref,
    create_branch,
    delete_branch,
    move_branch,
    read_branch,
    validate_branch_name,
)
from .snapshots import scan_worktree, untrackable
from .swarm_records import AttemptRecord, SwarmRecord, SwarmStore, WorkerRecord, attempt_key
from .workspace import Workspace, fail
from .worktrees import admin_dir, break_stale_locks, create_worktree_links, remove_worktree, set_head

__all__ = [
    "WORKER_SEPARATOR",
    "begin_bead",
    "check_identifier",
    "close_worker",
    "commit_bead",
    "find_attempt",
    "open_worker",
    "remove_all_workers",
    "worker_branch_name",
    "worker_workspace",
]

WORKER_SEPARATOR = ".w-"
_IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def check_identifier(kind: str, value: str) -> None:
    """Refuse a name the contract's pattern refuses (the engine may be called without decoding)."""
    if not _IDENTIFIER.match(value):
        raise fail(
            ErrorCode.BAD_REQUEST, f"invalid {kind} {value!r}: expected [A-Za-z0-9][A-Za-z0-9._-]*", **{kind: value}
        )


def worker_branch_name(workflow_branch: str, worker: str) -> str:
    """The branch a worker's bead attempts are committed on."""
    return f"{workflow_branch}{WORKER_SEPARATOR}{worker}"


def worker_workspace(ws: Workspace, worker: WorkerRecord) -> Workspace:
    """The worker's worktree as a :class:`Workspace` sharing ``ws``'s open repository (do not close it)."""
    record = msgspec.structs.replace(ws.record, worktree_path=worker.worktree_path, worktree_id=worker.worktree_id)
    return Workspace(repo=ws.repo, record=record, max_file_bytes=ws.max_file_bytes)


def _open_worker(ws: Workspace, swarm: SwarmRecord, name: str) -> WorkerRecord:
    check_identifier("worker", name)
    worker = swarm.workers.get(name)
    if worker is None or worker.state != "open":
        raise fail(
            ErrorCode.NOT_FOUND,
            f"workflow {ws.record.id} has no open worker {name}",
            workflow_id=ws.record.id,
            worker=name,
        )
    # A lock file found under the repository lock is a killed writer's (see engine._break_stale_locks).
    break_stale_locks(admin_dir(ws.repo, worker.worktree_id))
    break_ref_lock(ws.repo, branch_ref(worker.branch))
    return worker


def find_attempt(ws: Workspace, swarm: SwarmRecord, *, swarms: SwarmStore, worker: str, bead_id: str,
                 attempt: int) -> AttemptRecord:
    """The recorded attempt (ended ones from the attempt log), or ``not_found``; ``conflict`` when another worker
    owns it."""
    check_identifier("bead_id", bead_id)
    record = swarms.attempt(swarm, attempt_key(bead_id, attempt))
    if record is None:
        raise fail(
            ErrorCode.NOT_FOUND,
            f"bead {bead_id} attempt {attempt} was not begun in workflow {ws.record.id}",
            workflow_id=ws.record.id,
            bead_id=bead_id,
            attempt=attempt,
        )
    if record.worker != worker:
        raise fail(
            ErrorCode.CONFLICT,
            f"bead {bead_id} attempt {attempt} belongs to worker {record.worker}, not {worker}",
            bead_id=bead_id,
            attempt=attempt,
            worker=record.worker,
        )
    return record


# --- workers ---------------------------------------------------------------------------------------


def open_worker(
    ws: Workspace, cmd: OpenWorker, *, swarms: SwarmStore, identity: Identity, worktrees_root: Path
) -> WorkerWorktree:
    """Create the worker's branch at the workflow branch tip and its worktree; an open worker is kept."""
    check_identifier("worker", cmd.worker)
    swarm = swarms.load(ws.record.id)
    worker = swarm.workers.get(cmd.worker)
    if (
        worker is not None
        and worker.state == "open"
        and Path(worker.worktree_path).exists()
        and admin_dir(ws.repo, worker.worktree_id).exists()
    ):
        return _worktree_view(ws, worker)
    if worker is None:
        branch = worker_branch_name(ws.record.branch, cmd.worker)
        try:
            validate_branch_name(branch)
        except BranchNameError as exc:
            raise fail(GitErrorCode.INVALID_BRANCH_NAME, f"illegal worker branch name: {exc}", branch=branch) from None
        worker = WorkerRecord(
            state="new",
            name=cmd.worker,
            branch=branch,
            worktree_path=str(worktrees_root / f"{ws.record.id}.workers" / cmd.worker),
            worktree_id=f"{ws.record.worktree_id}{WORKER_SEPARATOR}{cmd.worker}",
        )
        if admin_dir(ws.repo, worker.worktree_id).exists():
            raise fail(
                ErrorCode.CONFLICT,
                f"{ws.record.repository_path} already has a worktree named {worker.worktree_id}",
                workflow_id=ws.record.id,
            )
    # An opening worker (cut short) or an open one whose worktree went missing owns its branch: keep it.
    if worker.state in ("new", "closed"):
        clash = clashing_ref(ws.repo, branch_ref(worker.branch))
        if clash is not None:
            raise fail(
                GitErrorCode.BRANCH_EXISTS,
                f"cannot create worker branch {worker.branch}: {clash.decode()} exists",
                branch=worker.branch,
                existing=clash.decode(),
            )
    worker.state = "opening"
    worker.current = None
    swarm.workers[worker.name] = worker
    swarms.save(swarm)
    ref = branch_ref(worker.branch)
    if read_branch(ws.repo, ref) is None:
        create_branch(
            ws.repo,
            ref,
            ws.workflow_head(),
            committer=identity.committer,
            message=b"branch: Created from " + ws.record.branch.encode(),
        )
    head = read_branch(ws.repo, ref)
    assert head is not None
    path = Path(worker.worktree_path)
    if path.exists():
        remove_tree(path)  # a checkout cut short: start it over
    admin = create_worktree_links(ws.repo, worktree_id=worker.worktree_id, path=path, branch_ref=ref)
    break_stale_locks(admin)
    (admin / "index").unlink(missing_ok=True)
    reset_worktree(path, admin / "index", ws.objects, commit_tree_id(ws.objects, head))
    worker.state = "open"
    swarms.save(swarm)
    return _worktree_view(ws, worker)


def _worktree_view(ws: Workspace, worker: WorkerRecord) -> WorkerWorktree:
    return WorkerWorktree(
        workflow_id=ws.record.id, worker=worker.name, branch=worker.branch, worktree_path=worker.worktree_path
    )


def close_worker(ws: Workspace, cmd: CloseWorker, *, swarms: SwarmStore) -> WorkerClosed:
    """Remove the worker's worktree and branch; closing a closed worker changes nothing."""
    check_identifier("worker", cmd.worker)
    swarm = swarms.load(ws.record.id)
    worker = swarm.workers.get(cmd.worker)
    if worker is None:
        raise fail(
            ErrorCode.NOT_FOUND,
            f"workflow {ws.record.id} has no worker {cmd.worker}",
            workflow_id=ws.record.id,
            worker=cmd.worker,
        )
    removed = worker.state != "closed" and _remove_worker(ws, worker)
    if worker.state != "closed":
        worker.state = "closed"
        worker.current = None
        swarms.save(swarm)
    return WorkerClosed(workflow_id=ws.record.id, worker=worker.name, removed=removed)


def _remove_worker(ws: Workspace, worker: WorkerRecord) -> bool:
    removed = remove_worktree(ws.repo, worktree_id=worker.worktree_id, path=Path(worker.worktree_path))
    delete_branch(ws.repo, branch_ref(worker.branch))
    parent = Path(worker.worktree_path).parent
    with suppress(OSError):
        parent.rmdir()  # the workflow's .workers directory, once its last worker is gone
    return removed


def remove_all_workers(ws: Workspace, *, swarms: SwarmStore) -> list[str]:
    """Close every worker of the workflow (its worktree ends); return the branches deleted."""
    swarm = swarms.load(ws.record.id)
    deleted = []
    for worker in swarm.workers.values():
        if worker.state == "closed":
            continue
        had_branch = read_branch(ws.repo, branch_ref(worker.branch)) is not None
        _remove_worker(ws, worker)
        if had_branch:
            deleted.append(worker.branch)
        worker.state = "closed"
        worker.current = None
        swarms.save(swarm)
    return deleted


# --- bead attempts ---------------------------------------------------------------------------------


def begin_bead(ws: Workspace, cmd: BeginBead, *, swarms: SwarmStore, identity: Identity) -> BeadBegun:
    """Reset the worker's branch and worktree to the workflow branch tip for a new attempt."""
    swarm = swarms.load(ws.record.id)
    worker = _open_worker(ws, swarm, cmd.worker)
    check_identifier("bead_id", cmd.bead_id)
    key = attempt_key(cmd.bead_id, cmd.attempt)
    attempt = swarms.attempt(swarm, key)
    if attempt is None:
        attempt = AttemptRecord(
            bead_id=cmd.bead_id, attempt=cmd.attempt, worker=worker.name, base_commit=ws.workflow_head().decode()
        )
        swarm.attempts[key] = attempt
    else:
        attempt = find_attempt(ws, swarm, swarms=swarms, worker=worker.name, bead_id=cmd.bead_id,
                               attempt=cmd.attempt)
        if attempt.ready:
            return _begun(ws, worker, attempt)  # a repeat: the worktree may hold work by now, keep it
    worker.current = key
    swarms.save(swarm)  # the base is journaled before the branch moves
    # .pulse/ is left as it is: the coordination files there (a standalone run's STATE.md, the handoffs) outlive a
    # bead, and a worker's next bead is where they are read.
    _reset_worker(_without_coordination(worker_workspace(ws, worker)), worker, attempt.base_commit.encode(), identity)
    attempt.ready = True
    swarms.save(swarm)
    return _begun(ws, worker, attempt)


def _reset_worker(wws: Workspace, worker: WorkerRecord, base: bytes, identity: Identity) -> None:
    """``git switch -C <worker branch> <base> && git reset --hard && git clean -fd`` (ignored files stay)."""
    ref = branch_ref(worker.branch)
    move_branch(
        wws.repo,
        ref,
        old=read_branch(wws.repo, ref),
        new=base,
        committer=identity.committer,
        message=b"reset: moving to " + base,
    )
    set_head(wws.admin, ref)
    # Untracked files count as tracked here, so the reset removes them (leftovers of an earlier attempt).
    snapshot = scan_worktree(
        wws.worktree,
        read_index(wws.index_path),
        include_untracked=True,
        is_ignored=wws.ignore_check(),
        filemode=wws.filemode,
        max_file_bytes=wws.max_file_bytes,
    )
    reset_worktree(
        wws.worktree,
        wws.index_path,
        wws.objects,
        commit_tree_id(wws.objects, base),
        current=(snapshot, snapshot_trees(wws.index_path, snapshot)),
        filemode=wws.filemode,
    )


def _begun(ws: Workspace, worker: WorkerRecord, attempt: AttemptRecord) -> BeadBegun:
    return BeadBegun(
        workflow_id=ws.record.id,
        worker=worker.name,
        bead_id=attempt.bead_id,
        attempt=attempt.attempt,
        base_commit=attempt.base_commit,
        worktree_path=worker.worktree_path,
    )


def commit_bead(ws: Workspace, cmd: CommitBead, *, swarms: SwarmStore, identity: Identity) -> BeadCommitted:
    """Commit the worker's worktree as ``feat(<bead_id>): <summary>`` on the worker branch (nothing: no commit)."""
    swarm = swarms.load(ws.record.id)
    worker = _open_worker(ws, swarm, cmd.worker)
    attempt = find_attempt(ws, swarm, swarms=swarms, worker=worker.name, bead_id=cmd.bead_id, attempt=cmd.attempt)
    key = attempt_key(cmd.bead_id, cmd.attempt)
    wws = worker_workspace(ws, worker)
    if attempt.committed:
        if worker.current == key:
            _finish_commit(wws, worker, attempt, identity, current=None)
        return _committed(ws, attempt)
    if not attempt.ready or worker.current != key:
        raise fail(
            ErrorCode.CONFLICT,
            f"worker {worker.name}'s worktree holds attempt {worker.current or 'none'}, not {key}: begin it again",
            worker=worker.name,
            current=worker.current,
        )
    base = attempt.base_commit.encode()
    root = worker.worktree_path
    for rel, content in cmd.files.items():
        if any(untrackable(part.encode()) for part in rel.split("/")):
            raise fail(ErrorCode.BAD_REQUEST, f"{rel} is not a path inside the worktree", path=rel)
        _write_file(root, rel, content, replace_parents=False)
    current = snapshot_all(_without_coordination(wws))
    tree, paths = store_snapshot(wws, current, base)
    if paths:
        # A summary is the subject line: newlines in it would make the rest the body.
        subject = f"feat({cmd.bead_id}): {' '.join(cmd.summary.split())}"
        message = checkpoint_message(summary=subject, body=cmd.body)
        commit = make_commit(tree=tree, parents=[base], message=message, identity=identity)
        store_commit(wws, commit)
        attempt.commit = commit.id.decode()
        attempt.message = message.decode("utf-8")
    attempt.files_changed = paths
    attempt.committed = True
    swarms.save(swarm)  # journaled: a repeat answers this commit
    _finish_commit(wws, worker, attempt, identity, current=current)
    return _committed(ws, attempt)


def _without_coordination(ws: Workspace) -> Workspace:
    """``ws`` whose snapshot also leaves out ``.pulse/``: the swarm's coordination files (handoffs) live in the
    worker's worktree for its session to read, and never in the bead's commit."""
    base_type = type(ws)

    # Ignored below: subclassing the runtime type of ws, which mypy cannot take as a base
    class _Worktree(base_type):  # type: ignore[misc, valid-type]
        def ignore_check(self) -> Callable[[str], bool]:
            rules = super().ignore_check()
            return lambda path: path.split("/", 1)[0] == ".pulse" or rules(path)

    return _Worktree(repo=ws.repo, record=ws.record, max_file_bytes=ws.max_file_bytes)


def write_worker_files(ws: Workspace, cmd: WriteWorkerFiles, *, swarms: SwarmStore) -> WorkerFilesWritten:
    """Write ``cmd.files`` (all under ``.pulse/``) into the worker's worktree; a repeat writes the same bytes."""
    worker = _open_worker(ws, swarms.load(ws.record.id), cmd.worker)
    for rel in cmd.files:
        if not rel.startswith(".pulse/"):
            raise fail(ErrorCode.BAD_REQUEST, f"{rel} is not under .pulse/ in the worktree", path=rel)
    for rel, content in cmd.files.items():
        # .pulse is the service's own: a link or file an agent put in its place is replaced, never followed.
        _write_file(worker.worktree_path, rel, content, replace_parents=True)
    return WorkerFilesWritten(workflow_id=ws.record.id, worker=worker.name, paths=sorted(cmd.files))


def _write_file(root: str, rel: str, content: str, *, replace_parents: bool) -> None:
    """Write one file the caller sent into a worker's worktree, whatever the agent left at its name.

    The name is replaced, never written through (a link out of the worktree, a FIFO that would block the write);
    a link or file where one of its directories belongs is refused, or replaced with ``replace_parents``.
    """
    try:
        replace_file(root, rel, content.encode("utf-8"), replace_parents=replace_parents)
    except (UnsafeWorktreePath, IsADirectoryError, NotADirectoryError) as exc:
        raise fail(ErrorCode.BAD_REQUEST, f"{rel} cannot be written in the worktree: {exc}", path=rel) from None


def _finish_commit(
    wws: Workspace, worker: WorkerRecord, attempt: AttemptRecord, identity: Identity, *, current: Current | None
) -> None:
    """Move the worker branch to the commit and make the index match it (the worktree is then clean)."""
    if attempt.commit is None:
        return
    commit = attempt.commit.encode()
    with suppress(RefConflict):  # moved by a later begin_bead: nothing left to do here
        move_branch(
            wws.repo,
            branch_ref(worker.branch),
            old=attempt.base_commit.encode(),
            new=commit,
            committer=identity.committer,
            message=b"commit: " + attempt.message.split("\n", 1)[0].encode("utf-8"),
        )
    reset_worktree(
        wws.worktree, wws.index_path, wws.objects, commit_tree_id(wws.objects, commit), current=current,
        filemode=wws.filemode,
    )  # fmt: skip


def _committed(ws: Workspace, attempt: AttemptRecord) -> BeadCommitted:
    return BeadCommitted(
        workflow_id=ws.record.id,
        bead_id=attempt.bead_id,
        attempt=attempt.attempt,
        commit=attempt.commit,
        base_commit=attempt.base_commit,
        files_changed=list(attempt.files_changed),
        message=attempt.message,
    )
