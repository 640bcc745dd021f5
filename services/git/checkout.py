"""Make a worktree and its index match a commit's tree: ``git reset --hard`` by differences.

Only paths whose content differs from the target are written or removed; untracked files are
left alone, as git does. Given the snapshot just taken (the checkpoint path), no file is
stat'ed twice: the snapshot is the worktree's state. Every step is idempotent: a reset cut
short by a crash is finished by running it again.
"""

from __future__ import annotations

import os
import stat as stat_mod
from dataclasses import dataclass
from pathlib import Path

from dulwich.object_store import BaseObjectStore
from dulwich.objects import Blob, Commit

from autarch.runtime.worktree_files import remove_tree

from .dulwich_ids import oid
from .index_file import IndexContents, IndexEntry, entry_from_stat, read_index, write_index
from .snapshots import DEFAULT_MAX_FILE_BYTES, Snapshot, leaves, scan_worktree
from .trees import MODE_GITLINK, MODE_SYMLINK, TREE_CACHE, Leaf, TreeSet, build_trees, diff_trees, update_trees

__all__ = [
    "ResetResult",
    "UnsafePath",
    "commit_tree_id",
    "index_trees",
    "reset_worktree",
    "snapshot_trees",
    "tracked_state",
]


class UnsafePath(ValueError):
    """A tree names a path that would escape the worktree or write into ``.git``."""


@dataclass
class ResetResult:
    written: int
    removed: int
    index_checksum: bytes


def commit_tree_id(store: BaseObjectStore, commit_id: bytes) -> bytes:
    """Hex id of the tree of ``commit_id``."""
    commit = store[oid(commit_id)]
    if not isinstance(commit, Commit):
        raise ValueError(f"{commit_id.decode()} is not a commit")
    return commit.tree


def snapshot_trees(index_path: Path, snapshot: Snapshot) -> TreeSet:
    """The trees of ``snapshot``: rebuilt where it changed when this process wrote its index, else built."""
    index = snapshot.index
    cached = TREE_CACHE.lookup(index_path, index.checksum) if index is not None and any(index.checksum) else None
    if cached is None:
        trees = build_trees(leaves(snapshot.entries))
        if index is not None and not snapshot.changed and any(index.checksum):
            TREE_CACHE.remember(index_path, index.checksum, trees)
        return trees
    entries = snapshot.entries
    changes = {}
    for path in snapshot.changed:
        entry = entries.get(path)
        changes[path] = (entry.mode, entry.sha) if entry is not None else None
    return update_trees(cached, changes)


def index_trees(index_path: Path, snapshot: Snapshot) -> TreeSet | None:
    """The trees of the index ``snapshot`` was taken against, when this process still holds them."""
    index = snapshot.index
    if index is None or not any(index.checksum):
        return None
    return TREE_CACHE.lookup(index_path, index.checksum)


def tracked_state(
    root: Path, index_path: Path, *, filemode: bool = True, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    index: IndexContents | None = None,
) -> tuple[Snapshot, TreeSet]:
    """The tracked content of a worktree (``git add -u`` without writing) and its trees (``index``: the index
    file as the caller just read it)."""
    snapshot = scan_worktree(
        root, index or read_index(index_path), include_untracked=False, filemode=filemode,
        max_file_bytes=max_file_bytes,
    )
    return snapshot, snapshot_trees(index_path, snapshot)


