"""Landing a bead attempt's commit on the workflow branch, and keeping the workflow checkout current.

The rule, with B the attempt's base, C its commit and T the workflow branch tip:

- T == B: fast-forward to C;
- else, when no path C changed since B changed on B..T either (a path being a directory of the
  other's path counts as the same path): a new commit on T whose tree is T's with C's changes
  applied path by path, keeping C's message and author;
- else ``conflict``, listing those paths and the commits B..T, and nothing changes.

Merges run under the repository's lock, so one workflow's merges are serialised across requests
and service instances. The merge commit is journaled in the attempt's record before the branch
moves (compare-and-set from T), so a repeat after a crash finishes the move or sees it done.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from dulwich.graph import can_fast_forward
from dulwich.object_store import BaseObjectStore
from dulwich.objects import Commit, Tree
from dulwich.walk import ORDER_TOPO

from autarch.contracts.bead_git import BeadMerged, MergeBead, SyncWorkflowWorktree, WorkflowWorktreeSynced
from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import GitErrorCode

from .checkout import commit_tree_id, reset_worktree, tracked_state
from .commits import Identity
from .dulwich_ids import oid
from .loose import LooseObjectWriter
from .refs import RefConflict, move_branch, read_branch
from .store import GitStore
from .swarm_records import AttemptRecord, MergeJournal, MergeOutcome, SwarmStore
from .trees import MODE_TREE, STORED_TREES, Leaf, diff_stored, serialise_tree
from .workers import check_identifier, find_attempt, worker_branch_name
from .workspace import Workspace, fail
from .worktrees import head_branch

__all__ = ["apply_changes", "merge_bead", "sync_checkout", "sync_workflow_worktree"]

_MAX_RETRIES = 10
"""Recomputations when the workflow branch moves under a merge (only a writer outside the lock can)."""


def merge_bead(ws: Workspace, cmd: MergeBead, *, swarms: SwarmStore, store: GitStore, identity: Identity) -> BeadMerged:
    """Land the attempt's commit on the workflow branch, or answer ``conflict`` having changed nothing."""
    check_identifier("worker", cmd.worker)
    swarm = swarms.load(ws.record.id)
    attempt = find_attempt(ws, swarm, swarms=swarms, worker=cmd.worker, bead_id=cmd.bead_id, attempt=cmd.attempt)
    if attempt.merged is not None:
        return _answer(ws, attempt, attempt.merged)
    if not attempt.committed:
        raise fail(
            ErrorCode.CONFLICT,
            f"bead {cmd.bead_id} attempt {cmd.attempt} is not committed yet: commit_bead first",
            bead_id=cmd.bead_id,
            attempt=cmd.attempt,
        )
    if attempt.commit is None:
        # Nothing to land: the attempt "merges" as the branch as it is.
        outcome: MergeOutcome | None = MergeOutcome(status="merged", commit=ws.workflow_head().decode())
    else:
        outcome = _finish_journal(ws, attempt, identity) if attempt.merging is not None else None
        retries = 0
        while outcome is None:
            tip = ws.workflow_head()
            planned = _plan(ws, attempt, tip, identity)
            if isinstance(planned, MergeOutcome):
                outcome = planned
                break
            attempt.merging = planned
            swarms.save(swarm)
            try:
                outcome = _move(ws, attempt, planned, identity)
            except RefConflict:
                retries += 1
                if retries >= _MAX_RETRIES:
                    raise fail(ErrorCode.CONFLICT, f"the workflow branch {ws.record.branch} keeps moving") from None
                attempt.merging = None  # the tip moved: compute again from the new tip
    assert outcome is not None  # the loop above ends only with one
    attempt.merging = None
    attempt.merged = outcome
    swarms.save(swarm)
    if outcome.status == "merged":
        sync_checkout(ws, store=store)
    return _answer(ws, attempt, outcome)


def _answer(ws: Workspace, attempt: AttemptRecord, outcome: MergeOutcome) -> BeadMerged:
    return BeadMerged(
        workflow_id=ws.record.id,
        bead_id=attempt.bead_id,
        attempt=attempt.attempt,
        status=outcome.status,
        commit=outcome.commit,
        fast_forward=outcome.fast_forward,
        conflicting_files=list(outcome.conflicting_files),
        landed_since=list(outcome.landed_since),
    )


