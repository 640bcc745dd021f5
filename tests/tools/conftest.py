"""Fixtures of the tools tests: real directories, real git repositories, a real executor and service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from autarch.runtime.settings import Settings
from autarch.services.tools.executor import ToolExecutor
from autarch.services.tools.service import build_executor

from .helpers import Tools


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    path = tmp_path / "worktree"
    path.mkdir()
    return path


@pytest.fixture
def tool_settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=str(tmp_path / "data"), request_timeout=5.0, restart_grace=0.5)


@pytest.fixture
def executor(tool_settings: Settings) -> Iterator[ToolExecutor]:
    executor = build_executor(tool_settings, grep_workers=0)
    yield executor
    executor.close()


@pytest.fixture
def tools(executor: ToolExecutor, worktree: Path) -> Tools:
    return Tools(executor, worktree)


@pytest.fixture
async def nats_tools(nc: Any, tool_settings: Settings, worktree: Path) -> AsyncIterator[Tools]:
    """Tools whose forwarded commands go over the real NATS server."""
    executor = build_executor(tool_settings, nc=nc, grep_workers=0)
    yield Tools(executor, worktree)
    executor.close()