def reset_worktree(
    root: Path,
    index_path: Path,
    store: BaseObjectStore,
    target_tree: bytes,
    *,
    current: tuple[Snapshot, TreeSet] | None = None,
    filemode: bool = True,
) -> ResetResult:
    """Bring ``root`` and its index to ``target_tree`` (hex id).

    Args:
        root: The worktree's top directory.
        index_path: Its index file (in the worktree's admin directory).
        store: The repository's object store.
        target_tree: The tree to reset to.
        current: The worktree's state when the caller just took it (skips the scan).
        filemode: Honour the executable bit.
    """
    snapshot, trees = current or tracked_state(root, index_path, filemode=filemode)
    entries = dict(snapshot.entries)
    changes = list(diff_trees(store, trees, target_tree, known=index_trees(index_path, snapshot)))
    root_b = os.fsencode(root)
    removed = written = 0
    # Removals first: a file may have to make way for a directory of the same name.
    for path, ours, theirs in changes:
        _check_path(path)
        if theirs is None and ours is not None:
            _remove(root_b, path)
            entries.pop(path, None)
            removed += 1
    for path, _ours, theirs in changes:
        if theirs is None:
            continue
        entries[path] = _write(root_b, path, theirs, store)
        written += 1
    checksum = write_index(index_path, entries, unchanged_from=snapshot.index)
    if changes:
        # The index now holds the target's trees: the snapshot's with the changed leaves replaced, built in time
        # proportional to the change (a worker reset to a tip that moved by one bead rebuilt every tree after).
        target = update_trees(trees, {path: theirs for path, _ours, theirs in changes})
        if target.root == target_tree:
            TREE_CACHE.remember(index_path, checksum, target)
        else:
            TREE_CACHE.forget(index_path)
    else:
        TREE_CACHE.remember(index_path, checksum, trees)  # the index now holds exactly these trees
    return ResetResult(written=written, removed=removed, index_checksum=checksum)


def _check_path(path: bytes) -> None:
    for part in path.split(b"/"):
        if part in (b"", b".", b"..") or part.lower() == b".git":
            raise UnsafePath(f"refusing to write tree path {path.decode(errors='replace')!r}")


def _remove(root: bytes, path: bytes) -> None:
    if _leading_link(root, path):
        return  # the path's directory is a link now: nothing of the worktree is there, and outside is not ours
    full = root + b"/" + path
    try:
        if os.path.isdir(full) and not os.path.islink(full):
            if not os.listdir(full):
                os.rmdir(full)  # an uninitialised submodule's empty directory
        else:
            os.unlink(full)
    except FileNotFoundError:
        pass
    _prune_empty_parents(root, path)


def _leading_link(root: bytes, path: bytes) -> bool:
    """Some directory of ``path`` is a link or not a directory (an agent may have put one there)."""
    probe = root
    for part in path.split(b"/")[:-1]:
        probe = probe + b"/" + part
        try:
            if not stat_mod.S_ISDIR(os.lstat(probe).st_mode):
                return True
        except FileNotFoundError:
            return False
    return False


def _prune_empty_parents(root: bytes, path: bytes) -> None:
    directory = path.rpartition(b"/")[0]
    while directory:
        try:
            os.rmdir(root + b"/" + directory)
        except OSError:
            return  # not empty (untracked files stay) or already gone
        directory = directory.rpartition(b"/")[0]


def _make_parents(root: bytes, path: bytes) -> None:
    """Make the directories of ``path``, replacing a file or link in the way (as ``reset --hard`` does).

    Never ``makedirs``: it follows a link, and an agent's link where a directory belongs (say, an ignored
    ``build`` -> ``/home/user``) would make the checkout write outside the worktree.
    """
    probe = root
    for part in path.split(b"/")[:-1]:
        probe = probe + b"/" + part
        try:
            mode = os.lstat(probe).st_mode
        except FileNotFoundError:
            os.mkdir(probe)
            continue
        if not stat_mod.S_ISDIR(mode):
            os.unlink(probe)
            os.mkdir(probe)


def _write(root: bytes, path: bytes, leaf: Leaf, store: BaseObjectStore) -> IndexEntry:
    mode, sha = leaf
    _make_parents(root, path)
    full = root + b"/" + path
    if os.path.isdir(full) and not os.path.islink(full):
        if mode == MODE_GITLINK:
            return entry_from_stat(os.lstat(full), sha=sha, mode=mode)
        remove_tree(os.fsdecode(full))  # only untracked files can remain in a directory a file replaces
    if mode == MODE_GITLINK:
        try:
            os.unlink(full)
        except FileNotFoundError:
            pass
        os.mkdir(full)  # git checks submodules out separately; it leaves an empty directory
        return entry_from_stat(os.lstat(full), sha=sha, mode=mode)
    blob = store[oid(sha.hex().encode())]
    if not isinstance(blob, Blob):
        raise ValueError(f"{sha.hex()} at {path!r} is not a blob")
    try:
        os.unlink(full)
    except FileNotFoundError:
        pass
    if mode == MODE_SYMLINK:
        os.symlink(blob.data, full)
    else:
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o777 if mode == 0o100755 else 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(blob.data)
    return entry_from_stat(os.lstat(full), sha=sha, mode=mode)