def _is_ancestor(ws: Workspace, ancestor: bytes, descendant: bytes) -> bool:
    return ancestor == descendant or can_fast_forward(ws.repo, oid(ancestor), oid(descendant))


def _finish_journal(ws: Workspace, attempt: AttemptRecord, identity: Identity) -> MergeOutcome | None:
    """Complete a journaled merge; None when the branch moved elsewhere before it was made (recompute)."""
    journal = attempt.merging
    assert journal is not None
    head = ws.workflow_head()
    commit = journal.commit.encode()
    if _is_ancestor(ws, commit, head):
        return MergeOutcome(status="merged", commit=journal.commit, fast_forward=journal.fast_forward)
    if head == journal.old_tip.encode():
        try:
            return _move(ws, attempt, journal, identity)
        except RefConflict:
            return None
    return None


def _move(ws: Workspace, attempt: AttemptRecord, journal: MergeJournal, identity: Identity) -> MergeOutcome:
    source = worker_branch_name(ws.record.branch, attempt.worker).encode()
    if journal.fast_forward:
        message = b"merge " + source + b": Fast-forward"
    else:
        message = b"cherry-pick: " + attempt.message.split("\n", 1)[0].encode("utf-8")
    move_branch(
        ws.repo,
        ws.workflow_ref,
        old=journal.old_tip.encode(),
        new=journal.commit.encode(),
        committer=identity.committer,
        message=message,
    )
    return MergeOutcome(status="merged", commit=journal.commit, fast_forward=journal.fast_forward)


def _plan(ws: Workspace, attempt: AttemptRecord, tip: bytes, identity: Identity) -> MergeJournal | MergeOutcome:
    """What merging the attempt onto ``tip`` means: the commit to move to, or a conflict."""
    assert attempt.commit is not None
    base, commit = attempt.base_commit.encode(), attempt.commit.encode()
    if tip == base:
        return MergeJournal(commit=attempt.commit, old_tip=tip.decode(), fast_forward=True)
    objects = ws.objects
    base_tree = commit_tree_id(objects, base)
    changes = bead_changes(objects, base_tree, commit_tree_id(objects, commit))
    landed = set(bead_changes(objects, base_tree, commit_tree_id(objects, tip)))
    conflicting = conflicting_paths(changes, landed)
    if conflicting:
        walker = ws.repo.get_walker(include=[oid(tip)], exclude=[oid(base)], order=ORDER_TOPO)
        since = [entry.commit.id.decode() for entry in walker]
        since.reverse()  # the walk goes from the tip back; the contract wants oldest first
        return MergeOutcome(
            status="conflict",
            conflicting_files=sorted(p.decode("utf-8", "backslashreplace") for p in conflicting),
            landed_since=since,
        )
    writer = LooseObjectWriter(objects.path)  # type: ignore[attr-defined]  # a DiskObjectStore
    tree = apply_changes(objects, writer, _raw(commit_tree_id(objects, tip)), changes)
    original = objects[oid(commit)]
    assert isinstance(original, Commit)
    merged = Commit()
    merged.tree = tree.hex().encode() if tree is not None else _empty_tree(writer)
    merged.parents = [oid(tip)]
    merged.author = original.author
    merged.author_time = original.author_time
    merged.author_timezone = original.author_timezone
    merged.committer = identity.committer
    merged.commit_time = int(time.time())
    merged.commit_timezone = time.localtime().tm_gmtoff
    merged.message = original.message
    writer.add(b"commit", merged.as_raw_string(), bytes.fromhex(merged.id.decode()))
    return MergeJournal(commit=merged.id.decode(), old_tip=tip.decode(), fast_forward=False)


def _raw(hex_id: bytes) -> bytes:
    return bytes.fromhex(hex_id.decode())


def bead_changes(store: BaseObjectStore, base_tree: bytes, commit_tree: bytes) -> dict[bytes, Leaf | None]:
    """What changed between two stored trees (hex ids): path → new (mode, raw id), or None where it was deleted.

    Without a rename detector, changes are adds, modifies and deletes; a path whose type changed has its new leaf.
    """
    return {path: after for path, _before, after in diff_stored(store, _raw(base_tree), _raw(commit_tree))}


