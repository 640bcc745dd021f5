"""Helpers of the tools tests: git repositories and a client that decodes tool results."""

from __future__ import annotations

import json
import os
import subprocess
import time
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


def processes_with(marker: str) -> list[int]:
    """Live processes anywhere on the machine whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{name}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != b"Z":
            found.append(int(name))
    return found


def wait_gone(marker: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


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
            role=role,  # type: ignore[arg-type]  # a test may name any role
            root=str(root or self.root),
            tool=tool,
            arguments={"reason": "test", **(arguments or {})},
            run_id=workflow_id,
        )
        return await self.executor.call(call)

    async def __call__(self, tool: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        result = await self.result(tool, arguments, **kwargs)
        return json.loads(result.content) if result.is_json else result.content
