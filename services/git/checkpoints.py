"""Ending a pulse: the checkpoint (commit → fast-forward → reset) and the recovery checkpoint.

A checkpoint runs these steps, each idempotent:

1. ``commit``: snapshot the worktree like ``git add -A``, store blobs, trees and the commit
   (parent: the pulse's base), then journal it as the workflow's pending operation;
2. ``pulse_branch``: move the pulse branch to the commit;
3. ``fast_forward``: move the workflow branch from the pulse base to the commit;
4. ``head``: point the worktree's HEAD back at the workflow branch;
5. ``delete_branch``: delete the pulse branch;
6. ``reset``: bring the worktree's index (and files, if needed) to the workflow head.

Until step 1 has journaled the commit, nothing visible changed and a retry starts over. From
then on, :func:`finish_pending` derives what is left from the refs (every move is a
compare-and-swap from the value it must replace) and completes it; a restarted service does so
before it serves any request. A recovery checkpoint keeps its commit on the pulse branch and
skips steps 3 and 5 (or, with nothing to keep, makes no commit and deletes the pulse branch).
"""

from __future__ import annotations

from dulwich.graph import can_fast_forward
from dulwich.objects import Commit

from autarch.contracts.git import (
    CheckpointPulse,
    GitErrorCode,
    PulseCheckpointed,
    RecoveryCheckpoint,
    RecoveryCheckpointed,
)

from .checkout import commit_tree_id, index_trees, reset_worktree, snapshot_trees
from .commits import Identity, checkpoint_message, make_commit, recovery_message
from .dulwich_ids import oid
from .faults import FaultInjector
from .index_file import IndexContents, IndexEntry, read_index
from .loose import LooseObjectWriter
from .refs import delete_branch, move_branch, pulse_branch_name, read_branch
from .snapshots import Snapshot, leaves, scan_worktree
from .store import GitStore, PendingOperation, PulseRecord
from .trees import TreeSet, build_trees, diff_trees, write_trees
from .watch import Mark, WorktreeWatch
from .workspace import Workspace, fail
from .worktrees import set_head

__all__ = [
    "checkpoint_pulse",
    "finish_pending",
    "recovery_checkpoint",
    "snapshot_all",
    "store_commit",
    "store_snapshot",
]

Current = tuple[Snapshot, TreeSet]


def _is_ancestor(ws: Workspace, ancestor: bytes, descendant: bytes) -> bool:
    return ancestor == descendant or can_fast_forward(ws.repo, oid(ancestor), oid(descendant))


def snapshot_all(ws: Workspace, *, index: IndexContents | None = None, watch: WorktreeWatch | None = None,
                 mark: Mark | None = None) -> Current:
    """The worktree as ``git add -A`` would stage it (ignored files out), with the changed blobs kept.

    With ``watch`` and its ``mark``, every directory is watched before it is listed, and only those the mark does
    not prove quiet are listed."""
    snapshot = scan_worktree(
        ws.worktree,
        index or read_index(ws.index_path),
        include_untracked=True,
        is_ignored=ws.ignore_check(),
        keep_blobs=True,
        filemode=ws.filemode,
        max_file_bytes=ws.max_file_bytes,
        since=mark.since if mark is not None else None,
        enter=(lambda directory, inode: watch.enter(mark, directory, inode)) if watch and mark else None,
    )
    return snapshot, snapshot_trees(ws.index_path, snapshot)


def store_snapshot(ws: Workspace, current: Current, base: bytes) -> tuple[bytes, list[str]]:
    """Store the snapshot's new blobs and trees; return its root tree id and the paths changed since ``base``."""
    snapshot, trees = current
    differing: set[bytes] = set()
    paths = sorted(
        # Valid UTF-8 whatever the name's bytes: the paths are recorded and sent as JSON (no lone surrogates).
        path.decode(errors="backslashreplace")
        for path, _, _ in diff_trees(
            ws.objects,
            trees,
            commit_tree_id(ws.objects, base),
            differing=differing,
            known=index_trees(ws.index_path, snapshot),
        )
    )
    if paths:
        writer = LooseObjectWriter(ws.objects.path)  # type: ignore[attr-defined]  # a DiskObjectStore
        for sha, data in snapshot.blobs.items():
            writer.add(b"blob", data, sha)
        write_trees(writer, trees, differing)
    return trees.root, paths


