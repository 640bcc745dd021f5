"""The git service against a worktree an agent made hostile (issue 32's audit; docs/security.md).

A pulse's commands may leave anything in its worktree: links out of it, FIFOs, a rewritten ``.git``, a
``.gitattributes`` that names a filter, names git would refuse. The snapshot, the commit, the reset after
it, the diff, the swarm's merge and the worker files the service writes must each end in a correct
commit or a typed error; none may hang, run a program, or carry a file from outside the worktree into
the repository. Every pulse here runs over a real nats-server against a real repository, and git's own
command line is the judge.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from autarch.contracts.git import (
    CheckpointPulse,
    DiffArtifact,
    DiffArtifactRef,
    GetDiffArtifact,
    PulseCheckpointed,
    PulseDiff,
    PulseStarted,
    RemoveWorktree,
    StartPulse,
    WorktreeRemoved,
)
from autarch.runtime.errors import RemoteError
from autarch.runtime.worktree_files import remove_tree

from .gitcli import GIT_ENV, fsck, git

SECRET = "the-secret-outside-the-worktree-4711"


def _objects(repo: Path) -> bytes:
    """Every object of the repository, as ``git cat-file`` prints them."""
    return subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo, env=GIT_ENV, capture_output=True, check=True
    ).stdout


def _tree(repo: Path, ref: str = "autarch/wf-1") -> list[bytes]:
    out = subprocess.run(
        ["git", "ls-tree", "-r", "-z", "--full-tree", ref], cwd=repo, env=GIT_ENV, capture_output=True, check=True
    ).stdout
    return [line.split(b"\t", 1)[1] for line in out.split(b"\0") if line]


@pytest.fixture(autouse=True)
def _remove_deep_trees(tmp_path: Path):
    """Remove what the test made: pytest's own clean-up (``shutil.rmtree``) fails on a tree 1,000 levels deep."""
    yield
    remove_tree(tmp_path)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the worktree holding a secret file (the agent's target)."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text(SECRET + "\n")
    return path


Hostile = Callable[[Path, Path, Path], None]
"""Makes the worktree hostile: (worktree, outside dir, marker file a filter would create)."""


def _symlink_to_secret(wt: Path, outside: Path, _marker: Path) -> None:
    (wt / "leak.txt").symlink_to(outside / "secret.txt")


def _symlinked_directory(wt: Path, outside: Path, _marker: Path) -> None:
    (wt / "leakdir").symlink_to(outside, target_is_directory=True)


def _symlink_loop(wt: Path, _outside: Path, _marker: Path) -> None:
    (wt / "loop-a").symlink_to("loop-b")
    (wt / "loop-b").symlink_to("loop-a")
    (wt / "self").symlink_to("self")


def _fifo_and_socket(wt: Path, _outside: Path, _marker: Path) -> None:
    os.mkfifo(wt / "pipe")
    os.mkfifo(wt / "src" / "pipe.py")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(wt / "sock"))
    server.close()  # the socket file stays behind


def _nested_git_directory(wt: Path, outside: Path, _marker: Path) -> None:
    nested = wt / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "lib.py").write_text(SECRET + "\n")
    # A directory named like git's own, in another case: git refuses to track it, on every platform.
    (wt / ".GIT").mkdir()
    (wt / ".GIT" / "config").write_text("[core]\n\tfsmonitor = touch /tmp/x\n")
    (wt / "sub" / ".Git").mkdir(parents=True)
    (wt / "sub" / ".Git" / "HEAD").write_text("ref: refs/heads/main\n")
    # Its short (8.3) name and a trailing dot, which Windows and NTFS read as ".git" too.
    (wt / "GIT~1").mkdir()
    (wt / "GIT~1" / "config").write_text("[core]\n\thooksPath = /tmp\n")
    (wt / "sub" / ".git.").mkdir()
    (wt / "sub" / ".git." / "HEAD").write_text("ref: refs/heads/main\n")
    (wt / "sub" / "kept.txt").write_text("kept\n")


