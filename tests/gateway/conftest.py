"""The gateway in-process (uvicorn on a free port) over the session's real nats-server.

Behind it: the real agent runner and tools service with the scripted model (sessions), and, for the
workflow controls, a stand-in orchestrator that answers only ``stop_workflow``, ``resume_workflow``,
``approve_extension`` and ``answer_questions`` with canned replies and records what it was sent (the
gateway's job is the HTTP side: validation, the command it sends, the status of each error code).
Everything is package-scoped: a service left running would answer another package's requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import uvicorn
from litestar import Litestar

from autarch.cli.local.natsserver import free_port
from autarch.contracts.execution import AnswerQuestions, ApproveExtension, ResumeWorkflow, StopWorkflow
from autarch.contracts.workflows import ListWorkflows, WorkflowList, WorkflowView
from autarch.gateway.app import create_app
from autarch.gateway.sse import server_send_kept
from autarch.runtime.bus import connect
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.micro import TypedService
from autarch.runtime.settings import Settings
from autarch.services.agent_runner.service import open_runner
from autarch.services.scripted_model import ScriptedModelServer, load_scenario
from autarch.services.tools.service import start as start_tools

REQUEST_TIMEOUT = 2.0


@dataclass
class Gateway:
    url: str
    token: str
    data_dir: str = ""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=15, **kwargs)


async def serve_gateway(settings: Settings, app: Litestar | None = None) -> AsyncIterator[Gateway]:
    """The Litestar app (``app``, or one made from ``settings``) under uvicorn as ``python -m autarch.gateway``
    serves it, in this event loop, until the generator closes."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(server_send_kept(app or create_app(settings)), host="127.0.0.1",
                                           port=port, log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        if task.done() or time.monotonic() > deadline:
            raise RuntimeError(f"gateway did not start: {task.exception() if task.done() else 'timeout'}")
        await asyncio.sleep(0.02)
    data = Path(settings.data_dir)
    yield Gateway(url=f"http://127.0.0.1:{port}", token=(data / "token").read_text().strip(), data_dir=str(data))
    server.should_exit = True
    await task


