"""Fixtures of the git service tests: real repositories made with the git CLI, a real service.

Every assertion about a repository goes through the git command line, so "understood by git"
is what is tested, not what our own code reads back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.git import CreateWorkflowBranch, RegisterRepository, RepositoryRegistered, WorkflowBranchView
from autarch.runtime.requests import request
from autarch.services.git.commits import Identity
from autarch.services.git.service import GitService

from .gitcli import make_user_repo

T = TypeVar("T")


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    return make_user_repo(tmp_path / "project")


@dataclass
class GitClient:
    """Typed requests to the git service."""

    nc: Client

    async def call(self, verb: str, payload: Any, reply_type: type[T], *, timeout: float = 20.0) -> T:
        return await request(self.nc, subjects.request("git", verb), payload, reply_type, timeout=timeout)

    async def register(self, path: Path, base_branch: str = "main") -> RepositoryRegistered:
        return await self.call(
            "register_repository", RegisterRepository(path=str(path), base_branch=base_branch), RepositoryRegistered
        )

    async def workflow(self, repo: Path, workflow_id: str = "wf1", branch: str = "autarch/wf-1") -> WorkflowBranchView:
        registered = await self.register(repo)
        return await self.call(
            "create_workflow_branch",
            CreateWorkflowBranch(run_id=workflow_id, repository_id=registered.repository_id, branch=branch),
            WorkflowBranchView,
        )


@pytest.fixture
def git_data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "autarch-data"
    path.mkdir()
    return path


@pytest.fixture
async def git_service(nc: Client, git_data_dir: Path) -> AsyncIterator[GitService]:
    """The git service, in process, answering on the session's nats-server."""
    service = GitService(
        nc, data_dir=git_data_dir, identity=Identity(author_name="Autarch", author_email="autarch@localhost")
    )
    await service.start()
    yield service
    await service.stop()


@pytest.fixture
def client(nc: Client, git_service: GitService) -> GitClient:
    return GitClient(nc)