def _rewritten_dot_git(wt: Path, outside: Path, _marker: Path) -> None:
    other = outside / "other"
    other.mkdir()
    git(other, "init", "-q")
    (wt / ".git").write_text(f"gitdir: {other / '.git'}\n")


def _symlinked_dot_git(wt: Path, outside: Path, _marker: Path) -> None:
    (wt / ".git").unlink()
    (wt / ".git").symlink_to(outside, target_is_directory=True)


def _filters_and_ident(wt: Path, _outside: Path, marker: Path) -> None:
    (wt / ".gitattributes").write_text("*.txt filter=evil diff=evil\n*.c ident\n*.md export-subst\n")
    # The repository's config is the user's; the agent's .gitattributes names a driver anyway.
    git(wt, "config", "filter.evil.clean", f"touch {marker}; cat")
    git(wt, "config", "filter.evil.process", f"touch {marker}")
    git(wt, "config", "diff.evil.textconv", f"touch {marker}; cat")
    (wt / "notes.txt").write_text("kept as written\n")
    (wt / "id.c").write_text("/* $Id$ */\n")
    (wt / "sub.md").write_text("$Format:%H$\n")


def _gitmodules_ext(wt: Path, _outside: Path, marker: Path) -> None:
    (wt / ".gitmodules").write_text(
        f'[submodule "x"]\n\tpath = x\n\turl = ext::sh -c touch% {marker}\n\tupdate = !touch {marker}\n'
    )
    (wt / "x").mkdir()
    (wt / "x" / "file").write_text("x\n")


def _odd_names(wt: Path, _outside: Path, _marker: Path) -> None:
    root = os.fsencode(wt)
    for name in (b"new\nline.txt", b"bad-\xff\xfe.txt", b"-rf", b"--help", b"tab\tand space .txt", b'q"uote\\'):
        with open(root + b"/" + name, "wb") as f:
            f.write(b"odd " + name + b"\n")


def _case_collisions(wt: Path, _outside: Path, _marker: Path) -> None:
    (wt / "Readme.md").write_text("upper\n")
    (wt / "readme.md").write_text("lower\n")
    (wt / "SRC").mkdir()
    (wt / "SRC" / "app.py").write_text("other\n")


def _symlinked_special_files(wt: Path, outside: Path, _marker: Path) -> None:
    (wt / ".gitmodules").symlink_to(outside / "secret.txt")
    (wt / ".gitignore").unlink()
    (wt / ".gitignore").symlink_to(outside / "secret.txt")
    (wt / ".gitattributes").symlink_to(outside / "secret.txt")


def _fifo_ignore_file(wt: Path, _outside: Path, _marker: Path) -> None:
    (wt / ".gitignore").unlink()
    os.mkfifo(wt / ".gitignore")
    (wt / "docs" / "sub").mkdir(parents=True)
    os.mkfifo(wt / "docs" / "sub" / ".gitignore")
    (wt / "docs" / "sub" / "page.md").write_text("page\n")


# (hostile input, paths the commit must hold, paths it must not hold)
CASES: dict[str, tuple[Hostile, set[bytes], set[bytes]]] = {
    "symlink_to_secret": (_symlink_to_secret, {b"leak.txt"}, set()),
    "symlinked_directory": (_symlinked_directory, {b"leakdir"}, {b"leakdir/secret.txt"}),
    "symlink_loop": (_symlink_loop, {b"loop-a", b"loop-b", b"self"}, set()),
    "fifo_and_socket": (_fifo_and_socket, set(), {b"pipe", b"src/pipe.py", b"sock"}),
    "nested_git_directory": (
        _nested_git_directory,
        {b"sub/kept.txt"},
        {b"vendor/lib/lib.py", b".GIT/config", b"sub/.Git/HEAD", b"GIT~1/config", b"sub/.git./HEAD"},
    ),
    "rewritten_dot_git": (_rewritten_dot_git, set(), {b".git"}),
    "symlinked_dot_git": (_symlinked_dot_git, set(), {b".git", b".git/secret.txt"}),
    "gitattributes_filters_ident_export_subst": (
        _filters_and_ident,
        {b".gitattributes", b"notes.txt", b"id.c", b"sub.md"},
        set(),
    ),
    "gitmodules_ext_url": (_gitmodules_ext, {b".gitmodules", b"x/file"}, set()),
    "odd_names": (
        _odd_names,
        {b"new\nline.txt", b"bad-\xff\xfe.txt", b"-rf", b"--help", b"tab\tand space .txt", b'q"uote\\'},
        set(),
    ),
    "case_collisions": (_case_collisions, {b"Readme.md", b"readme.md", b"SRC/app.py", b"src/app.py"}, set()),
    "symlinked_gitmodules_gitignore_gitattributes": (
        _symlinked_special_files,
        set(),
        {b".gitmodules", b".gitattributes"},
    ),
    "fifo_ignore_files": (_fifo_ignore_file, {b"docs/sub/page.md"}, set()),
}