def store_commit(ws: Workspace, commit: Commit) -> None:
    """Write ``commit`` as a loose object."""
    LooseObjectWriter(ws.objects.path).add(  # type: ignore[attr-defined]  # a DiskObjectStore
        b"commit", commit.as_raw_string(), bytes.fromhex(commit.id.decode()))


def checkpoint_pulse(
    ws: Workspace, cmd: CheckpointPulse, *, store: GitStore, identity: Identity, faults: FaultInjector,
    watch: WorktreeWatch | None = None,
) -> PulseCheckpointed:
    """Commit the worktree as the pulse's checkpoint and fast-forward the workflow branch to it.

    With ``watch``, a checkpoint that nothing disturbed proves the worktree quiet for the next clean check
    (:mod:`.watch`)."""
    record = ws.record
    done = record.pulses.get(cmd.pulse_id) or store.ended_pulse(record.id, cmd.pulse_id)  # a retry's
    if done is not None and done.state == "succeeded":
        return _checkpointed(ws, done)  # a retry of a checkpoint that completed
    if done is not None and done.state == "discarded" and cmd.skip_if_unchanged:
        return _unchanged(ws, done)  # a retry of a checkpoint that had nothing to commit
    pulse = ws.running_pulse(cmd.pulse_id)
    base = pulse.base_commit.encode()
    head = ws.workflow_head()
    if not _is_ancestor(ws, head, base):
        raise fail(
            GitErrorCode.NOT_FAST_FORWARD,
            f"the workflow branch {record.branch} moved to {head.decode()[:10]} since pulse {pulse.id} "
            f"started from {pulse.base_commit[:10]}: the checkpoint cannot fast-forward it",
            workflow_head=head.decode(),
            pulse_base=pulse.base_commit,
        )
    index = read_index(ws.index_path)
    rules = ws.ignore_rules_stamp() if watch is not None else None
    mark = watch.mark(ws.worktree, index.checksum, rules) if watch is not None else None
    current = snapshot_all(ws, index=index, watch=watch, mark=mark)
    tree, paths = store_snapshot(ws, current, base)
    if not paths and cmd.skip_if_unchanged:
        # Nothing to keep: discard the pulse as a recovery with no commit does (same journaled steps).
        record.pending = PendingOperation(kind="recovery", pulse_id=pulse.id, commit=None,
                                          pulse_head=_decode(read_branch(ws.repo, ws.pulse_ref(pulse.id))),
                                          files_changed=0)
        store.save_workflow(record)
        faults.step_done("commit")
        checksum = _finish_recovery(ws, store=store, identity=identity, faults=faults, current=current)
        _settle(watch, mark, current[0], checksum, rules)
        return _unchanged(ws, record.pulses[pulse.id])
    commit = make_commit(
        tree=tree,
        parents=[base],
        message=checkpoint_message(summary=cmd.summary, body=cmd.body, co_author=cmd.co_author),
        identity=identity,
    )
    store_commit(ws, commit)
    record.pending = PendingOperation(
        kind="checkpoint",
        pulse_id=pulse.id,
        commit=commit.id.decode(),
        pulse_head=_decode(read_branch(ws.repo, ws.pulse_ref(pulse.id))),
        files_changed=len(paths),
        paths=paths,
    )
    store.save_workflow(record)
    faults.step_done("commit")
    checksum = _finish_checkpoint(ws, store=store, identity=identity, faults=faults, current=current)
    _settle(watch, mark, current[0], checksum, rules)
    return _checkpointed(ws, record.pulses[pulse.id])


def _settle(watch: WorktreeWatch | None, mark: Mark | None, snapshot: Snapshot, index_checksum: bytes,
            rules: object) -> None:
    """Tell ``watch`` the checkpoint is over, with the directories its index has files in (those the scan
    started from, and those of the paths it added), and what the next checkpoint's scan may rely on."""
    if watch is None or mark is None:
        return
    dirs = snapshot.entered
    for path in snapshot.changed:
        if path in snapshot.entries:
            directory = path.rpartition(b"/")[0]
            while directory and directory not in dirs:
                dirs.add(directory)
                directory = directory.rpartition(b"/")[0]
    watch.settle(mark, dirs, index_checksum, complete=snapshot.complete, rules=rules, sweep=snapshot.sweep_next)


