"""Loop sessions (seed 001) with every service a process (``autarch up``) and the scripted model.

The loop verbs are driven over NATS here (the orchestrator's own contract); the HTTP routes have tests of their
own. Each test gives its session its own ``script`` so the shared scripted model answers it alone.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from autarch.contracts import subjects
from autarch.contracts.loops import GetLoop, LoopView, StartLoop
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System
from tests.workflows.conftest import make_repo, scripted_system

SERVICES = "orchestrator,tools,git,indexer,agent_runner,notifier"
FILES = {"README.md": "# shop\n", "shop/__init__.py": "", "shop/app.py": "def app():\n    return 'ok'\n"}


@pytest.fixture(scope="package")
def model() -> Iterator[ScriptedModelServer]:
    # Each test installs its own scripts (``model.use``); this one answers a session nobody scripted.
    with ScriptedModelServer({"scripts": {"loop": ["<signal>BLOCKED: no script for this session</signal>"]},
                              "files": FILES}) as server:
        yield server


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    # Every service: the indexer keeps the turn memory the anchors are resolved in.
    yield from scripted_system(tmp_path_factory, model, "loops", services=SERVICES, AUTARCH_REQUEST_TIMEOUT="30",
                               AUTARCH_AGENT_MAX_STEPS="10", AUTARCH_LOOP_ITERATION_TIMEOUT="20",
                               # A frozen indexer holds a session in ``pending`` this long (test_statuses).
                               AUTARCH_LOOP_MEMORY_TIMEOUT="10",
                               AUTARCH_NOTIFY_BACKOFF_INITIAL="0.1", AUTARCH_NOTIFY_BACKOFF_MAX="0.5",
                               AUTARCH_NOTIFY_MAX_ATTEMPTS="200")


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def write(path: str, content: str) -> dict[str, Any]:
    return {"type": "tool_use", "name": "write_file",
            "input": {"reason": f"Write {path} for this iteration", "path": path, "content": content}}


def iteration(*steps: list[dict[str, Any]] | str) -> list[Any]:
    """One iteration's script: each step a list of content blocks, or a final text."""
    return [s if isinstance(s, str) else {"content": s} for s in steps]


class Loops:
    """The orchestrator's loop verbs over NATS, with waiting helpers."""

    def __init__(self, system: System, tmp: Path) -> None:
        self.system = system
        self.tmp = tmp
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(f"nats://127.0.0.1:{system.nats_port}"))
        self.partitions = int(system.extra_env.get("AUTARCH_ORCHESTRATOR_PARTITIONS", "1"))

    def close(self) -> None:
        self.loop.run_until_complete(self.nc.close())
        self.loop.close()

    def ask(self, verb: str, payload: Any, reply: type) -> Any:
        # Queries survive an orchestrator being killed and restarted (the fault tests do that).
        query = verb in ("get_loop", "list_loops")
        return self.loop.run_until_complete(
            request(self.nc, subjects.orchestrator_request(verb, payload, self.partitions), payload, reply, timeout=30,
                    idempotent=query, retry_unavailable=30.0 if query else 0.0))

    def ask_error(self, verb: str, payload: Any) -> RemoteError:
        """The typed error ``verb`` answers (fails when it answers anything else)."""
        with pytest.raises(RemoteError) as refused:
            self.ask(verb, payload, LoopView)
        return refused.value

    def ask_raw_error(self, verb: str, payload: dict[str, Any]) -> RemoteError:
        """Send ``payload`` as given (no client-side validation) and return the typed error it gets."""
        return self.ask_error(verb, payload)

    def repo(self, name: str) -> Path:
        return make_repo(self.tmp / name, FILES)

    def start(self, repo: Path, script: str, **fields: Any) -> LoopView:
        command = StartLoop(session_id=str(uuid.uuid4()), project_name=repo.name, project_path=str(repo),
                            goal=fields.pop("goal", "Add a health endpoint to the shop"), script=script,
                            **{"max_iterations": 5, **fields})
        return self.ask("start_loop", command, LoopView)

    def get(self, session_id: str) -> LoopView:
        return self.ask("get_loop", GetLoop(session_id=session_id), LoopView)

    def wait(self, session_id: str, until: Callable[[LoopView], bool], what: str, timeout: float = 60) -> LoopView:
        deadline = time.monotonic() + timeout
        view = self.get(session_id)
        while time.monotonic() < deadline:
            if until(view):
                return view
            time.sleep(0.1)
            view = self.get(session_id)
        log = self.system.log.read_text()[-6000:] if self.system.log else ""
        raise AssertionError(f"timed out waiting for {what}; session is {view}\n{log}")

    def events(self, session_id: str) -> list[str]:
        """The types of every event of the session on the stream so far, in order."""
        async def read() -> list[str]:
            js = self.nc.jetstream()
            sub = await js.subscribe(subjects.run_events(session_id), ordered_consumer=True)
            found: list[str] = []
            try:
                while True:
                    try:
                        msg = await sub.next_msg(timeout=1.0)
                    except nats.errors.TimeoutError:
                        return found
                    found.append(subjects.event_type_from_subject(msg.subject))
            finally:
                await sub.unsubscribe()

        return self.loop.run_until_complete(read())

    def wait_status(self, session_id: str, status: str, timeout: float = 60) -> LoopView:
        return self.wait(session_id, lambda v: v.status == status and not v.pause_requested, f"status {status}",
                         timeout)


@pytest.fixture
def loops(system: System, tmp_path: Path) -> Iterator[Loops]:
    client = Loops(system, tmp_path)
    yield client
    client.close()
