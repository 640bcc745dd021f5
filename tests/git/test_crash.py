"""Crash safety: the service is SIGKILLed between the steps of an operation, restarted, retried.

The service runs as a real process (``python -m autarch.services.git``). The fault-injection
hook ``AUTARCH_GIT_CRASH_AFTER=<step>`` makes it SIGKILL itself right after that step; a fresh
process on the same data dir must finish the operation on start-up, the retried request must
answer with the first outcome, and git must find one commit per pulse, no pulse branch left
half-moved, a clean worktree and a sound repository.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autarch.contracts import subjects
from autarch.contracts.git import (
    CheckpointPulse,
    CreateWorkflowBranch,
    GetWorkflowBranch,
    PulseCheckpointed,
    RecoveryCheckpoint,
    RecoveryCheckpointed,
    RegisterRepository,
    StartPulse,
    WorkflowBranchView,
)
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.services.git.engine import GitEngine

from .gitcli import fsck, git, make_user_repo


class ServiceProcess:
    """``python -m autarch.services.git`` on the test nats-server and a given data dir."""

    def __init__(self, *, nats_url: str, data_dir: Path, log: Path, crash_after: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTARCH_")}
        env.update(AUTARCH_NATS_URL=nats_url, AUTARCH_DATA_DIR=str(data_dir), AUTARCH_LOG_LEVEL="INFO")
        if crash_after:
            env["AUTARCH_GIT_CRASH_AFTER"] = crash_after
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "autarch.services.git"], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    async def wait_killed(self, timeout: float = 30.0) -> int:
        for _ in range(int(timeout / 0.05)):
            if self.process.poll() is not None:
                return self.process.returncode
            await asyncio.sleep(0.05)
        self.process.kill()
        raise AssertionError("the service did not crash at the injected step")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


async def call(nc, verb: str, payload, reply_type, *, timeout: float = 20.0):
    # retry_unavailable: the process may still be starting (no responders yet).
    return await request(nc, subjects.request("git", verb), payload, reply_type, timeout=timeout, retry_unavailable=20)


async def crash_during(nc, service: ServiceProcess, verb: str, payload, reply_type) -> None:
    attempt = asyncio.create_task(call(nc, verb, payload, reply_type, timeout=60))
    assert await service.wait_killed() == -signal.SIGKILL
    attempt.cancel()
    with pytest.raises((asyncio.CancelledError, RemoteError)):
        await attempt


@pytest.fixture
def setup(tmp_path: Path):
    """A repository with a workflow branch and a running pulse with changes, made in process."""
    repo = make_user_repo(tmp_path / "project")
    data_dir = tmp_path / "data"
    engine = GitEngine(data_dir=data_dir)
    registered = engine.register_repository(RegisterRepository(path=str(repo)))
    view = engine.create_workflow_branch(
        CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch="autarch/wf-1")
    )
    engine.start_pulse(StartPulse(run_id="wf1", pulse_id="p1"))
    worktree = Path(view.worktree_path)
    (worktree / "src/app.py").write_text("def main():\n    return 42\n")
    (worktree / "src/added.py").write_text("ADDED = 1\n")
    (worktree / "docs/guide.md").unlink()
    return repo, data_dir, view, worktree


def assert_converged(repo: Path, worktree: Path, base: str, commit: str) -> None:
    assert git(repo, "rev-parse", "autarch/wf-1") == commit
    assert git(repo, "rev-list", "--count", f"{base}..autarch/wf-1") == "1"  # exactly one commit for the pulse
    assert git(repo, "rev-parse", f"{commit}^") == base
    assert git(repo, "branch", "--list", "autarch/wf-1.pulse-*") == ""
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1"
    assert git(worktree, "status", "--porcelain") == ""
    assert git(repo, "show", "--name-status", "--format=", commit).splitlines() == [
        "D\tdocs/guide.md",
        "A\tsrc/added.py",
        "M\tsrc/app.py",
    ]
    assert (worktree / "src/app.py").read_text() == "def main():\n    return 42\n"
    fsck(repo)


@pytest.mark.parametrize("step", ["commit", "pulse_branch", "fast_forward", "head", "delete_branch", "reset"])
async def test_checkpoint_killed_after_each_step_converges(nc, nats_server, setup, tmp_path: Path, step: str):
    repo, data_dir, view, worktree = setup
    user_status = git(repo, "status", "--porcelain")
    log = tmp_path / "service.log"
    checkpoint = CheckpointPulse(run_id="wf1", pulse_id="p1", summary="feat(app): answer 42")

    crashing = ServiceProcess(nats_url=nats_server.url, data_dir=data_dir, log=log, crash_after=step)
    await crash_during(nc, crashing, "checkpoint_pulse", checkpoint, PulseCheckpointed)
    if step == "fast_forward":
        # A kill can also strike mid-write: leave the lock files such a kill would leave behind.
        (repo / ".git/refs/heads/autarch/wf-1.pulse-p1.lock").write_text("")
        (repo / ".git/worktrees/wf1/index.lock").write_text("")

    restarted = ServiceProcess(nats_url=nats_server.url, data_dir=data_dir, log=log)
    try:
        # The restarted service finishes the journaled checkpoint before it serves anything.
        state = await call(nc, "get_workflow_branch", GetWorkflowBranch(run_id="wf1"), WorkflowBranchView)
        assert state.active_pulse is None and state.pulses[0].state == "succeeded"
        assert_converged(repo, worktree, view.base_commit, state.head)
        result = await call(nc, "checkpoint_pulse", checkpoint, PulseCheckpointed)
        again = await call(nc, "checkpoint_pulse", checkpoint, PulseCheckpointed)
    finally:
        restarted.stop()
    assert again == result and result.commit == state.head and result.files_changed == 3
    assert_converged(repo, worktree, view.base_commit, result.commit)
    assert git(repo, "log", "-1", "--format=%s", "autarch/wf-1") == "feat(app): answer 42"
    assert git(repo, "status", "--porcelain") == user_status
    assert "finished the interrupted checkpoint of workflow wf1" in log.read_text()


@pytest.mark.parametrize("step", ["commit", "pulse_branch", "head", "reset"])
async def test_recovery_checkpoint_killed_after_each_step_converges(nc, nats_server, setup, tmp_path: Path, step):
    repo, data_dir, view, worktree = setup
    recovery = RecoveryCheckpoint(run_id="wf1", pulse_id="p1", status="failed", reason="killed")
    crashing = ServiceProcess(nats_url=nats_server.url, data_dir=data_dir, log=tmp_path / "s.log", crash_after=step)
    await crash_during(nc, crashing, "recovery_checkpoint", recovery, RecoveryCheckpointed)
    restarted = ServiceProcess(nats_url=nats_server.url, data_dir=data_dir, log=tmp_path / "s.log")
    try:
        result = await call(nc, "recovery_checkpoint", recovery, RecoveryCheckpointed)
    finally:
        restarted.stop()
    assert result.is_recovery_checkpoint
    assert git(repo, "rev-parse", "autarch/wf-1.pulse-p1") == result.commit
    assert git(repo, "rev-parse", "autarch/wf-1") == view.base_commit
    assert git(repo, "rev-parse", f"{result.commit}^") == view.base_commit
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1"
    assert git(worktree, "status", "--porcelain") == ""
    assert not (worktree / "src/added.py").exists()
    fsck(repo)


@pytest.mark.parametrize("step", ["branch", "worktree"])
async def test_create_workflow_branch_killed_after_each_step_is_retried_cleanly(
    nc, nats_server, tmp_path: Path, step: str
):
    repo = make_user_repo(tmp_path / "project")
    data_dir = tmp_path / "data"
    repository_id = GitEngine(data_dir=data_dir).register_repository(RegisterRepository(path=str(repo))).repository_id
    create = CreateWorkflowBranch(run_id="wf1", repository_id=repository_id, branch="autarch/wf-1")
    crashing = ServiceProcess(nats_url=nats_server.url, data_dir=data_dir, log=tmp_path / "s.log", crash_after=step)
    await crash_during(nc, crashing, "create_workflow_branch", create, WorkflowBranchView)
    restarted = ServiceProcess(nats_url=nats_server.url, data_dir=data_dir, log=tmp_path / "s.log")
    try:
        view = await call(nc, "create_workflow_branch", create, WorkflowBranchView)
    finally:
        restarted.stop()
    worktree = Path(view.worktree_path)
    assert view.head == git(repo, "rev-parse", "main")
    assert f"worktree {worktree}\n" in git(repo, "worktree", "list", "--porcelain") + "\n"
    assert git(worktree, "status", "--porcelain") == ""
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1"
    fsck(repo)


class Killed(BaseException):
    """Stands for SIGKILL in the middle of a write."""


def test_lock_files_a_killed_writer_left_do_not_block_the_next_operations(tmp_path: Path, monkeypatch):
    """A process SIGKILLed inside a ref or HEAD write leaves ``<file>.lock`` behind: the next operation, which holds
    the repository's lock, knows it is a dead writer's and goes on (dulwich would refuse: ``FileLocked``)."""
    repo = make_user_repo(tmp_path / "project")
    engine = GitEngine(data_dir=tmp_path / "data")
    registered = engine.register_repository(RegisterRepository(path=str(repo)))
    view = engine.create_workflow_branch(
        CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch="autarch/wf-1")
    )
    heads = repo / ".git" / "refs" / "heads" / "autarch"
    admin = Path(git(Path(view.worktree_path), "rev-parse", "--absolute-git-dir"))

    def killed_while_creating(repo_, ref, *args, **kwargs):  # the lock is taken, then the process dies
        (heads / "wf-1.pulse-p1.lock").write_bytes(b"")
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr("autarch.services.git.engine.create_branch", killed_while_creating)
        with pytest.raises(Killed):
            engine.start_pulse(StartPulse(run_id="wf1", pulse_id="p1"))
    (admin / "HEAD.lock").write_bytes(b"")
    restarted = GitEngine(data_dir=tmp_path / "data")
    restarted.start_pulse(StartPulse(run_id="wf1", pulse_id="p1"))  # the retried request
    assert git(Path(view.worktree_path), "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1.pulse-p1"

    (Path(view.worktree_path) / "src/app.py").write_text("def main():\n    return 42\n")
    (heads / "wf-1.lock").write_bytes(b"")  # killed while moving the workflow branch
    (heads / "wf-1.pulse-p1.lock").write_bytes(b"")
    (admin / "index.lock").write_bytes(b"")
    done = restarted.checkpoint_pulse(CheckpointPulse(run_id="wf1", pulse_id="p1", summary="feat(app): answer 42"))
    assert git(repo, "rev-parse", "autarch/wf-1") == done.commit
    assert not list(heads.glob("*.lock")) and not (admin / "index.lock").exists()
    fsck(repo)


def test_a_branch_creation_killed_while_it_held_the_ref_lock_is_finished_by_the_retry(tmp_path: Path, monkeypatch):
    """Seen in the random-SIGKILL fault test: the git service died inside ``create_branch`` with
    ``refs/heads/<branch>.lock`` taken, and every retry of ``create_workflow_branch`` failed with ``FileLocked``,
    halting the workflow."""
    repo = make_user_repo(tmp_path / "project")
    engine = GitEngine(data_dir=tmp_path / "data")
    registered = engine.register_repository(RegisterRepository(path=str(repo)))
    heads = repo / ".git" / "refs" / "heads" / "autarch"
    command = CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch="autarch/wf-1")

    def killed_while_creating(repo_, ref, *args, **kwargs):  # the lock is taken, then the process dies
        heads.mkdir(parents=True, exist_ok=True)
        (heads / "wf-1.lock").write_bytes(b"")
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr("autarch.services.git.engine.create_branch", killed_while_creating)
        with pytest.raises(Killed):
            engine.create_workflow_branch(command)
    view = GitEngine(data_dir=tmp_path / "data").create_workflow_branch(command)  # the retried request
    assert git(repo, "rev-parse", "autarch/wf-1") == git(repo, "rev-parse", "main")
    assert git(Path(view.worktree_path), "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1"
    assert not (heads / "wf-1.lock").exists()
    fsck(repo)