async def _pulse(client, user_repo: Path, pulse_id: str = "p1") -> Path:
    await client.workflow(user_repo)
    started = await client.call("start_pulse", StartPulse(run_id="wf1", pulse_id=pulse_id), PulseStarted)
    return Path(started.worktree_path)


async def _checkpoint(client, pulse_id: str = "p1") -> PulseCheckpointed:
    return await client.call(
        "checkpoint_pulse",
        CheckpointPulse(run_id="wf1", pulse_id=pulse_id, summary="feat(x): hostile content"),
        PulseCheckpointed,
    )


async def _diff(client, pulse_id: str = "p1") -> str:
    ref = await client.call("pulse_diff", PulseDiff(run_id="wf1", pulse_id=pulse_id), DiffArtifactRef)
    artifact = await client.call("get_diff_artifact", GetDiffArtifact(artifact_id=ref.artifact_id), DiffArtifact)
    return artifact.diff


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_hostile_worktree_checkpoints_correctly_and_runs_nothing(
    client, user_repo: Path, outside: Path, tmp_path: Path, case: str
) -> None:
    make, present, absent = CASES[case]
    wt = await _pulse(client, user_repo)
    marker = tmp_path / "marker"
    make(wt, outside, marker)
    (wt / "plain.txt").write_text("a plain change\n")  # so that every pulse has a commit to check

    checkpointed = await _checkpoint(client)
    diff = await _diff(client)

    tree = set(_tree(user_repo))
    assert b"plain.txt" in tree
    assert present <= tree, present - tree
    assert not (absent & tree), absent & tree
    assert not any(part.lower() == b".git" for path in tree for part in path.split(b"/"))
    assert SECRET.encode() not in _objects(user_repo)
    assert SECRET not in diff
    assert not marker.exists(), "a filter, textconv or ext:: command ran"
    assert checkpointed.commit == git(user_repo, "rev-parse", "autarch/wf-1")
    if case != "gitmodules_ext_url":
        # (fsck --strict flags the agent's `update = !cmd` as content; git never runs it from .gitmodules.)
        fsck(user_repo)
    if case == "gitattributes_filters_ident_export_subst":
        # Stored as written: no clean filter, no ident collapse, no export-subst expansion.
        assert git(user_repo, "show", "autarch/wf-1:id.c") == "/* $Id$ */"
        assert git(user_repo, "show", "autarch/wf-1:sub.md") == "$Format:%H$"
    if case == "symlink_to_secret":
        assert git(user_repo, "cat-file", "-p", "autarch/wf-1:leak.txt") == str(outside / "secret.txt")
    if case == "odd_names":
        assert '"a/new\\nline.txt"' in diff and '"a/bad-\\377\\376.txt"' in diff
    # The next pulse starts from the commit: the worktree is clean against it.
    await client.call("start_pulse", StartPulse(run_id="wf1", pulse_id="p2"), PulseStarted)


# --- sizes, depth and counts ------------------------------------------------------------------------------


