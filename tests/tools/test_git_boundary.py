"""The git trust boundary: nothing outside the sandbox takes a path, a config or a program from a worktree.

An agent's command can write anything in its worktree, so the linked worktree's ``.git`` file and whatever it
points to are the agent's. Each test is a hostile worktree against the real executor (or the real tools and git
services over NATS), with real repositories and real linked worktrees: the tools service's own git must never
run a program the worktree chose, and the sandbox must never grant a path the worktree named.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import (
    CreateWorkflowBranch,
    GetWorktreeRecord,
    RegisterRepository,
    RepositoryRegistered,
    WorkflowBranchView,
    WorktreeRecord,
)
from autarch.contracts.tools import ToolCall
from autarch.runtime.errors import RemoteError
from autarch.runtime.leases import LeaseGrant, LeaseTable
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.git.commits import Identity
from autarch.services.git.service import GitService
from autarch.services.tools import sandbox
from autarch.services.tools.executor import ToolExecutor
from autarch.services.tools.gitrecord import GIT_FILE_TAMPERED, GitRecords, NoGitRecord
from autarch.services.tools.gitstate import changed_paths, tracked_state
from autarch.services.tools.sandbox import SandboxPolicy, sandbox_environment
from autarch.services.tools.service import build_executor

from .helpers import Tools, git, make_repo

CAPS = sandbox.capabilities()
confined = pytest.mark.skipif(
    CAPS.landlock_abi < 1 or not CAPS.namespaces,
    reason="this kernel offers no Landlock or no user namespaces",
)


class Layout:
    """The data dir with its token, the user's repository, a linked worktree of it, a directory outside both."""

    def __init__(self, tmp: Path) -> None:
        self.data = tmp / "data"
        self.data.mkdir()
        self.token = self.data / "token"
        self.token.write_text("gateway-token-planted-4711\n")
        self.repo = make_repo(tmp / "user-repo", {"f": "x\n", "src/app.py": "app = 1\n", "run.sh": "echo\n"})
        self.worktree = self.data / "worktrees" / "wf-1"
        self.worktree.parent.mkdir()
        git(self.repo, "worktree", "add", "-q", "-b", "autarch/wf-1", str(self.worktree))
        self.dot_git = (self.worktree / ".git").read_bytes()
        self.outside = tmp / "outside"
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text("outside-secret-5150\n")
        self.marker = tmp / "filter-ran"

    def settings(self, **overrides: Any) -> Settings:
        return Settings(data_dir=str(self.data), request_timeout=5.0, restart_grace=0.5, **overrides)

    def evil_command(self) -> str:
        """The issue's first reproduction: a separate git dir inside the worktree whose config runs a program."""
        return (
            "mkdir -p evil; rm -f .git; git init -q --separate-git-dir=$PWD/evil/g .; "
            "git -c user.name=a -c user.email=a@b add f; git -c user.name=a -c user.email=a@b commit -qm x; "
            f"git config -f evil/g/config filter.x.clean \"sh -c 'id > {self.marker}; cat ../../token >> "
            f"{self.marker}; cat'\"; "
            "echo 'f filter=x' > .gitattributes; sleep 1.1; echo y > f"
        )


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def tools_for(layout: Layout, *, trusted: bool = True, **overrides: Any) -> Iterator[Tools]:
    executor: ToolExecutor = build_executor(layout.settings(**overrides), grep_workers=0)
    if trusted:  # what `autarch tools call --repository` does: the repository's own .git is the record
        executor.git_records.trust_repository(str(layout.repo))
    try:
        yield Tools(executor, layout.worktree)
    finally:
        executor.close()


@pytest.fixture
def tools(layout: Layout) -> Iterator[Tools]:
    yield from tools_for(layout)


@pytest.fixture
def unconfined(layout: Layout) -> Iterator[Tools]:
    """``sandbox = "off"``: a command can rewrite .git, so only the checks around it stand."""
    yield from tools_for(layout, sandbox="off")


