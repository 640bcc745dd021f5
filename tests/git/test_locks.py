"""Operations on one repository are serialised; different repositories proceed in parallel."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

from autarch.contracts.git import CheckpointPulse, PulseCheckpointed, PulseStarted, StartPulse

from .gitcli import fsck, git, make_user_repo


async def test_a_held_repository_lock_blocks_only_that_repository(client, git_service, tmp_path: Path):
    repo_a = make_user_repo(tmp_path / "a")
    repo_b = make_user_repo(tmp_path / "b")
    a = await client.workflow(repo_a, workflow_id="wfa", branch="autarch/a")
    await client.workflow(repo_b, workflow_id="wfb", branch="autarch/b")
    # Another service instance sharing the data dir is in the middle of an operation on A.
    fd = os.open(git_service.engine.store.lock_path(a.repository_id), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        blocked = asyncio.create_task(
            client.call("start_pulse", StartPulse(run_id="wfa", pulse_id="p1"), PulseStarted)
        )
        await client.call("start_pulse", StartPulse(run_id="wfb", pulse_id="p1"), PulseStarted)
        await client.call(
            "checkpoint_pulse", CheckpointPulse(run_id="wfb", pulse_id="p1", summary="feat: b"), PulseCheckpointed
        )
        assert not blocked.done()  # B went ahead while A waited
        assert git(repo_a, "branch", "--list", "autarch/a.pulse-*") == ""
    finally:
        os.close(fd)
    started = await blocked
    assert started.pulse_branch == "autarch/a.pulse-p1"


async def test_concurrent_requests_on_one_repository_do_not_interleave(client, tmp_path: Path):
    repo = make_user_repo(tmp_path / "repo")
    views = [await client.workflow(repo, workflow_id=f"w{i}", branch=f"autarch/w{i}") for i in range(4)]

    async def run_pulses(i: int) -> None:
        worktree = Path(views[i].worktree_path)
        for n in range(3):
            await client.call("start_pulse", StartPulse(run_id=f"w{i}", pulse_id=f"p{n}"), PulseStarted)
            (worktree / f"file{n}.txt").write_text(f"{i} {n}\n")
            await client.call(
                "checkpoint_pulse",
                CheckpointPulse(run_id=f"w{i}", pulse_id=f"p{n}", summary=f"feat: w{i} p{n}"),
                PulseCheckpointed,
            )

    await asyncio.gather(*(run_pulses(i) for i in range(4)))
    for i in range(4):
        subjects = git(repo, "log", "--format=%s", f"autarch/w{i}").splitlines()
        assert subjects == [f"feat: w{i} p2", f"feat: w{i} p1", f"feat: w{i} p0", "initial"]
        assert git(Path(views[i].worktree_path), "status", "--porcelain") == ""
    fsck(repo)