@pytest.fixture
async def capped_client(nc, git_data_dir: Path):
    """The service with a 1 MiB file cap (``git_max_file_bytes``), so a 64 MiB sparse file is over it."""
    from autarch.services.git.commits import Identity
    from autarch.services.git.service import GitService

    from .conftest import GitClient

    service = GitService(nc, data_dir=git_data_dir, identity=Identity(), max_file_bytes=1 << 20)
    await service.start()
    try:
        yield GitClient(nc)
    finally:
        await service.stop()


async def test_a_file_over_the_cap_is_a_typed_error_that_changes_nothing(capped_client, user_repo: Path) -> None:
    wt = await _pulse(capped_client, user_repo)
    head = git(user_repo, "rev-parse", "autarch/wf-1")
    with open(wt / "huge.bin", "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB that take no disk
    (wt / "small.txt").write_text("small\n")
    with pytest.raises(RemoteError) as caught:
        await _checkpoint(capped_client)
    assert caught.value.code == "file_too_large"
    assert caught.value.reply.details["path"] == "huge.bin" and caught.value.reply.details["limit"] == 1 << 20
    assert git(user_repo, "rev-parse", "autarch/wf-1") == head  # nothing committed; the pulse still runs
    (wt / "huge.bin").unlink()
    checkpointed = await _checkpoint(capped_client)
    assert checkpointed.paths == ["small.txt"]


async def test_many_files_are_committed_and_deep_nesting_is_a_typed_error(client, user_repo: Path) -> None:
    wt = await _pulse(client, user_repo)
    head = git(user_repo, "rev-parse", "autarch/wf-1")
    deep = os.fsencode(wt)
    for _ in range(1500):  # deeper than Python's recursion limit, within PATH_MAX
        deep += b"/d"
        os.mkdir(deep)
    with open(deep + b"/bottom.txt", "wb") as f:
        f.write(b"bottom\n")
    with pytest.raises(RemoteError) as caught:
        await _checkpoint(client)
    assert caught.value.code == "path_too_deep"
    assert git(user_repo, "rev-parse", "autarch/wf-1") == head
    remove_tree(wt / "d")  # (shutil.rmtree would fail this deep)
    many = wt / "many"
    many.mkdir()
    for i in range(2000):
        (many / f"f{i:04}.txt").write_text(f"{i}\n")
    nested = wt / "/".join(["n"] * 400)
    nested.mkdir(parents=True)
    (nested / "ok.txt").write_text("ok\n")
    checkpointed = await _checkpoint(client)
    assert checkpointed.files_changed == 2001
    # A deep tree left in the worktree does not stop its removal.
    deep = os.fsencode(wt / "left-deep")
    os.mkdir(deep)
    for _ in range(1500):
        deep += b"/d"
        os.mkdir(deep)
    await client.call("remove_worktree", RemoveWorktree(run_id="wf1", force=True), WorktreeRemoved)
    assert not wt.exists()
    assert "/".join(["n"] * 400) + "/ok.txt" in checkpointed.paths
    fsck(user_repo)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a directory whatever its mode")
async def test_an_unreadable_directory_is_a_typed_error(client, user_repo: Path) -> None:
    wt = await _pulse(client, user_repo)
    (wt / "closed").mkdir()
    (wt / "closed" / "f").write_text("f\n")
    (wt / "closed").chmod(0)
    try:
        with pytest.raises(RemoteError) as caught:
            await _checkpoint(client)
        assert caught.value.code == "unreadable_path" and caught.value.reply.details["path"] == "closed"
    finally:
        (wt / "closed").chmod(0o755)


# --- the reset after a pulse, and the swarm's writes ----------------------------------------------------


async def test_the_reset_never_writes_through_a_link_where_a_directory_was(
    client, user_repo: Path, outside: Path
) -> None:
    from autarch.contracts.git import RecoveryCheckpoint, RecoveryCheckpointed

    wt = await _pulse(client, user_repo)
    # The agent swaps the tracked directory src/ for a link out of the worktree and ignores it.
    for name in ("app.py", "util.py"):
        (wt / "src" / name).unlink()
    (wt / "src").rmdir()
    (wt / "src").symlink_to(outside, target_is_directory=True)
    (wt / ".gitignore").write_text("src\n")
    await client.call(
        "recovery_checkpoint", RecoveryCheckpoint(run_id="wf1", pulse_id="p1", status="failed"),
        RecoveryCheckpointed,
    )
    # The reset to the workflow head brings src/ back as a directory, and writes nothing outside.
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (wt / "src").is_symlink() and (wt / "src" / "app.py").read_text() == "def main():\n    return 1\n"
    assert SECRET.encode() not in _objects(user_repo)


def _engine_with_worker(tmp_path: Path, repo: Path):
    from autarch.contracts.bead_git import BeginBead, OpenWorker
    from autarch.contracts.git import CreateWorkflowBranch, RegisterRepository
    from autarch.services.git.engine import GitEngine

    engine = GitEngine(data_dir=tmp_path / "engine-data")
    registered = engine.register_repository(RegisterRepository(path=str(repo), base_branch="main"))
    engine.create_workflow_branch(
        CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch="autarch/wf-1")
    )
    wt = Path(engine.open_worker(OpenWorker(workflow_id="wf1", worker="w1")).worktree_path)
    engine.begin_bead(BeginBead(workflow_id="wf1", worker="w1", bead_id="b1", attempt=1))
    return engine, wt


