"""``worktree_record``: where git keeps a worktree's repository, from the git service's records alone.

The tools service runs git on a worktree and opens a command's sandbox to git directories on this answer, so it
must never come from the worktree itself, whose ``.git`` file an agent can rewrite (docs/security.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autarch.contracts.bead_git import CloseWorker, OpenWorker
from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import CreateWorkflowBranch, GetWorktreeRecord, RegisterRepository, RemoveWorktree
from autarch.runtime.errors import ServiceFailure
from autarch.services.git.commits import Identity
from autarch.services.git.engine import GitEngine

from .gitcli import git, make_user_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_user_repo(tmp_path / "project")


@pytest.fixture
def engine(repo: Path, tmp_path: Path) -> GitEngine:
    engine = GitEngine(data_dir=tmp_path / "data", identity=Identity(author_name="A", author_email="a@b"))
    registered = engine.register_repository(RegisterRepository(path=str(repo), base_branch="main"))
    engine.create_workflow_branch(
        CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch="autarch/wf-1")
    )
    return engine


def record(engine: GitEngine, path: Path | str):
    return engine.worktree_record(GetWorktreeRecord(path=str(path)))


def test_a_workflow_and_a_worker_worktree_are_answered_from_the_records(engine: GitEngine, repo: Path):
    common = os.path.realpath(repo / ".git")
    workflow = record(engine, engine.worktrees_root / "wf1")
    assert (workflow.linked, workflow.run_id, workflow.worker) == (True, "wf1", None)
    assert (workflow.common_dir, workflow.git_dir) == (common, os.path.join(common, "worktrees", "wf1"))
    # What git itself says of the worktree is what the record says.
    assert git(Path(workflow.path), "rev-parse", "--absolute-git-dir") == workflow.git_dir

    worker_path = engine.open_worker(OpenWorker(workflow_id="wf1", worker="alice")).worktree_path
    worker = record(engine, worker_path)
    assert (worker.linked, worker.run_id, worker.worker) == (True, "wf1", "alice")
    assert git(Path(worker_path), "rev-parse", "--absolute-git-dir") == worker.git_dir

    # A rewritten, linked or missing .git changes nothing in the answer: the directory is never read.
    dot_git = Path(workflow.path) / ".git"
    dot_git.write_text("gitdir: /root\n")
    assert record(engine, workflow.path) == workflow
    dot_git.unlink()
    dot_git.symlink_to("/root")
    assert record(engine, workflow.path) == workflow

    engine.close_worker(CloseWorker(workflow_id="wf1", worker="alice"))
    with pytest.raises(ServiceFailure) as closed:
        record(engine, worker_path)
    assert closed.value.code == ErrorCode.NOT_FOUND


def test_a_registered_repository_is_answered_only_with_a_real_git_directory(engine: GitEngine, repo: Path,
                                                                              tmp_path: Path):
    own = record(engine, repo)
    assert (own.linked, own.git_dir, own.common_dir) == (False, os.path.realpath(repo / ".git"),
                                                          os.path.realpath(repo / ".git"))
    with pytest.raises(ServiceFailure) as unknown:
        record(engine, tmp_path)
    assert unknown.value.code == ErrorCode.NOT_FOUND


def test_a_removed_worktree_has_no_record(engine: GitEngine):
    path = engine.worktrees_root / "wf1"
    engine.remove_worktree(RemoveWorktree(run_id="wf1", force=True))
    with pytest.raises(ServiceFailure) as removed:
        record(engine, path)
    assert removed.value.code == ErrorCode.NOT_FOUND
