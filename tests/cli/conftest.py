"""``autarch up`` with every agent service as its own process and the scripted model, for the CLI's tests.

One system for the package (starting it takes seconds); each test works on its own workflows and
repository. The scripted model plays the bundled demo, plus a ``controls`` script (selected with
``workflow new --script controls``) whose agents ask questions, ask for more time and think slowly, so
the user's controls (answer, approve-extension, stop, resume) have something to act on.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from autarch.cli.local.natsserver import free_port
from autarch.cli.main import main
from autarch.services.scripted_model import ScriptedModelServer
from autarch.services.scripted_model.scenario import bundled_scenario_path
from tests.system import System

SERVICES = "orchestrator,tools,git,agent_runner"

QUESTIONS = {"content": [{"type": "text", "text": "One thing first."}, {
    "type": "tool_use", "name": "ask_questions",
    "input": {"questions": [{"type": "single_select", "prompt": "Greet whom on an empty name?",
                             "options": ["world", "nobody"]}]}}]}
EXTENSION = {"content": [{"type": "tool_use", "name": "request_extension", "input": {
    "reason": "the module is bigger than it looked", "completed": ["read the README"],
    "remaining": ["read greeter/core.py"]}}]}
SLOW = {"content": [{"type": "text", "text": "Let me think about the plan very carefully. " * 12}], "delay_ms": 400}


def scenario() -> dict[str, Any]:
    doc = json.loads(bundled_scenario_path("demo").read_text())
    scripts = doc["scripts"]
    scripts["scoping:controls"] = [QUESTIONS, *scripts["scoping"]]
    scripts["research:controls"] = [EXTENSION, *scripts["research"]]
    scripts["plan:controls"] = [SLOW, SLOW, SLOW]
    return doc


@pytest.fixture(scope="package")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(scenario()) as server:
        yield server


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    data = tmp_path_factory.mktemp("cli") / "data"
    data.mkdir()
    env = {"AUTARCH_ANTHROPIC_BASE_URL": model.base_url, "AUTARCH_ANTHROPIC_API_KEY": "scripted",
           "AUTARCH_REQUEST_TIMEOUT": "30"}
    sys_ = System(data_dir=data, port=free_port(), nats_port=free_port(), services=SERVICES, extra_env=env)
    sys_.start(timeout=60)
    yield sys_
    if sys_.proc is not None:
        sys_.stop()


def make_repo(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    git = ["git", "-C", str(root), "-c", "user.name=Test", "-c", "user.email=test@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "initial"], check=True)
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", scenario()["files"])


class Cli:
    """``autarch …`` in this process against the package's system (the gateway found through run.json)."""

    def __init__(self, system: System, capsys: pytest.CaptureFixture[str]) -> None:
        self.system = system
        self.capsys = capsys
        self.http = httpx.Client(base_url=system.url, headers=system.headers, timeout=30)

    def __call__(self, *argv: str, code: int = 0) -> str:
        """Run the command; assert its exit code; its stdout (stderr when it failed)."""
        self.capsys.readouterr()
        got = main([*argv, "--data-dir", str(self.system.data_dir)])
        out, err = self.capsys.readouterr()
        assert got == code, f"autarch {' '.join(argv)} exited {got}\nstdout: {out}\nstderr: {err}"
        return out if code == 0 else err

    def view(self, workflow_id: str) -> dict[str, Any]:
        return self.http.get(f"/api/workflows/{workflow_id}").raise_for_status().json()

    def wait(self, workflow_id: str, until: Callable[[dict[str, Any]], bool], what: str,
             timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            view = self.view(workflow_id)
            if until(view):
                return view
            if time.monotonic() > deadline:
                log = self.system.log.read_text()[-6000:] if self.system.log else ""
                raise AssertionError(f"timed out waiting for {what}: {json.dumps(view, indent=1)}\n{log}")
            time.sleep(0.1)

    def wait_awaiting(self, workflow_id: str, stage: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait(workflow_id, lambda v: v["stage"] == stage and v["awaiting_approval"],
                         f"{stage} awaiting approval", timeout)

    def wait_halted(self, workflow_id: str, reason: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait(workflow_id, lambda v: v["status"] == "halted" and v["halt"]["reason"] == reason,
                         f"halt {reason}", timeout)


@pytest.fixture
def cli(system: System, capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    runner = Cli(system, capsys)
    yield runner
    runner.http.close()