def _parents(path: bytes) -> Iterable[bytes]:
    directory = path.rpartition(b"/")[0]
    while directory:
        yield directory
        directory = directory.rpartition(b"/")[0]


def conflicting_paths(bead: Iterable[bytes], landed: set[bytes]) -> set[bytes]:
    """The bead's paths that the landed commits touched, or whose file/directory role they changed."""
    landed_dirs = {parent for path in landed for parent in _parents(path)}
    return {
        path
        for path in bead
        if path in landed or path in landed_dirs or any(parent in landed for parent in _parents(path))
    }


def apply_changes(
    store: BaseObjectStore, writer: LooseObjectWriter, tree_id: bytes | None, changes: dict[bytes, Leaf | None]
) -> bytes | None:
    """Store the tree ``tree_id`` (raw id; None: empty) with ``changes`` applied; its raw id, or None when it ends
    up empty.

    Only the trees on changed paths are read and written.
    """
    listing: dict[bytes, Leaf] = dict(STORED_TREES.listing(store, tree_id)) if tree_id is not None else {}
    nested: dict[bytes, dict[bytes, Leaf | None]] = {}
    for path, leaf in changes.items():
        name, slash, rest = path.partition(b"/")
        if slash:
            nested.setdefault(name, {})[rest] = leaf
        elif leaf is None:
            listing.pop(name, None)
        else:
            listing[name] = leaf
    for name, sub in nested.items():
        current = listing.get(name)
        is_tree = current is not None and current[0] == MODE_TREE
        subtree = apply_changes(store, writer, current[1] if is_tree and current else None, sub)
        if subtree is not None:
            listing[name] = (MODE_TREE, subtree)
        elif is_tree:
            del listing[name]  # git stores no empty trees
    if not listing:
        return None
    body, tree = serialise_tree(listing)
    writer.add(b"tree", body, tree)
    STORED_TREES.prime(writer.root, tree, listing)
    return tree


def _empty_tree(writer: LooseObjectWriter) -> bytes:
    empty = Tree()
    writer.add(b"tree", empty.as_raw_string(), bytes.fromhex(empty.id.decode()))
    return empty.id


# --- the workflow worktree's checkout --------------------------------------------------------------


def sync_checkout(ws: Workspace, *, store: GitStore) -> bool:
    """Reset the workflow worktree to the branch tip when it is on the branch and clean; True when current.

    Clean means its tracked files are those of its last checkout (untracked files stay, as for a pulse).
    """
    record = ws.record
    if record.state != "ready" or record.active_pulse is not None or record.pending is not None:
        return False
    if not ws.worktree.exists() or head_branch(ws.admin) != ws.workflow_ref:
        return False
    head = read_branch(ws.repo, ws.workflow_ref)
    if head is None:
        return False
    head_tree = commit_tree_id(ws.objects, head)
    state = tracked_state(ws.worktree, ws.index_path, filemode=ws.filemode, max_file_bytes=ws.max_file_bytes)
    if state[1].root != head_tree:
        if record.worktree_commit is None or state[1].root != commit_tree_id(
            ws.objects, record.worktree_commit.encode()
        ):
            return False
        reset_worktree(ws.worktree, ws.index_path, ws.objects, head_tree, current=state, filemode=ws.filemode)
    if record.worktree_commit != head.decode():
        record.worktree_commit = head.decode()
        store.save_workflow(record)
    return True


def sync_workflow_worktree(ws: Workspace, cmd: SyncWorkflowWorktree, *, store: GitStore) -> WorkflowWorktreeSynced:
    """Bring the workflow worktree to the branch tip; a running pulse or modified files refuse it."""
    record = ws.record
    if record.active_pulse is not None:
        raise fail(
            GitErrorCode.PULSE_IN_PROGRESS,
            f"pulse {record.active_pulse} is running in workflow {record.id}: its worktree is not synced",
            active_pulse=record.active_pulse,
        )
    head = ws.workflow_head()
    if not sync_checkout(ws, store=store):
        raise fail(
            GitErrorCode.DIRTY_WORKTREE,
            f"the worktree of workflow {record.id} has modified tracked files or is not on {record.branch}",
            workflow_id=record.id,
        )
    return WorkflowWorktreeSynced(workflow_id=record.id, head=head.decode())
