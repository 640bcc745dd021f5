"""Every service as its own process (``autarch up``) with the scripted model, for whole-workflow tests.

One system per package (starting it takes seconds); each test picks its scenario with
``model.use(...)`` on the shared in-process scripted model server and works in its own repository.
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
from autarch.services.scripted_model import ScriptedModelServer
from autarch.services.scripted_model.scenario import bundled_scenario_path
from tests.system import System

SERVICES = "orchestrator,tools,git,agent_runner"


def demo_scenario() -> dict[str, Any]:
    """The bundled demo scenario as a dict, for tests to copy and change."""
    return json.loads(bundled_scenario_path("demo").read_text())


@pytest.fixture(scope="package")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer("demo") as server:
        yield server


def scripted_system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer, name: str, *,
                    services: str = SERVICES, **env: str) -> Iterator[System]:
    """The ``services`` as processes (``autarch up``), their agents answered by ``model``; ``env`` adds settings."""
    data = tmp_path_factory.mktemp(name) / "data"
    data.mkdir()
    env = {"AUTARCH_ANTHROPIC_BASE_URL": model.base_url, "AUTARCH_ANTHROPIC_API_KEY": "scripted", **env}
    sys_ = System(data_dir=data, port=free_port(), nats_port=free_port(), services=services, extra_env=env)
    sys_.start(timeout=60)
    yield sys_
    if sys_.proc is not None:
        sys_.stop()


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    # One fix round per workflow, so that test_review_fixes reaches the limit after one round.
    yield from scripted_system(tmp_path_factory, model, "workflows", AUTARCH_PULSE_MAX_TURNS="4",
                               AUTARCH_AGENT_MAX_STEPS="10", AUTARCH_PREFLIGHT_TIMEOUT="6",
                               AUTARCH_REQUEST_TIMEOUT="30", AUTARCH_REVIEW_FIX_ROUNDS="1")


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repository on ``main`` holding ``files`` in one commit."""
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


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


class Client:
    """The gateway over HTTP, with waiting helpers."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.http = httpx.Client(base_url=system.url, headers=system.headers, timeout=30)

    def create(self, repo: Path, **fields: Any) -> str:
        body = {"title": "Greet the world", "request": "Make greet() greet the world when the name is empty",
                "repo": str(repo), **fields}
        reply = self.http.post("/api/workflows", json=body)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["id"])

    def get(self, workflow_id: str) -> dict[str, Any]:
        return self.http.get(f"/api/workflows/{workflow_id}").raise_for_status().json()

    def artifacts(self, workflow_id: str) -> dict[str, Any]:
        return self.http.get(f"/api/workflows/{workflow_id}/artifacts").raise_for_status().json()

    def post(self, workflow_id: str, action: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return self.http.post(f"/api/workflows/{workflow_id}/{action}", json=body)

    def wait(self, workflow_id: str, until: Callable[[dict[str, Any]], bool], what: str,
             timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        view = self.get(workflow_id)
        while time.monotonic() < deadline:
            if until(view):
                return view
            time.sleep(0.1)
            view = self.get(workflow_id)
        log = self.system.log.read_text()[-6000:] if self.system.log else ""
        raise AssertionError(f"timed out waiting for {what}; workflow is {json.dumps(view, indent=1)}\n{log}")

    def wait_awaiting(self, workflow_id: str, stage: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait(workflow_id, lambda v: v["stage"] == stage and v["awaiting_approval"],
                         f"{stage} awaiting approval", timeout)

    def wait_halted(self, workflow_id: str, reason: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait(workflow_id, lambda v: v["status"] == "halted" and v["halt"]["reason"] == reason,
                         f"halt {reason}", timeout)

    def approve(self, workflow_id: str, **body: Any) -> dict[str, Any]:
        reply = self.post(workflow_id, "approve", body or None)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def events(self, workflow_id: str, *, until: str | Callable[[list[dict]], bool] = "workflow:completed",
               timeout: float = 20) -> list[dict]:
        """Every event of the workflow from the start of the stream, up to the first ``until`` event (or until
        ``until(events so far)`` is true)."""
        done = until if callable(until) else (lambda found: found[-1]["type"] == until)
        found: list[dict] = []
        params = {"workflow": workflow_id, "since": "0", "deltas": "false"}
        with self.http.stream("GET", "/api/events", params=params, timeout=timeout) as reply:
            name = None
            for line in reply.iter_lines():
                if line.startswith("event:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and name:
                    found.append({"type": name, **json.loads(line.split(":", 1)[1])})
                    if done(found):
                        return found
        return found


NOISE = {"workflow:session_assigned", "workflow:note_taken", "workflow:review_comment_added"}
"""Workflow events that depend on how agents work, left out of the stage sequences tests assert."""


TO_EXECUTION = ["workflow:created", *["workflow:approval_needed", "workflow:stage_changed"] * 3,
                "preflight:started", "preflight:completed"]
"""The stage events from creation through the three approved cards and preflight."""
PULSE = ["pulse:started", "pulse:completed"]
REVIEW_TO_DONE = ["workflow:stage_changed", "workflow:approval_needed", "workflow:stage_changed", "workflow:completed"]
"""Execution → review, the review card approved, review → done."""


def workflow_events(client: Client, workflow_id: str, *, until: str = "workflow:completed") -> list[str]:
    """The names of the workflow's stage, preflight and pulse events, in stream order, up to ``until``."""
    return [e["type"] for e in client.events(workflow_id, until=until)
            if e["type"].split(":")[0] in ("workflow", "preflight", "pulse") and e["type"] not in NOISE]


def start(client: Client, model: ScriptedModelServer, tmp_path: Path, scenario: dict[str, Any],
          **fields: Any) -> tuple[str, Path]:
    """A workflow on a fresh repository holding the scenario's files, the model answering from ``scenario``."""
    model.use(scenario)
    repo = make_repo(tmp_path / "repo", scenario["files"])
    return client.create(repo, **fields), repo


def approve_stages(client: Client, workflow_id: str, *stages: str) -> None:
    for stage in stages or ("scoping", "research", "planning"):
        client.wait_awaiting(workflow_id, stage)
        client.approve(workflow_id)


def finish(client: Client, workflow_id: str) -> dict[str, Any]:
    """Approve the review card and wait until the workflow is done and its worktree removed."""
    client.wait_awaiting(workflow_id, "review", timeout=90)
    client.approve(workflow_id)
    return client.wait(workflow_id, lambda v: v["status"] == "done" and v["worktree_path"] is None, "done")


def branch_log(repo: Path, branch: str) -> list[str]:
    """The subjects of the commits on ``branch`` on top of ``main``, newest first."""
    return git(repo, "log", "--format=%s", f"main..{branch}").splitlines()


def assert_replay_equals_live(client: Client, wid: str) -> None:
    """``autarch replay`` rebuilds the workflow, its pulses and cards from the event log alone."""
    result = client.system.cli("replay", wid)
    assert result.returncode == 0, result.stderr
    replayed = json.loads(result.stdout)
    live, cards = client.get(wid), client.artifacts(wid)
    assert replayed["workflow"] == live
    assert replayed["artifacts"] == cards
    assert replayed["events_applied"] == replayed["events_total"] == live["version"]


@pytest.fixture
def client(system: System) -> Iterator[Client]:
    c = Client(system)
    yield c
    c.http.close()