def recovery_checkpoint(
    ws: Workspace, cmd: RecoveryCheckpoint, *, store: GitStore, identity: Identity, faults: FaultInjector
) -> RecoveryCheckpointed:
    """Keep a failed or stopped pulse's work as a recovery commit on its branch; reset the worktree."""
    record = ws.record
    done = record.pulses.get(cmd.pulse_id) or store.ended_pulse(record.id, cmd.pulse_id)  # a retry's
    if done is not None and done.state in ("recovered", "discarded"):
        return _recovered(ws, done)
    pulse = ws.running_pulse(cmd.pulse_id)
    base = pulse.base_commit.encode()
    current = snapshot_all(ws)
    tree, paths = store_snapshot(ws, current, base)
    commit_id = None
    if paths:
        commit = make_commit(
            tree=tree,
            parents=[base],
            message=recovery_message(
                pulse_id=pulse.id, status=cmd.status, reason=cmd.reason, co_author=cmd.co_author
            ),
            identity=identity,
        )
        store_commit(ws, commit)
        commit_id = commit.id.decode()
    record.pending = PendingOperation(
        kind="recovery",
        pulse_id=pulse.id,
        commit=commit_id,
        pulse_head=_decode(read_branch(ws.repo, ws.pulse_ref(pulse.id))),
        files_changed=len(paths),
        paths=paths,
    )
    store.save_workflow(record)
    faults.step_done("commit")
    _finish_recovery(ws, store=store, identity=identity, faults=faults, current=current)
    return _recovered(ws, record.pulses[pulse.id])


def finish_pending(ws: Workspace, *, store: GitStore, identity: Identity, faults: FaultInjector) -> str | None:
    """Complete the workflow's journaled operation, if any; return its kind."""
    pending = ws.record.pending
    if pending is None:
        return None
    # Lock files a killed process left were removed when the workspace was opened (GitEngine._open).
    if pending.kind == "checkpoint":
        _finish_checkpoint(ws, store=store, identity=identity, faults=faults, current=None)
    else:
        _finish_recovery(ws, store=store, identity=identity, faults=faults, current=None)
    return pending.kind


def _finish_checkpoint(
    ws: Workspace, *, store: GitStore, identity: Identity, faults: FaultInjector, current: Current | None
) -> bytes:
    """Finish the journaled checkpoint; return the checksum of the index it leaves."""
    record = ws.record
    pending = record.pending
    assert pending is not None and pending.commit is not None
    pulse = record.pulses[pending.pulse_id]
    commit = pending.commit.encode()
    base = pulse.base_commit.encode()
    pulse_ref = ws.pulse_ref(pulse.id)
    committer = identity.committer
    head = read_branch(ws.repo, ws.workflow_ref)
    if head != commit:
        subject = ws.objects[oid(commit)].message.split(b"\n", 1)[0]  # type: ignore[attr-defined]  # a Commit
        move_branch(
            ws.repo,
            pulse_ref,
            old=read_branch(ws.repo, pulse_ref),
            new=commit,
            committer=committer,
            message=b"commit: " + subject,
        )
        faults.step_done("pulse_branch")
        if head is None or not _is_ancestor(ws, head, base):
            # Moved by someone else while this operation was cut short: the checkpoint stays on
            # the pulse branch and the pulse keeps running; a retry reports not_fast_forward.
            record.pending = None
            store.save_workflow(record)
            raise fail(
                GitErrorCode.NOT_FAST_FORWARD,
                f"the workflow branch {record.branch} moved; checkpoint {pending.commit[:10]} kept on "
                f"{pulse_branch_name(record.branch, pulse.id)}",
                workflow_head=_decode(head),
                commit=pending.commit,
            )
        move_branch(
            ws.repo,
            ws.workflow_ref,
            old=head,
            new=commit,
            committer=committer,
            message=b"merge " + pulse_ref[len(b"refs/heads/") :] + b": Fast-forward",
        )
        faults.step_done("fast_forward")
    set_head(ws.admin, ws.workflow_ref)
    faults.step_done("head")
    if read_branch(ws.repo, pulse_ref) == commit:
        delete_branch(ws.repo, pulse_ref, expected=commit)
    faults.step_done("delete_branch")
    reset = reset_worktree(
        ws.worktree, ws.index_path, ws.objects, commit_tree_id(ws.objects, commit), current=current,
        filemode=ws.filemode,
    )  # fmt: skip
    faults.step_done("reset")
    pulse.state = "succeeded"
    pulse.commit = pending.commit
    pulse.files_changed = pending.files_changed
    pulse.paths = list(pending.paths)
    record.active_pulse = None
    record.worktree_commit = pending.commit
    record.pending = None
    store.save_workflow(record)
    return reset.index_checksum