def plant_evil_git(layout: Layout) -> None:
    """What a command outside a read-only mount would leave: .git naming a repository whose config runs a
    program, and a change that makes git hash f through that filter."""
    evil = layout.worktree / "evil"
    git(layout.worktree, "init", "-q", f"--separate-git-dir={evil / 'g'}", str(evil / "wt"))
    git(evil / "wt", "config", "filter.x.clean", f"sh -c 'id > {layout.marker}; cat'")
    (layout.worktree / ".git").write_text(f"gitdir: {evil / 'g'}\n")
    (layout.worktree / ".gitattributes").write_text("f filter=x\n")


# --- reproduction 1: the tools service's own git ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["on", "off"])
async def test_a_preflight_command_cannot_make_the_services_git_run_its_filter(layout: Layout, mode: str):
    if mode == "on" and (CAPS.landlock_abi < 1 or not CAPS.namespaces):
        pytest.skip("no Landlock or no user namespaces")
    for tools in tools_for(layout, sandbox=mode):
        value = await tools("shell", {"command": layout.evil_command()}, role="preflight")
    assert not layout.marker.exists(), layout.marker.read_text()
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git
    if mode == "on":  # the .git file is read-only in the sandbox: the command could not replace it
        assert "code" not in value, value
        assert "Read-only file system" in value["stderr"] or "Device or resource busy" in value["stderr"], value
    else:  # unconfined, it could: the change is named and undone before the guard's git runs
        assert value["code"] == GIT_FILE_TAMPERED, value
        assert "restored from Autarch's records" in value["error"]
    # The guard still saw the change to f through the recorded repository.
    assert "Preflight must not modify tracked files" in value["error"] and "f" in value["error"], value


async def test_the_guards_git_reads_the_recorded_repository_not_the_dot_git_file(layout: Layout):
    records = GitRecords(repositories=(str(layout.repo),))
    record = await records.lookup(str(layout.worktree))
    host = await records.host_git(record, sandbox_environment(SandboxPolicy(), home=None))
    before = await tracked_state(host)
    plant_evil_git(layout)
    await asyncio.sleep(1.1)  # past the index's timestamp: git must hash f, through its filter if it had one
    (layout.worktree / "f").write_text("y\n")
    after = await tracked_state(host)
    head, changed = await changed_paths(host)
    assert not layout.marker.exists()
    assert after.head == before.head == git(layout.repo, "rev-parse", "autarch/wf-1").strip() == head
    assert "f" in after.dirty and "evil/wt/.git" not in changed and "evil/" in {p[:5] for p in changed}


