"""A fork's branch: cut at a recorded commit of another branch rather than the base branch's head (issue 36)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import CreateWorkflowBranch, WorkflowBranchView
from autarch.runtime.errors import RemoteError

from .gitcli import fsck, git, repo_state


async def test_a_fork_branch_starts_at_the_given_commit_in_its_own_worktree(client, user_repo: Path):
    first = git(user_repo, "rev-parse", "main").strip()
    (user_repo / "later.txt").write_text("later\n")
    git(user_repo, "add", "later.txt")
    git(user_repo, "commit", "-q", "-m", "later")
    registered = await client.register(user_repo)
    view = await client.call("create_workflow_branch", CreateWorkflowBranch(
        run_id="fork1", repository_id=registered.repository_id, branch="autarch/fork-1", start_commit=first,
        base_commit=first), WorkflowBranchView)
    assert view.head == first and view.base_commit == first
    assert git(user_repo, "rev-parse", "autarch/fork-1").strip() == first
    worktree = Path(view.worktree_path)
    assert not (worktree / "later.txt").exists() and worktree.is_dir()
    assert git(worktree, "status", "--porcelain") == ""
    # Asked again (a retried fork), the same branch is answered and nothing moves.
    again = await client.call("create_workflow_branch", CreateWorkflowBranch(
        run_id="fork1", repository_id=registered.repository_id, branch="autarch/fork-1", start_commit=first,
        base_commit=first), WorkflowBranchView)
    assert again == view
    fsck(user_repo)


async def test_a_commit_the_repository_does_not_hold_is_not_found_and_changes_nothing(client, user_repo: Path):
    registered = await client.register(user_repo)
    before = repo_state(user_repo)
    with pytest.raises(RemoteError) as caught:
        await client.call("create_workflow_branch", CreateWorkflowBranch(
            run_id="fork2", repository_id=registered.repository_id, branch="autarch/fork-2",
            start_commit="0" * 40), WorkflowBranchView)
    assert caught.value.code == ErrorCode.NOT_FOUND and "0" * 40 in caught.value.message
    assert repo_state(user_repo) == before