def _finish_recovery(
    ws: Workspace, *, store: GitStore, identity: Identity, faults: FaultInjector, current: Current | None
) -> bytes:
    """Finish the journaled recovery; return the checksum of the index it leaves."""
    record = ws.record
    pending = record.pending
    assert pending is not None
    pulse = record.pulses[pending.pulse_id]
    pulse_ref = ws.pulse_ref(pulse.id)
    if pending.commit is not None:
        move_branch(
            ws.repo,
            pulse_ref,
            old=read_branch(ws.repo, pulse_ref),
            new=pending.commit.encode(),
            committer=identity.committer,
            message=b"commit: recovery checkpoint",
        )
        faults.step_done("pulse_branch")
    set_head(ws.admin, ws.workflow_ref)
    faults.step_done("head")
    if pending.commit is None:
        delete_branch(ws.repo, pulse_ref)
        faults.step_done("delete_branch")
    head = ws.workflow_head()
    if current is None and pending.commit is not None:
        current = _state_including(ws, pending.commit.encode())
    reset = reset_worktree(
        ws.worktree, ws.index_path, ws.objects, commit_tree_id(ws.objects, head), current=current,
        filemode=ws.filemode,
    )  # fmt: skip
    faults.step_done("reset")
    pulse.state = "recovered" if pending.commit else "discarded"
    pulse.commit = pending.commit
    pulse.recovery = pending.commit is not None
    pulse.files_changed = pending.files_changed
    pulse.paths = list(pending.paths)
    record.active_pulse = None
    record.worktree_commit = head.decode()
    record.pending = None
    store.save_workflow(record)
    return reset.index_checksum


def _state_including(ws: Workspace, commit: bytes) -> Current:
    """The worktree's tracked state, counting the paths of ``commit`` as tracked.

    A recovery cut short after its commit has an index that predates the pulse's new files;
    they are in the recovery commit, and the reset must remove them as it would have.
    """
    index = read_index(ws.index_path)
    known = build_trees(leaves(index.entries))
    for path, ours, theirs in diff_trees(ws.objects, known, commit_tree_id(ws.objects, commit)):
        if ours is None and theirs is not None:
            # Zero stat data: the scan re-reads the file (or drops the entry if it is gone).
            index.entries[path] = IndexEntry(0, 0, 0, 0, 0, 0, theirs[0], 0, 0, 0, theirs[1])
    snapshot = scan_worktree(ws.worktree, index, include_untracked=False, filemode=ws.filemode)
    return snapshot, build_trees(leaves(snapshot.entries))


def _checkpointed(ws: Workspace, pulse: PulseRecord) -> PulseCheckpointed:
    assert pulse.commit is not None
    return PulseCheckpointed(
        run_id=ws.record.id,
        pulse_id=pulse.id,
        commit=pulse.commit,
        workflow_branch=ws.record.branch,
        files_changed=pulse.files_changed,
        paths=list(pulse.paths),
    )


def _unchanged(ws: Workspace, pulse: PulseRecord) -> PulseCheckpointed:
    return PulseCheckpointed(
        run_id=ws.record.id,
        pulse_id=pulse.id,
        commit=ws.workflow_head().decode(),
        workflow_branch=ws.record.branch,
        files_changed=0,
        committed=False,
    )


def _recovered(ws: Workspace, pulse: PulseRecord) -> RecoveryCheckpointed:
    return RecoveryCheckpointed(
        run_id=ws.record.id,
        pulse_id=pulse.id,
        is_recovery_checkpoint=pulse.recovery,
        commit=pulse.commit,
        pulse_branch=pulse.branch if pulse.recovery else None,
        files_changed=pulse.files_changed,
    )


def _decode(sha: bytes | None) -> str | None:
    return sha.decode() if sha is not None else None