@pytest.mark.parametrize("shape", ["fifo", "link_to_secret", "pulse_is_a_link", "handoffs_is_a_link"])
def test_worker_files_replace_what_the_agent_left_and_never_write_through_it(
    tmp_path: Path, user_repo: Path, outside: Path, shape: str
) -> None:
    from autarch.contracts.bead_git import WriteWorkerFiles

    engine, wt = _engine_with_worker(tmp_path, user_repo)
    (wt / ".pulse" / "handoffs").mkdir(parents=True)
    target = wt / ".pulse" / "handoffs" / "b1.md"
    if shape == "fifo":
        os.mkfifo(target)  # opened for writing, it would block until a reader came
    elif shape == "link_to_secret":
        target.symlink_to(outside / "secret.txt")
    elif shape == "pulse_is_a_link":
        for p in (wt / ".pulse" / "handoffs", wt / ".pulse"):
            p.rmdir()
        (wt / ".pulse").symlink_to(outside, target_is_directory=True)
    else:
        (wt / ".pulse" / "handoffs").rmdir()
        (wt / ".pulse" / "handoffs").symlink_to(outside, target_is_directory=True)
    engine.write_worker_files(
        WriteWorkerFiles(workflow_id="wf1", worker="w1", files={".pulse/handoffs/b1.md": "# handoff\n"})
    )
    assert target.read_text() == "# handoff\n" and not target.is_symlink()
    assert not (wt / ".pulse").is_symlink() and not (wt / ".pulse" / "handoffs").is_symlink()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET + "\n"


def test_bead_files_are_never_written_through_a_link(tmp_path: Path, user_repo: Path, outside: Path) -> None:
    from autarch.contracts.bead_git import CommitBead
    from autarch.runtime.errors import ServiceFailure

    engine, wt = _engine_with_worker(tmp_path, user_repo)
    (wt / "docs").rename(wt / "docs-moved")
    (wt / "docs").symlink_to(outside, target_is_directory=True)
    (wt / "dotgit").symlink_to(wt / ".git")
    for rel in ("docs/guide.md", ".GIT/config", "sub/.git/HEAD"):
        with pytest.raises(ServiceFailure) as caught:
            engine.commit_bead(
                CommitBead(workflow_id="wf1", worker="w1", bead_id="b1", attempt=1, summary="x", files={rel: "x\n"})
            )
        assert caught.value.code == "bad_request"
    # A link at the name itself is replaced by the file, not written through.
    engine.commit_bead(
        CommitBead(workflow_id="wf1", worker="w1", bead_id="b1", attempt=1, summary="x", files={"dotgit": "x\n"})
    )
    assert (wt / ".git").read_text().startswith("gitdir: ")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
