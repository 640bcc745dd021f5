"""Fixtures for the agent runner: a real tools service, the scripted model, a git repository, the runner."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import GetSession, SessionView, StartSession, TurnAccepted
from autarch.runtime.bus import connect
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.agent_runner.service import AgentRunner, open_runner
from autarch.services.scripted_model import ScriptedModelServer
from autarch.services.tools.service import start as start_tools

from .scenarios import SCENARIO

RUNNER = "agent_runner"


def git_repo(path: Path, files: dict[str, str]) -> Path:
    """A git repository at ``path`` with ``files`` committed."""
    path.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "HOME": str(path),
    }
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=path, check=True, env=env)
    return path


REPO_FILES = {
    "README.md": "# greeter\n\nA tiny greeting library.\n",
    "greeter/__init__.py": "",
    "greeter/core.py": 'def greet(name):\n    """Greet someone by name."""\n    return "Hello, " + name + "!"\n',
    "tests/test_core.py": (
        'from greeter.core import greet\n\n\ndef test_greet():\n    assert greet("Ada") == "Hello, Ada!"\n'
    ),
    "big.txt": "x" * 150_000 + "\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return git_repo(tmp_path / "repo", REPO_FILES)


@pytest.fixture(scope="package")
def scripted() -> Iterator[ScriptedModelServer]:
    """One scripted model for every test; each test picks its script with ``StartSession.script``."""
    with ScriptedModelServer(SCENARIO) as server:
        yield server


def runner_settings(data_dir: Path, scripted: ScriptedModelServer, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {
        "data_dir": str(data_dir),
        "anthropic_base_url": scripted.base_url,
        "model_max_retries": 3,
        "request_timeout": 5.0,
    }
    fields.update(overrides)
    return Settings(**fields)


# Package scope, not session: a tools service left subscribed would share the "tools" queue group with the
# tools tests' own service (and answer their calls from another store).
@pytest.fixture(scope="package")
def tools_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tools-data")


async def serve_tools(nats_url: str, data_dir: Path) -> AsyncIterator[Path]:
    """The real tools service, in-process, until the generator closes (store: ``<dir>/tools/sessions.sqlite3``)."""
    client = await connect(nats_url, name="tools")
    # No orchestrator here: forwarded tools (take_note, the review tools) must not wait long for one.
    stop = await start_tools(client, Settings(data_dir=str(data_dir), restart_grace=0.2))
    yield data_dir
    await stop()
    await client.drain()


@pytest.fixture(scope="package")
async def tools(nats_server, tools_data_dir: Path) -> AsyncIterator[Path]:
    """The real tools service, shared by the tests of this package."""
    async for data_dir in serve_tools(nats_server.url, tools_data_dir):
        yield data_dir


@pytest.fixture
async def runner(nc, data_dir: Path, scripted, tools) -> AsyncIterator[AgentRunner]:
    agent_runner, stop = await open_runner(nc, runner_settings(data_dir, scripted))
    yield agent_runner
    await stop()


async def start_session(
    nc,
    *,
    role: str,
    script: str,
    root: Path,
    kickoff: str = "Do the task.",
    workflow_id: str | None = None,
    **fields: Any,
) -> TurnAccepted:
    command = StartSession(
        session_id=str(uuid.uuid4()),
        role=role,  # type: ignore[arg-type]  # a test may name any role
        root=str(root),
        kickoff=kickoff,
        script=script,
        run_id=workflow_id or str(uuid.uuid4()),
        **fields,
    )
    return await request(nc, subjects.request(RUNNER, "start_session"), command, TurnAccepted)


async def get_session(nc, session_id: str) -> SessionView:
    return await request(nc, subjects.request(RUNNER, "get_session"), GetSession(session_id=session_id), SessionView)


async def wait_turn(nc, session_id: str, turn_id: str, *, timeout: float = 20.0) -> SessionView:
    """Poll until the turn has an outcome; returns the session view."""
    deadline = time.monotonic() + timeout
    while True:
        view = await get_session(nc, session_id)
        turn = next((t for t in view.turns if t.turn_id == turn_id), None)
        if turn is not None and turn.outcome is not None:
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"turn {turn_id} did not complete: {view}")
        await asyncio.sleep(0.02)
