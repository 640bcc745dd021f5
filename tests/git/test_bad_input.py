"""Bad input gets a typed error and changes nothing: refs, HEAD, status, worktrees, objects, index."""

from __future__ import annotations

from pathlib import Path

import pytest

from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import (
    CheckpointPulse,
    CreateWorkflowBranch,
    GitErrorCode,
    ModifiedTrackedFiles,
    PulseCheckpointed,
    PulseStarted,
    RegisterRepository,
    RemoveWorktree,
    RepositoryRegistered,
    StartPulse,
    TrackedChanges,
    WorkflowBranchView,
    WorktreeRemoved,
)
from autarch.runtime.errors import RemoteError

from .gitcli import git, repo_state


async def expect_error(client, code: str, verb: str, payload, reply_type=WorkflowBranchView) -> RemoteError:
    with pytest.raises(RemoteError) as caught:
        await client.call(verb, payload, reply_type)
    assert caught.value.code == code, caught.value.message
    return caught.value


async def test_not_a_repository(client, tmp_path: Path, user_repo: Path, git_data_dir: Path):
    plain = tmp_path / "plain"
    plain.mkdir()
    before = repo_state(user_repo)
    for path in (plain, tmp_path / "missing", user_repo / "src", user_repo / "README.md"):
        error = await expect_error(
            client, GitErrorCode.NOT_A_REPOSITORY, "register_repository", RegisterRepository(path=str(path)),
            RepositoryRegistered,
        )  # fmt: skip
        assert str(path) in error.message
    assert repo_state(user_repo) == before
    assert list((git_data_dir / "git" / "repositories").iterdir()) == []
    assert list(plain.iterdir()) == []


async def test_missing_base_branch(client, user_repo: Path, git_data_dir: Path):
    before = repo_state(user_repo)
    await expect_error(
        client,
        GitErrorCode.BASE_BRANCH_MISSING,
        "register_repository",
        RegisterRepository(path=str(user_repo), base_branch="develop"),
        RepositoryRegistered,
    )
    registered = await client.register(user_repo)
    after_register = repo_state(user_repo)
    assert after_register == before
    await expect_error(
        client,
        GitErrorCode.BASE_BRANCH_MISSING,
        "create_workflow_branch",
        CreateWorkflowBranch(
            run_id="wf1", repository_id=registered.repository_id, branch="autarch/x", base_branch="develop"
        ),
    )
    assert repo_state(user_repo) == before
    assert not (git_data_dir / "worktrees" / "wf1").exists()


@pytest.mark.parametrize(
    "name", ["a..b", "has space", "-dash", "end.", "end/", "x.lock", "a//b", ".hidden/x", "x@{1}", "a~b", "a:b", "HEAD"]
)
async def test_illegal_branch_name(client, user_repo: Path, name: str):
    registered = await client.register(user_repo)
    before = repo_state(user_repo)
    error = await expect_error(
        client,
        GitErrorCode.INVALID_BRANCH_NAME,
        "create_workflow_branch",
        CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch=name),
    )
    assert error.reply.details["branch"] == name
    assert repo_state(user_repo) == before


@pytest.mark.parametrize("name", ["main", "feature", "main/child"])
async def test_existing_branch_is_never_overwritten(client, user_repo: Path, name: str):
    registered = await client.register(user_repo)
    before = repo_state(user_repo)
    error = await expect_error(
        client,
        GitErrorCode.BRANCH_EXISTS,
        "create_workflow_branch",
        CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch=name),
    )
    assert error.reply.details["existing"] in ("refs/heads/main", "refs/heads/feature")
    assert repo_state(user_repo) == before


async def test_a_second_workflow_cannot_take_a_workflow_branch(client, user_repo: Path):
    view = await client.workflow(user_repo)
    before = repo_state(user_repo)
    await expect_error(
        client,
        GitErrorCode.BRANCH_EXISTS,
        "create_workflow_branch",
        CreateWorkflowBranch(run_id="wf2", repository_id=view.repository_id, branch="autarch/wf-1"),
    )
    # The same workflow asking for another branch is a conflict, asking again for its own is fine.
    await expect_error(
        client,
        ErrorCode.CONFLICT,
        "create_workflow_branch",
        CreateWorkflowBranch(run_id="wf1", repository_id=view.repository_id, branch="autarch/other"),
    )
    assert await client.workflow(user_repo) == view
    assert repo_state(user_repo) == before


