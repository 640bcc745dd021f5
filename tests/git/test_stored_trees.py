"""Stored trees read once: the listing cache, the diff of two stored trees, and the trees a reset leaves behind.

Each is checked against git itself or against the uncached computation over a real repository.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from pathlib import Path

import pytest
from dulwich.diff_tree import tree_changes
from dulwich.objects import Tree
from dulwich.repo import Repo

from autarch.services.git.checkout import commit_tree_id, reset_worktree, tracked_state
from autarch.services.git.dulwich_ids import oid
from autarch.services.git.index_file import read_index
from autarch.services.git.snapshots import leaves, scan_worktree
from autarch.services.git.trees import STORED_TREES, TREE_CACHE, StoredTrees, build_trees, diff_stored

from .gitcli import git


def _commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def _random_commits(repo: Path, rounds: int, seed: int) -> list[str]:
    """Commits whose trees add, change and delete files, swap files and directories, and make links."""
    rng = random.Random(seed)
    names = ["a", "b", "c", "a.txt", "a-b"]
    git(repo, "init", "-q", "-b", "main")
    commits = []
    for k in range(rounds):
        for _ in range(rng.randint(1, 5)):
            path = repo.joinpath(*(rng.choice(names) for _ in range(rng.randint(1, 3))))
            action = rng.random()
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)  # a directory becomes a file (or goes)
            elif action < 0.2 and (path.exists() or path.is_symlink()):
                path.unlink()
                continue
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                for parent in reversed(path.relative_to(repo).parents):
                    full = repo / parent
                    if full.is_symlink() or full.is_file():
                        full.unlink()  # a file becomes a directory
                path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink() or path.is_file():
                path.unlink()
            if action < 0.3:
                os.symlink("target", path)
            else:
                path.write_text(f"{k} {rng.random()}\n")
                if action > 0.9:
                    path.chmod(0o755)
        commits.append(_commit_all(repo, f"round {k}"))
    return commits


def test_a_diff_of_stored_trees_is_what_git_lists(tmp_path: Path):
    repo = tmp_path / "r"
    repo.mkdir()
    commits = _random_commits(repo, 30, seed=7)
    store = Repo(str(repo)).object_store
    trees = [commit_tree_id(store, c.encode()) for c in commits]
    for old, new in itertools.pairwise(trees):
        ours = {
            (path, before, after)
            for path, before, after in diff_stored(store, bytes.fromhex(old.decode()), bytes.fromhex(new.decode()))
        }
        theirs = set()
        for change in tree_changes(store, oid(old), oid(new)):
            for side in (change.old, change.new):
                if side is not None and side.path is not None:
                    theirs.add(side.path)
        assert {path for path, _, _ in ours} == theirs
        listed = git(repo, "diff", "--name-only", "--no-renames", old.decode(), new.decode()).split("\n")
        assert {path.decode() for path, _, _ in ours} == {p for p in listed if p}
        for path, before, after in ours:
            assert before != after
            for leaf, tree in ((before, old), (after, new)):
                shown = git(repo, "ls-tree", tree.decode(), "--", path.decode())
                if leaf is None:
                    assert not shown or shown.split()[1] == "tree"
                else:
                    assert shown.split()[0] == f"{leaf[0]:06o}" and shown.split()[2] == leaf[1].hex()


def test_the_listing_cache_holds_at_most_its_entries_and_keeps_the_recent(tmp_path: Path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    ids = []
    for k in range(12):
        (repo / f"f{k}").write_text(f"{k}\n")  # the root tree grows by one entry a commit
        ids.append(bytes.fromhex(git(repo, "rev-parse", f"{_commit_all(repo, str(k))}^{{tree}}")))
    store = Repo(str(repo)).object_store
    cache = StoredTrees(max_entries=30)
    for tree_id in ids:
        stored = store[oid(tree_id.hex().encode())]
        assert isinstance(stored, Tree)
        assert dict(cache.listing(store, tree_id)) == {
            name: (mode, bytes.fromhex(sha.decode())) for name, mode, sha in stored.iteritems()
        }
        assert cache._entries <= 30
    # The last trees (12 and 11 entries, +1 each) fit; the oldest went.
    assert len(cache) == 2
    cache.listing(store, ids[-2])  # used again: now the most recent
    cache.prime(store.path, b"\1" * 20, {b"x%d" % k: (0o100644, b"\2" * 20) for k in range(5)})  # 25 + 6 > 30
    assert ((os.path.normpath(store.path), ids[-2])) in cache._items
    assert ((os.path.normpath(store.path), ids[-1])) not in cache._items
    # A listing larger than the whole bound is read, never kept.
    small = StoredTrees(max_entries=5)
    assert len(small.listing(store, ids[-1])) == 12
    assert len(small) == 0


def test_a_tree_kept_for_one_repository_is_not_read_for_another(tmp_path: Path):
    one, other = tmp_path / "one", tmp_path / "other"
    for repo in (one, other):
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
    (one / "f").write_text("only in one\n")
    tree = bytes.fromhex(git(one, "rev-parse", f"{_commit_all(one, 'one')}^{{tree}}"))
    assert STORED_TREES.listing(Repo(str(one)).object_store, tree)
    with pytest.raises(KeyError):
        STORED_TREES.listing(Repo(str(other)).object_store, tree)


def test_after_a_reset_the_kept_trees_are_the_targets(tmp_path: Path):
    repo = tmp_path / "r"
    repo.mkdir()
    commits = _random_commits(repo, 12, seed=11)
    store = Repo(str(repo)).object_store
    index_path = repo / ".git" / "index"
    rng = random.Random(3)
    for _ in range(10):
        target = rng.choice(commits)
        target_tree = commit_tree_id(store, target.encode())
        reset_worktree(repo, index_path, store, target_tree)
        assert git(repo, "diff-index", "--cached", "--name-only", target) == ""  # the index is the target's
        assert git(repo, "diff-files", "--name-only") == ""  # and so are the files
        index = read_index(index_path)
        kept = TREE_CACHE.lookup(index_path, index.checksum)
        assert kept is not None and kept.root == target_tree
        fresh = build_trees(leaves(scan_worktree(repo, index, include_untracked=False).entries))
        assert kept.ids == fresh.ids and kept.raw == fresh.raw and kept.listing == fresh.listing
        assert tracked_state(repo, index_path)[1].root == target_tree
