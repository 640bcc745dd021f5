"""Helpers of the tools tests: git repositories and a client that decodes tool results."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

from autarch.contracts.tools import ToolCall, ToolResult
from autarch.services.tools.executor import ToolExecutor


def git(root: Path, *args: str) -> str:
    """Run git in ``root`` (with a fixed identity) and return its stdout."""
    env_args = ["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *env_args, *args], cwd=root, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repository with ``files`` committed on ``main``."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


class Tools:
    """Calls tools through a real :class:`ToolExecutor` and decodes what the model would see."""

    def __init__(self, executor: ToolExecutor, root: Path) -> None:
        self.executor = executor
        self.root = root

    async def result(
        self,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        role: str = "pulsing",
        session: str = "session-1",
        call_id: str | None = None,
        workflow_id: str | None = None,
        root: Path | None = None,
    ) -> ToolResult:
        call = ToolCall(
            session_id=session,
            tool_call_id=call_id or uuid.uuid4().hex,
            role=role,  # type: ignore[arg-type]
            root=str(root or self.root),
            tool=tool,
            arguments={"reason": "test", **(arguments or {})},
            workflow_id=workflow_id,
        )
        return await self.executor.call(call)

    async def __call__(self, tool: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        result = await self.result(tool, arguments, **kwargs)
        return json.loads(result.content) if result.is_json else result.content