@pytest.fixture(scope="package")
async def gateway(nats_server, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    """The Litestar app under uvicorn, in this event loop (so tests must use an async HTTP client)."""
    data = tmp_path_factory.mktemp("gateway-data")
    settings = Settings(data_dir=str(data), nats_url=nats_server.url, request_timeout=REQUEST_TIMEOUT)
    async for served in serve_gateway(settings):
        yield served


# --- a stand-in orchestrator for the workflow controls ----------------------------------------------------

KNOWN = "11111111-1111-4111-8111-111111111111"
"""A workflow the stand-in knows: every control succeeds."""
NOT_HALTED = "22222222-2222-4222-8222-222222222222"
"""Answers ``not_halted``."""
WRONG_HALT = "33333333-3333-4333-8333-333333333333"
"""Answers ``wrong_halt``."""
SLOW = "44444444-4444-4444-8444-444444444444"
"""Answers after the gateway's request timeout."""
BROKEN = "55555555-5555-4555-8555-555555555555"
"""Answers with a code the gateway does not know."""
ECHO = "66666666-6666-4666-8666-666666666666"
"""Answers with the error code given as the stop's reason."""


def workflow_view(workflow_id: str, **over: Any) -> WorkflowView:
    now = datetime.now(UTC)
    fields: dict[str, Any] = dict(id=workflow_id, title="JWT", request="add JWT", repo="/r", base_branch="main",
                                  stage="execution", awaiting_approval=False, created_at=now, updated_at=now,
                                  version=7, path="full")
    fields.update(over)
    return WorkflowView(**fields)


@dataclass
class StandInOrchestrator:
    received: list[Any] = field(default_factory=list)

    async def answer(self, command: Any) -> WorkflowView:
        self.received.append(command)
        wf = command.workflow_id
        if wf == NOT_HALTED:
            raise ServiceFailure("not_halted", f"workflow {wf} is not halted", {"status": "active"})
        if wf == WRONG_HALT:
            raise ServiceFailure("wrong_halt", f"workflow {wf} waits for answers, not a resume")
        if wf == SLOW:
            await asyncio.sleep(REQUEST_TIMEOUT + 1)
        if wf == ECHO:
            raise ServiceFailure(command.reason, "as you asked")
        if wf == BROKEN:
            raise ServiceFailure("surprise", "a code nobody mapped")
        if wf != KNOWN:
            raise ServiceFailure.not_found(f"no workflow {wf}", workflow_id=wf)
        status = "halted" if isinstance(command, StopWorkflow) else "active"
        return workflow_view(wf, status=status)


@contextlib.asynccontextmanager
async def stand_in_orchestrator(nats_url: str, verbs: Iterable[tuple[str, type]],
                                answer: Callable[[Any], Awaitable[Any]], what: str, *,
                                epic: str | None = None) -> AsyncIterator[None]:
    """An orchestrator answering ``verbs`` with ``answer`` (which records what it was sent); with ``epic``, it
    also lists that one workflow (the CLI finds an epic given as a prefix of its id that way)."""
    client = await connect(nats_url, name=f"stand-in-{what}-orchestrator")
    service = TypedService(client, name="orchestrator", description=f"stand-in for the {what} tests")
    for verb, kind in verbs:
        service.endpoint(verb, kind, answer)
    if epic is not None:
        listed = WorkflowList(items=[workflow_view(epic)], total=1)

        async def workflows(_: ListWorkflows) -> WorkflowList:
            return listed

        service.endpoint("list_workflows", ListWorkflows, workflows)
    await service.start()
    yield
    await service.stop()
    await client.drain()


def assert_error(reply: Any, status: int, code: str) -> dict[str, Any]:
    """The reply is the one error shape, with this status and code, and a message."""
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert set(body) == {"code", "message", "details"} and body["code"] == code and body["message"]
    return body


@pytest.fixture
async def orchestrator(nats_server) -> AsyncIterator[StandInOrchestrator]:
    stand_in = StandInOrchestrator()
    verbs = (("stop_workflow", StopWorkflow), ("resume_workflow", ResumeWorkflow),
             ("approve_extension", ApproveExtension), ("answer_questions", AnswerQuestions))
    async with stand_in_orchestrator(nats_server.url, verbs, stand_in.answer, "gateway"):
        yield stand_in


# --- the real agent runner, tools service and scripted model ----------------------------------------------


def scenario() -> dict[str, Any]:
    """The bundled demo, plus a discussion that answers a follow-up and one whose first reply is slow."""
    demo = load_scenario("demo")
    doc: dict[str, Any] = {"description": "demo + gateway session scripts", "files": dict(demo.files),
                           "scripts": {}}
    for key, steps in demo.scripts.items():
        doc["scripts"][key] = [msgspec.to_builtins(s) for s in steps]
    doc["scripts"]["discussion:followup"] = [
        *doc["scripts"]["discussion"],
        "You asked again: it greets people by name.",
    ]
    doc["scripts"]["discussion:slow"] = [
        {"content": [{"type": "text", "text": "Let me think about that for a while. " * 20}], "delay_ms": 100},
        "And a quick answer to the next one.",
    ]
    return doc


@pytest.fixture(scope="package")
def scripted() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(scenario()) as server:
        yield server


@pytest.fixture(scope="package")
async def tools(nats_server, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[None]:
    client = await connect(nats_server.url, name="tools")
    stop = await start_tools(client, Settings(data_dir=str(tmp_path_factory.mktemp("tools-data")), restart_grace=0.2))
    yield
    await stop()
    await client.drain()


@pytest.fixture(scope="package")
async def runner(nats_server, tools, scripted, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[None]:
    client = await connect(nats_server.url, name="agent-runner")
    settings = Settings(data_dir=str(tmp_path_factory.mktemp("runner-data")), anthropic_base_url=scripted.base_url,
                        model_max_retries=1, request_timeout=5.0)
    _, stop = await open_runner(client, settings)
    yield
    await stop()
    await client.drain()


def git_repo(path: Path, files: dict[str, str]) -> Path:
    """A git repository at ``path`` with ``files`` committed."""
    path.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(path)}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=path, check=True, env=env)
    return path


@pytest.fixture(scope="package")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return git_repo(tmp_path_factory.mktemp("greeter") / "repo", dict(load_scenario("demo").files))


async def wait_turn(http: httpx.AsyncClient, session_id: str, turn_id: str, *, timeout: float = 20) -> dict:
    """Poll ``GET /api/sessions/{id}`` until the turn has an outcome; the session view."""
    deadline = time.monotonic() + timeout
    while True:
        r = await http.get(f"/api/sessions/{session_id}")
        assert r.status_code == 200, r.text
        view = r.json()
        turn = next((t for t in view["turns"] if t["turn_id"] == turn_id), None)
        if turn is not None and turn["outcome"] is not None:
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"turn {turn_id} did not complete: {view}")
        await asyncio.sleep(0.05)


def new_id() -> str:
    return str(uuid.uuid4())
