"""The building blocks against git itself: ref-name rules, the index codec, the worktree scan."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
from pathlib import Path

import pytest
from dulwich.repo import Repo

from autarch.contracts.git import CheckpointPulse, CreateWorkflowBranch, RegisterRepository, StartPulse
from autarch.runtime.settings import load_settings
from autarch.services.git.commits import Identity
from autarch.services.git.diffs import DiffStats, FileDiff, FileKey, tree_diff
from autarch.services.git.engine import GitEngine
from autarch.services.git.index_file import PARSED, IndexFormatError, entry_from_stat, read_index, write_index
from autarch.services.git.refs import BranchNameError, pulse_branch_name, validate_branch_name
from autarch.services.git.service import identity_from_settings
from autarch.services.git.snapshots import leaves, scan_worktree
from autarch.services.git.trees import build_trees, diff_trees, update_trees

from .gitcli import GIT_ENV, fsck, git, make_user_repo

NAMES = [
    "feature/x", "autarch/wf-1", "a..b", "a b", "x.lock", "x/", "a//b", ".hidden", "a/.b", "x@{1}", "@",
    "a~1", "a^", "a:b", "a?b", "a*b", "a[b", "a\\b", "ok.name", "unicod\u00e9", "tab\tx", "x.", "a/b.lock/c",
    "@x", "x@y", "a/b/c", "UPPER_case-9", "a\x7fb", "trailing.lock/ok", "x/y.",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_branch_names_follow_git_check_ref_format(name: str):
    git_says = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True, env=GIT_ENV)
    try:
        validate_branch_name(name)
        ours = True
    except BranchNameError:
        ours = False
    assert ours == (git_says.returncode == 0)


def test_names_git_reads_as_options_or_head_are_refused():
    for name in ("-x", "HEAD", ""):
        with pytest.raises(BranchNameError):
            validate_branch_name(name)


def test_pulse_branches_are_legal_and_never_nested_under_the_workflow_branch():
    name = pulse_branch_name("autarch/wf-1", "0b9e-42")
    assert name == "autarch/wf-1.pulse-0b9e-42"
    validate_branch_name(name)


def _repo_with_files(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for i in range(40):
        (path / f"d{i % 4}" / f"sub{i % 3}").mkdir(parents=True, exist_ok=True)
        (path / f"d{i % 4}" / f"sub{i % 3}" / f"f{i}.txt").write_text(f"{i}\n")
    (path / ("long-" + "n" * 200 + ".txt")).write_text("a long name: padding differs\n")
    (path / "exec.sh").write_text("#!/bin/sh\n")
    (path / "exec.sh").chmod(0o755)
    os.symlink("exec.sh", path / "link")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "files")
    return path


def test_index_codec_round_trips_what_git_wrote(tmp_path: Path):
    repo = _repo_with_files(tmp_path / "r")
    index_path = repo / ".git" / "index"
    contents = read_index(index_path)
    assert len(contents.entries) == 43
    staged = git(repo, "ls-files", "-s")
    write_index(index_path, contents.entries)
    assert git(repo, "ls-files", "-s") == staged
    assert git(repo, "status", "--porcelain") == ""
    assert read_index(index_path).entries == contents.entries
    # Trees built from the index are the ones git built.
    trees = build_trees(leaves(contents.entries))
    assert trees.root.decode() == git(repo, "rev-parse", "HEAD^{tree}")
    fsck(repo)


def test_a_remembered_index_is_read_as_the_file_on_disk_says(tmp_path: Path):
    repo = _repo_with_files(tmp_path / "r")
    index_path = repo / ".git" / "index"
    contents = read_index(index_path)
    write_index(index_path, contents.entries)  # remembered for the next read
    remembered = read_index(index_path)
    PARSED.clear()
    parsed = read_index(index_path)
    assert remembered.entries == parsed.entries == contents.entries
    assert remembered.raw == parsed.raw and remembered.checksum == parsed.checksum
    # A reader's changes to its entries do not leak into the next read.
    remembered.entries.clear()
    assert read_index(index_path).entries == contents.entries

    # git rewrites the index behind our back: its content is read, not what was remembered.
    (repo / "d0" / "sub0" / "f0.txt").write_text("changed by git\n")
    git(repo, "add", "d0/sub0/f0.txt")
    entry = read_index(index_path).entries[b"d0/sub0/f0.txt"]
    assert entry.sha.hex() == git(repo, "rev-parse", ":d0/sub0/f0.txt")

    # A damaged file is refused even while its previous content is remembered.
    write_index(index_path, read_index(index_path).entries)
    data = bytearray(index_path.read_bytes())
    data[100] ^= 0xFF
    index_path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="checksum"):
        read_index(index_path)


def test_an_index_written_over_a_remembered_one_is_in_git_order(tmp_path: Path):
    repo = _repo_with_files(tmp_path / "r")
    index_path = repo / ".git" / "index"
    write_index(index_path, read_index(index_path).entries)
    remembered = read_index(index_path)
    # The same paths, one with new content: written in the remembered order.
    changed = repo / "d1" / "sub1" / "f1.txt"
    changed.write_text("new content\n")
    sha = git(repo, "hash-object", "-w", "d1/sub1/f1.txt")
    entries = dict(remembered.entries)
    entries[b"d1/sub1/f1.txt"] = entry_from_stat(os.lstat(changed), sha=bytes.fromhex(sha), mode=0o100644)
    write_index(index_path, entries, unchanged_from=remembered)
    assert git(repo, "rev-parse", ":d1/sub1/f1.txt") == sha
    assert git(repo, "status", "--porcelain") == "M  d1/sub1/f1.txt"
    # A path added and one removed: sorted again (ls-files lists entries in the file's order).
    remembered = read_index(index_path)
    entries = dict(remembered.entries)
    (repo / "d0" / "a.txt").write_text("added\n")
    sha = git(repo, "hash-object", "-w", "d0/a.txt")
    entries[b"d0/a.txt"] = entry_from_stat(os.lstat(repo / "d0" / "a.txt"), sha=bytes.fromhex(sha), mode=0o100644)
    del entries[b"exec.sh"]
    write_index(index_path, entries, unchanged_from=remembered)
    listed = git(repo, "ls-files").splitlines()
    assert listed == sorted(p.decode() for p in entries) and "d0/a.txt" in listed and "exec.sh" not in listed
    status = git(repo, "status", "--porcelain").splitlines()
    assert "A  d0/a.txt" in status and "D  exec.sh" in status


def test_index_with_extended_flags_is_read_and_written(tmp_path: Path):
    repo = _repo_with_files(tmp_path / "r")
    (repo / "later.txt").write_text("intent\n")
    git(repo, "add", "-N", "later.txt")  # intent-to-add: a version 3 index
    index_path = repo / ".git" / "index"
    contents = read_index(index_path)
    assert contents.entries[b"later.txt"].ext_flags
    write_index(index_path, contents.entries)
    assert "later.txt" in git(repo, "ls-files")
    snapshot = scan_worktree(repo, read_index(index_path), include_untracked=False)
    assert b"later.txt" in snapshot.changed  # nothing was staged for it yet


def test_scan_is_git_add_all(tmp_path: Path):
    repo = _repo_with_files(tmp_path / "r")
    (repo / ".gitignore").write_text("build/\n*.tmp\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_text("ignored\n")
    (repo / "x.tmp").write_text("ignored\n")
    (repo / "d0" / "sub0" / "f0.txt").write_text("changed\n")
    (repo / "d1" / "sub1" / "f1.txt").unlink()
    (repo / "d9").mkdir()
    (repo / "d9" / "new.txt").write_text("new\n")
    (repo / "exec.sh").chmod(0o644)
    snapshot = scan_worktree(
        repo,
        read_index(repo / ".git" / "index"),
        include_untracked=True,
        is_ignored=lambda p: p.startswith("build/") or p == "build/" or p.endswith(".tmp"),
    )
    ours = build_trees(leaves(snapshot.entries)).root.decode()
    git(repo, "add", "-A")
    assert ours == git(repo, "write-tree")
    assert snapshot.changed == {b".gitignore", b"d0/sub0/f0.txt", b"d1/sub1/f1.txt", b"d9/new.txt", b"exec.sh"}


def test_commit_identity_comes_from_the_settings(tmp_path: Path):
    settings = load_settings(
        environ={
            "AUTARCH_DATA_DIR": str(tmp_path / "data"),
            "AUTARCH_GIT_AUTHOR_NAME": "Review Bot",
            "AUTARCH_GIT_AUTHOR_EMAIL": "bot@example.com",
            "AUTARCH_GIT_COMMITTER_EMAIL": "ci@example.com",
        }
    )
    assert Identity() == identity_from_settings(load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path)}))
    repo = make_user_repo(tmp_path / "repo")
    engine = GitEngine(data_dir=settings.data_path, identity=identity_from_settings(settings))
    registered = engine.register_repository(RegisterRepository(path=str(repo)))
    engine.create_workflow_branch(
        CreateWorkflowBranch(run_id="w", repository_id=registered.repository_id, branch="bot/w")
    )
    engine.start_pulse(StartPulse(run_id="w", pulse_id="p"))
    done = engine.checkpoint_pulse(CheckpointPulse(run_id="w", pulse_id="p", summary="chore: nothing"))
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", done.commit) == (
        "Review Bot <bot@example.com>|Review Bot <ci@example.com>"
    )


def test_a_split_index_is_refused_not_misread(tmp_path: Path):
    repo = _repo_with_files(tmp_path / "r")
    git(repo, "-c", "core.splitIndex=true", "update-index", "--split-index")
    with pytest.raises(IndexFormatError, match="split index"):
        read_index(repo / ".git" / "index")


def test_updating_trees_equals_building_them_anew():
    rng = random.Random(4)
    names = [b"a", b"b", b"c", b"a.txt", b"a-b"]

    def random_path() -> bytes:
        return b"/".join(rng.choice(names) for _ in range(rng.randint(1, 4)))

    def leaf() -> tuple[int, bytes]:
        return rng.choice([0o100644, 0o100755, 0o120000]), hashlib.sha1(rng.randbytes(8)).digest()

    def consistent(leaves: dict[bytes, tuple[int, bytes]]) -> dict[bytes, tuple[int, bytes]]:
        # Drop paths that would make a file also a directory (git cannot hold both).
        kept: dict[bytes, tuple[int, bytes]] = {}
        for path in sorted(leaves, key=len):
            prefixes = {b"/".join(path.split(b"/")[:i]) for i in range(1, path.count(b"/") + 1)}
            if not prefixes & kept.keys() and not any(k.startswith(path + b"/") for k in kept):
                kept[path] = leaves[path]
        return kept

    for _ in range(200):
        before = consistent({random_path(): leaf() for _ in range(rng.randint(0, 12))})
        after = dict(before)
        for path in rng.sample(sorted(before), k=min(len(before), rng.randint(0, 4))):
            del after[path]
        for _ in range(rng.randint(0, 4)):
            after[random_path()] = leaf()
        after = consistent(after)
        changes = {p: after.get(p) for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
        updated = update_trees(build_trees(before), changes)
        fresh = build_trees(after)
        assert updated.ids == fresh.ids and updated.raw == fresh.raw
        assert {d: c for d, c in updated.listing.items()} == fresh.listing


class _CountingStore:
    """A real object store that counts the objects read from it."""

    def __init__(self, store) -> None:
        self.store = store
        self.reads = 0

    def __getitem__(self, sha: bytes):
        self.reads += 1
        return self.store[sha]


def test_trees_in_memory_stand_in_for_stored_ones_only_where_ids_match(tmp_path: Path):
    repo = _repo_with_files(tmp_path / "r")
    first = git(repo, "rev-parse", "HEAD^{tree}")
    for name in ("d0/sub0/f0.txt", "d2/sub2/f2.txt"):
        (repo / name).write_text("second\n")
    (repo / "d3" / "new").mkdir()
    (repo / "d3" / "new" / "n.txt").write_text("new\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "second")
    second = git(repo, "rev-parse", "HEAD^{tree}")
    index = read_index(repo / ".git" / "index")
    known = build_trees(leaves(index.entries))  # the trees of the second commit
    assert known.root.decode() == second
    ours = update_trees(known, {b"d0/sub1/f4.txt": None, b"d1/x.txt": (0o100644, b"\1" * 20)})

    def diff(stored: str, known_trees):
        store = _CountingStore(Repo(str(repo)).object_store)
        result = list(diff_trees(store, ours, stored.encode(), known=known_trees))  # type: ignore[arg-type]  # a counting stand-in
        return result, store.reads

    for stored in (second, first):
        with_known, reads_with = diff(stored, known)
        without, reads_without = diff(stored, None)
        assert with_known == without
        assert reads_without > 0
        if stored == second:
            assert reads_with == 0  # every tree on the changed paths was in memory
    # Trees of another commit are used only where their ids match the stored ones.
    assert diff(first, known)[0] == diff(first, build_trees({}))[0]
    assert {p for p, _, _ in diff(first, known)[0]} >= {b"d0/sub1/f4.txt", b"d1/x.txt", b"d3/new/n.txt"}


def test_a_diff_reads_loose_and_packed_blobs_alike(tmp_path: Path):
    # The diff reads a loose blob straight from its file (a checkpoint leaves every new one loose); once git has
    # packed them it asks the store. Both must render the same text: added, changed, deleted, binary and empty.
    repo = make_user_repo(tmp_path / "repo")
    (repo / "old.txt").write_text("one\ntwo\n")
    (repo / "gone.txt").write_text("bye\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "before")
    (repo / "old.txt").write_text("one\n2\nthree")
    (repo / "gone.txt").unlink()
    (repo / "new.txt").write_text("fresh\n")
    (repo / "empty").write_text("")
    (repo / "bin.dat").write_bytes(b"\x00\x01\x02")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "after")
    trees = [git(repo, "rev-parse", f"{rev}^{{tree}}").strip().encode() for rev in ("HEAD~1", "HEAD")]

    def render() -> tuple[bytes, DiffStats]:
        with Repo(str(repo)) as opened:
            return tree_diff(opened.object_store, *trees)

    loose = render()
    git(repo, "repack", "-adq")
    git(repo, "prune-packed")
    assert not [p for p in (repo / ".git" / "objects").iterdir() if len(p.name) == 2 and any(p.iterdir())]
    assert render() == loose
    text = loose[0].decode()
    assert "+fresh\n" in text and "-bye\n" in text and "+three\n\\ No newline at end of file" in text
    assert "Binary files /dev/null and b/bin.dat differ" in text and loose[1].files_changed == 5


def test_a_diff_reusing_an_earlier_diffs_files_renders_what_a_fresh_one_does(tmp_path: Path):
    # The git service keeps the files of its last diffs: a workflow diff after a second pulse takes the first
    # pulse's renderings and must still say exactly what a diff made from nothing says.
    repo = make_user_repo(tmp_path / "repo")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    revs = [git(repo, "rev-parse", "HEAD^{tree}").strip().encode()]
    for step in range(2):
        (repo / "same.txt").write_text("kept\n")
        (repo / "moving.txt").write_text(f"step {step}\n")
        (repo / f"only{step}.txt").write_text("x\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"pulse {step}")
        revs.append(git(repo, "rev-parse", "HEAD^{tree}").strip().encode())
    with Repo(str(repo)) as opened:
        store = opened.object_store
        kept: dict[FileKey, FileDiff] = {}
        tree_diff(store, revs[0], revs[1], keep=kept)
        reused = tree_diff(store, revs[0], revs[2], reuse=kept)
        assert reused == tree_diff(store, revs[0], revs[2])
    assert b"+step 1\n" in reused[0] and b"+step 0" not in reused[0] and reused[1].files_changed >= 4


def test_a_repository_reads_its_config_again_only_when_the_file_changed(tmp_path: Path):
    from autarch.services.git.workspace import open_repository

    repo_path = _repo_with_files(tmp_path / "r")
    repo = open_repository(repo_path)
    first = repo.get_config()
    assert repo.get_config() is first  # unchanged: not parsed again
    assert first.get_boolean((b"core",), b"filemode", True) is True
    git(repo_path, "config", "core.fileMode", "false")  # changed under an open repository
    changed = repo.get_config()
    assert changed is not first and changed.get_boolean((b"core",), b"filemode", True) is False
    repo.close()