async def test_only_the_users_own_filters_run(layout: Layout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # git-lfs and the like are defined in the user's global config: those run. One defined only in the
    # repository's own config does not (a .gitattributes may choose only among the user's drivers).
    home = tmp_path / "home"
    home.mkdir()
    user_marker, repo_marker = tmp_path / "user-filter-ran", tmp_path / "repo-filter-ran"
    (home / ".gitconfig").write_text(f"[filter \"mine\"]\n\tclean = \"sh -c 'echo ran >> {user_marker}; cat'\"\n")
    monkeypatch.setenv("HOME", str(home))
    git(layout.repo, "config", "filter.theirs.clean", f"sh -c 'echo ran >> {repo_marker}; cat'")
    (layout.worktree / ".gitattributes").write_text("f filter=mine\nsrc/app.py filter=theirs\n")
    records = GitRecords(repositories=(str(layout.repo),))
    record = await records.lookup(str(layout.worktree))
    host = await records.host_git(record, sandbox_environment(SandboxPolicy(), home=None))
    await asyncio.sleep(1.1)
    (layout.worktree / "f").write_text("y\n")
    (layout.worktree / "src" / "app.py").write_text("app = 2\n")
    await tracked_state(host)
    assert user_marker.exists()
    assert not repo_marker.exists()


# --- reproduction 2: the sandbox policy ----------------------------------------------------------------------


@confined
async def test_a_rewritten_dot_git_never_opens_a_directory_to_the_next_command(tools: Tools, layout: Layout):
    secret = layout.outside / "secret.txt"
    first = await tools("shell", {"command": f"printf 'gitdir: {layout.outside}\\n' > .git; cat {secret}"})
    second = await tools("shell", {"command": f"cat {secret}"})
    for value in (first, second):
        assert "outside-secret" not in value["stdout"], value
        assert value["exit_code"] != 0, value
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git


async def test_the_policy_never_reads_its_git_dirs_from_the_dot_git_file(layout: Layout):
    (layout.worktree / ".git").write_text(f"gitdir: {layout.outside}\n")
    records = GitRecords(repositories=(str(layout.repo),))
    record = await records.lookup(str(layout.worktree))
    for git_record in (record, None):
        if CAPS.landlock_abi < 1:
            pytest.skip("the Landlock rules are what is checked here")
        launch = sandbox.prepare_launch(SandboxPolicy(data_dir=str(layout.data)), "true", root=str(layout.worktree),
                                        git=git_record)
        try:
            paths = [path for path, _ in launch.spec["rules"]]  # type: ignore[index]  # a sandboxed launch has one
            assert not any(path.startswith(str(layout.outside)) for path in paths), paths
            if git_record is not None:
                assert str(layout.repo / ".git") in paths
            else:
                assert str(layout.repo / ".git") not in paths
        finally:
            launch.cleanup()


@confined
async def test_an_agent_written_dot_git_is_restored_and_then_grants_nothing(tools: Tools, layout: Layout):
    # A .git changed outside a command (an unconfined tool, an earlier sandbox-off run) is caught before the next
    # command: the call fails with the code, the command does not run, and the file is the record's again.
    (layout.worktree / ".git").write_text(f"gitdir: {layout.outside}\n")
    value = await tools("shell", {"command": f"cat {layout.outside}/secret.txt > leaked.txt"})
    assert value["code"] == GIT_FILE_TAMPERED and value["error"].startswith("Command not run:"), value
    assert not (layout.worktree / "leaked.txt").exists()
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git
    again = await tools("shell", {"command": f"cat {layout.outside}/secret.txt; git status --short; git log -1 "
                                  "--format=%s"})
    assert "outside-secret" not in again["stdout"] and "initial" in again["stdout"], again


# --- the .git file: checked, restored, read-only ------------------------------------------------------------


def _symlink(layout: Layout) -> None:
    os.unlink(layout.worktree / ".git")
    os.symlink(layout.outside, layout.worktree / ".git")


def _directory(layout: Layout) -> None:
    os.unlink(layout.worktree / ".git")
    (layout.worktree / ".git").mkdir()
    (layout.worktree / ".git" / "config").write_text("[core]\n\tfsmonitor = touch /tmp/x\n")


def _deleted(layout: Layout) -> None:
    os.unlink(layout.worktree / ".git")


def _rewritten(layout: Layout) -> None:
    (layout.worktree / ".git").write_text("gitdir: /root\n")


@pytest.mark.parametrize("tamper", [_symlink, _directory, _deleted, _rewritten])
async def test_a_tampered_dot_git_is_a_typed_error_and_is_restored_first(unconfined: Tools, layout: Layout,
                                                                         tamper: Any):
    tamper(layout)
    value = await unconfined("shell", {"command": "touch ran"})
    assert value["success"] is False and value["code"] == GIT_FILE_TAMPERED, value
    assert not (layout.worktree / "ran").exists()
    assert not (layout.worktree / ".git").is_symlink()
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git
    assert git(layout.worktree, "rev-parse", "--abbrev-ref", "HEAD").strip() == "autarch/wf-1"
    assert os.listdir(layout.outside) == ["secret.txt"]  # a link's target is never written through


async def test_a_command_that_changes_dot_git_gets_the_code_and_leaves_the_record(unconfined: Tools, layout: Layout):
    value = await unconfined("shell", {"command": "echo hi; printf 'gitdir: /root\\n' > .git"})
    assert value["code"] == GIT_FILE_TAMPERED and value["stdout"] == "hi\n", value
    assert value["exit_code"] == 0
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git


@confined
async def test_the_dot_git_file_is_read_only_in_the_sandbox(tools: Tools, layout: Layout):
    value = await tools("shell", {"command": (
        "echo 'gitdir: /root' > .git; rm -f .git; mv .git moved; ln -sf /root .git; "
        "git status --short | head -3; cat .git"
    )})
    assert "code" not in value, value
    assert value["stdout"].endswith(layout.dot_git.decode()), value
    assert not (layout.worktree / "moved").exists()
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git


async def test_a_linked_worktree_without_a_record_has_no_host_git(layout: Layout):
    for tools in tools_for(layout, trusted=False, sandbox="off"):
        value = await tools("shell", {"command": "true"}, role="preflight")
    assert value["success"] is False
    assert "its .git file alone is not trusted" in value["error"], value


# --- the swarm's lease guard ---------------------------------------------------------------------------------


async def test_the_lease_guard_runs_on_the_record_and_restores_dot_git(nc: Client, layout: Layout):
    table = await LeaseTable.open(nc)
    scope = str(uuid.uuid4())
    assert isinstance(await table.acquire(scope, "w2", ["run.sh"], bead_id="b2", ttl=60), LeaseGrant)
    executor = build_executor(layout.settings(sandbox="off"), nc=nc, grep_workers=0)
    executor.git_records.trust_repository(str(layout.repo))
    executor.leases = table
    try:
        command = (
            f"mkdir -p evil; git init -q --separate-git-dir=$PWD/evil/g evil/wt; "
            f"git -C evil/wt config filter.x.clean \"sh -c 'id > {layout.marker}; cat'\"; "
            "printf 'gitdir: '$PWD/evil/g'\\n' > .git; echo 'run.sh filter=x' > .gitattributes; sleep 1.1; "
            "echo 'echo pwned' > run.sh"
        )
        result = await executor.call(ToolCall(
            session_id="w1", tool_call_id=uuid.uuid4().hex, role="pulsing", root=str(layout.worktree), tool="shell",
            arguments={"reason": "test", "command": command}, run_id=scope, lease_holder="w1",
        ))
    finally:
        executor.close()
    value = json.loads(result.content)
    assert value["code"] == GIT_FILE_TAMPERED, value
    assert not layout.marker.exists()
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git
    assert value["restored"] == ["run.sh"], value
    assert (layout.worktree / "run.sh").read_text() == "echo\n"


# --- the git service's record, end to end ---------------------------------------------------------------------


@pytest.fixture
async def git_service(nc: Client, layout: Layout) -> AsyncIterator[GitService]:
    service = GitService(nc, data_dir=layout.data, identity=Identity(author_name="A", author_email="a@b"))
    await service.start()
    yield service
    await service.stop()


async def _ask(nc: Client, verb: str, payload: Any, reply: type) -> Any:
    return await request(nc, subjects.request("git", verb), payload, reply, timeout=20)


async def test_the_git_service_records_its_worktrees_and_the_tools_follow_them(
    nc: Client, layout: Layout, git_service: GitService
):
    registered = await _ask(nc, "register_repository", RegisterRepository(path=str(layout.repo)), RepositoryRegistered)
    view = await _ask(nc, "create_workflow_branch", CreateWorkflowBranch(
        run_id="wf2", repository_id=registered.repository_id, branch="autarch/wf-2"), WorkflowBranchView)
    worktree = Path(view.worktree_path)
    record = await _ask(nc, "worktree_record", GetWorktreeRecord(path=str(worktree)), WorktreeRecord)
    common = os.path.realpath(layout.repo / ".git")
    assert (record.linked, record.common_dir, record.run_id) == (True, common, "wf2")
    assert record.git_dir == os.path.join(common, "worktrees", "wf2")
    (worktree / ".git").write_text("gitdir: /root\n")  # the answer never depends on the file
    again = await _ask(nc, "worktree_record", GetWorktreeRecord(path=str(worktree)), WorktreeRecord)
    assert again == record
    own = await _ask(nc, "worktree_record", GetWorktreeRecord(path=str(layout.repo)), WorktreeRecord)
    assert (own.linked, own.git_dir) == (False, common)
    with pytest.raises(RemoteError) as missing:
        await _ask(nc, "worktree_record", GetWorktreeRecord(path=str(layout.outside)), WorktreeRecord)
    assert missing.value.code == ErrorCode.NOT_FOUND

    # The tools service asks for it: the rewritten .git is caught and restored from the git service's record.
    executor = build_executor(layout.settings(), nc=nc, grep_workers=0)
    try:
        tools = Tools(executor, worktree)
        value = await tools("shell", {"command": "true"}, role="preflight")
        assert value["code"] == GIT_FILE_TAMPERED, value
        assert (worktree / ".git").read_text() == f"gitdir: {record.git_dir}\n"
        if CAPS.landlock_abi >= 1 and CAPS.namespaces:
            done = await tools("shell", {"command": "git status --short; git log -1 --format=%s"}, role="preflight")
            assert done["exit_code"] == 0 and "initial" in done["stdout"], done
    finally:
        executor.close()


# --- the first reproduction, as a person runs it -----------------------------------------------------


@pytest.mark.parametrize("repository", [True, False])
def test_the_cli_preflight_never_runs_the_worktrees_filter(layout: Layout, repository: bool):
    named = ["--repository", str(layout.repo)] if repository else []
    done = subprocess.run(
        [sys.executable, "-m", "autarch.cli.main", "tools", "call", "shell", "--root", str(layout.worktree),
         "--role", "preflight", "--data-dir", str(layout.data), *named,
         json.dumps({"reason": "r", "command": layout.evil_command(), "timeoutSeconds": 60})],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, done
    assert not layout.marker.exists(), layout.marker.read_text()
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git
    if not repository:  # no record: the guard's git is not run at all, and neither is the command
        assert "its .git file alone is not trusted" in done.stdout, done.stdout


async def test_the_file_tools_never_write_dot_git(tools: Tools, layout: Layout):
    # Already held by the sensitive-path rule (sensitivity.py: .git and anything under it); kept here as part of
    # the boundary: no tool but a confined command reaches .git, and a command only through a read-only mount.
    (layout.worktree / "link").symlink_to(".git")
    for path in (".git", "link", ".git/config"):
        value = await tools("write_file", {"path": path, "content": "gitdir: /root\n"})
        assert value.get("blocked") is True, (path, value)
    edited = await tools("edit_file", {"path": ".git", "oldString": "gitdir", "newString": "x"})
    assert edited.get("blocked") is True, edited
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git


async def test_a_submodule_in_the_worktree_is_never_looked_into(layout: Layout):
    # A submodule's checkout is the agent's, .git and config included: the guards' status does not enter it.
    head = git(layout.repo, "rev-parse", "HEAD").strip()
    git(layout.repo, "update-index", "--add", "--cacheinfo", f"160000,{head},sub")
    git(layout.repo, "commit", "-qm", "a submodule")
    git(layout.worktree, "reset", "-q", "--hard", git(layout.repo, "rev-parse", "HEAD").strip())
    sub = layout.worktree / "sub"
    sub.mkdir(exist_ok=True)
    git(sub, "init", "-q")
    (sub / "g").write_text("x\n")
    git(sub, "add", "g")
    git(sub, "commit", "-qm", "x")
    git(sub, "config", "core.fsmonitor", f"sh -c 'id > {layout.marker}'")
    git(sub, "config", "filter.x.clean", f"sh -c 'id > {layout.marker}; cat'")
    (sub / ".gitattributes").write_text("g filter=x\n")
    await asyncio.sleep(1.1)
    (sub / "g").write_text("y\n")
    records = GitRecords(repositories=(str(layout.repo),))
    host = await records.host_git(await records.lookup(str(layout.worktree)),
                                  sandbox_environment(SandboxPolicy(), home=None))
    await tracked_state(host)
    await changed_paths(host)
    assert not layout.marker.exists()


async def test_a_plain_roots_linked_dot_git_is_no_record(tmp_path: Path):
    # A root's own .git counts only as a real directory: a link could lead anywhere a command chose.
    real = make_repo(tmp_path / "real", {"a": "1\n"})
    root = tmp_path / "root"
    root.mkdir()
    (root / ".git").symlink_to(real / ".git")
    with pytest.raises(NoGitRecord):
        await GitRecords().lookup(str(root))
    assert (await GitRecords().lookup(str(real))).source == "own .git directory"


@pytest.mark.skipif(CAPS.landlock_abi < 1, reason="no Landlock on this kernel")
async def test_with_landlock_alone_the_checks_hold_the_dot_git_file(layout: Layout, monkeypatch: pytest.MonkeyPatch):
    # Without user namespaces nothing can be mounted read-only: the command can rewrite .git, and the check after
    # it puts it back before anything else runs; the next command's sandbox reads nothing the file named.
    monkeypatch.setattr(sandbox, "capabilities", lambda: sandbox.Capabilities(CAPS.landlock_abi, False, "forbidden"))
    for tools in tools_for(layout):
        changed = await tools("shell", {"command": f"printf 'gitdir: {layout.outside}\\n' > .git"})
        after = await tools("shell", {"command": f"cat {layout.outside}/secret.txt; git log -1 --format=%s"})
    assert changed["code"] == GIT_FILE_TAMPERED, changed
    assert (layout.worktree / ".git").read_bytes() == layout.dot_git
    assert "outside-secret" not in after["stdout"] and after["stdout"].endswith("initial\n"), after


def test_bubblewrap_binds_the_recorded_git_dirs_and_the_dot_git_file_read_only(layout: Layout):
    (layout.worktree / ".git").write_text(f"gitdir: {layout.outside}\n")  # never read: the record decides
    record = asyncio.run(GitRecords(repositories=(str(layout.repo),)).lookup(str(layout.worktree)))
    (layout.worktree / ".git").write_bytes(layout.dot_git)
    launch = sandbox._bubblewrap_launch("/usr/bin/bwrap", SandboxPolicy(), ["/bin/true"], str(layout.worktree),
                                        record)
    try:
        argv = launch.argv
        pairs = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1)]
        assert ("--ro-bind", record.common_dir) in pairs and ("--ro-bind", record.dot_git) in pairs
        assert pairs.index(("--ro-bind", record.dot_git)) > pairs.index(("--bind", str(layout.worktree)))
        assert not any(str(layout.outside) in arg for arg in argv)
    finally:
        launch.cleanup()