async def test_dirty_worktree_where_a_clean_one_is_required(client, user_repo: Path):
    view = await client.workflow(user_repo)
    worktree = Path(view.worktree_path)
    (worktree / "src/app.py").write_text("preflight touched this\n")
    before = repo_state(user_repo)
    worktree_status = git(worktree, "status", "--porcelain")
    error = await expect_error(
        client, GitErrorCode.DIRTY_WORKTREE, "start_pulse", StartPulse(run_id="wf1", pulse_id="p1"), PulseStarted
    )
    assert error.reply.details["files"] == ["src/app.py"]
    await expect_error(
        client, GitErrorCode.DIRTY_WORKTREE, "remove_worktree", RemoveWorktree(run_id="wf1"), WorktreeRemoved
    )
    assert repo_state(user_repo) == before
    assert git(worktree, "status", "--porcelain") == worktree_status
    assert (worktree / "src/app.py").read_text() == "preflight touched this\n"
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1"
    report = await client.call("modified_tracked_files", ModifiedTrackedFiles(run_id="wf1"), TrackedChanges)
    assert not report.clean


async def test_non_fast_forward_checkpoint(client, user_repo: Path):
    view = await client.workflow(user_repo)
    worktree = Path(view.worktree_path)
    await client.call("start_pulse", StartPulse(run_id="wf1", pulse_id="p1"), PulseStarted)
    (worktree / "src/app.py").write_text("the pulse's work\n")
    # The workflow branch moves under the running pulse to a commit that is not its base.
    tree = git(user_repo, "rev-parse", "main^{tree}")
    elsewhere = git(user_repo, "commit-tree", tree, "-p", view.base_commit, "-m", "chore: moved elsewhere")
    git(user_repo, "update-ref", "refs/heads/autarch/wf-1", elsewhere)
    before = repo_state(user_repo)
    worktree_status = git(worktree, "status", "--porcelain")
    error = await expect_error(
        client,
        GitErrorCode.NOT_FAST_FORWARD,
        "checkpoint_pulse",
        CheckpointPulse(run_id="wf1", pulse_id="p1", summary="feat: lost race"),
        PulseCheckpointed,
    )
    assert error.reply.details == {"workflow_head": elsewhere, "pulse_base": view.base_commit}
    assert repo_state(user_repo) == before  # no ref moved, no object written
    assert git(user_repo, "rev-parse", "autarch/wf-1.pulse-p1") == view.base_commit
    assert git(worktree, "status", "--porcelain") == worktree_status  # the work is still there


async def test_pulse_sequencing_errors(client, user_repo: Path):
    await client.workflow(user_repo)
    await client.call("start_pulse", StartPulse(run_id="wf1", pulse_id="p1"), PulseStarted)
    before = repo_state(user_repo)
    await expect_error(
        client, GitErrorCode.PULSE_IN_PROGRESS, "start_pulse", StartPulse(run_id="wf1", pulse_id="p2"),
        PulseStarted,
    )  # fmt: skip
    await expect_error(
        client,
        GitErrorCode.NO_ACTIVE_PULSE,
        "checkpoint_pulse",
        CheckpointPulse(run_id="wf1", pulse_id="p2", summary="feat: not running"),
        PulseCheckpointed,
    )
    await expect_error(
        client, GitErrorCode.PULSE_IN_PROGRESS, "remove_worktree", RemoveWorktree(run_id="wf1"), WorktreeRemoved
    )
    await expect_error(
        client, ErrorCode.NOT_FOUND, "start_pulse", StartPulse(run_id="nope", pulse_id="p1"), PulseStarted
    )
    assert repo_state(user_repo) == before
    await client.call(
        "checkpoint_pulse", CheckpointPulse(run_id="wf1", pulse_id="p1", summary="feat: one"), PulseCheckpointed
    )
    after = repo_state(user_repo)
    # An ended pulse's id cannot be started again.
    await expect_error(
        client, GitErrorCode.PULSE_IN_PROGRESS, "start_pulse", StartPulse(run_id="wf1", pulse_id="p1"),
        PulseStarted,
    )  # fmt: skip
    assert repo_state(user_repo) == after


@pytest.mark.parametrize(
    "payload",
    [
        b'{"run_id": "wf1", "pulse_id": "p1", "summary": "no conventional type"}',
        b'{"run_id": "wf1", "pulse_id": "p1", "summary": "feat: two\\nlines"}',
        b'{"run_id": "wf1", "pulse_id": "p1", "summary": "feat: x", "co_author": "no email"}',
        b'{"run_id": "../escape", "pulse_id": "p1", "summary": "feat: x"}',
        b'{"run_id": "wf1", "pulse_id": "a b", "summary": "feat: x"}',
    ],
)
async def test_malformed_commands_are_bad_requests(nc, client, user_repo: Path, payload: bytes):
    await client.workflow(user_repo)
    await client.call("start_pulse", StartPulse(run_id="wf1", pulse_id="p1"), PulseStarted)
    before = repo_state(user_repo)
    msg = await nc.request("autarch.svc.git.checkpoint_pulse", payload, timeout=5)
    assert msg.headers["Autarch-Error"] == ErrorCode.BAD_REQUEST
    assert repo_state(user_repo) == before