async def test_the_file_tools_take_info_exclude_from_the_record_not_the_dot_git_file(tools: Tools, layout: Layout,
                                                                                      tmp_path: Path):
    # The repository's own info/exclude hides one file. An agent then points .git at another repository (outside
    # the worktree) whose administrative directory names this worktree back and whose info/exclude hides another
    # file: the walks of list_directory, glob_search and grep must still apply the recorded repository's rules.
    (layout.repo / ".git" / "info").mkdir(exist_ok=True)
    (layout.repo / ".git" / "info" / "exclude").write_text("hidden-by-repo.txt\n")
    for name in ("hidden-by-repo.txt", "hidden-by-other.txt"):
        (layout.worktree / name).write_text("needle\n")
    other = make_repo(tmp_path / "other", {"o": "1\n"})
    admin = other / ".git" / "worktrees" / "wf-1"
    admin.mkdir(parents=True)
    (admin / "gitdir").write_text(f"{layout.worktree / '.git'}\n")
    (admin / "commondir").write_text("../..\n")
    (admin / "HEAD").write_text("ref: refs/heads/main\n")
    (other / ".git" / "info").mkdir(exist_ok=True)
    (other / ".git" / "info" / "exclude").write_text("hidden-by-other.txt\n")

    async def seen() -> tuple[set[str], set[str], set[str]]:
        listed = {entry["path"] for entry in await tools("list_directory", {"path": "."})}
        globbed = set(await tools("glob_search", {"pattern": "*.txt"}))
        grepped = {hit["file_path"] for hit in (await tools("grep", {"pattern": "needle"}))["results"]}
        return listed, globbed, grepped

    before = await seen()
    for found in before:
        assert "hidden-by-other.txt" in found and "hidden-by-repo.txt" not in found, before
    (layout.worktree / ".git").write_text(f"gitdir: {admin}\n")
    assert await seen() == before
