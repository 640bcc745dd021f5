"""Every service as a process (``autarch up``, the notifier among them) and the scripted model: a loop session's
notifications reach a webhook receiver started by the test, in the seed's wording, once each."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from autarch.services.scripted_model import ScriptedModelServer
from tests.cli.test_pulse_cmd import FILES, wait_status, write
from tests.system import System
from tests.workflows.conftest import make_repo, scripted_system

SCRIPTS = {
    "loop": ["<signal>BLOCKED: no script for this session</signal>"],
    "loop:note.i1": [{"content": [write("a.txt", "a\n")]}, "feat(shop): add a\n<signal>CONTINUE</signal>"],
    "loop:note.i2": [{"content": [write("b.txt", "b\n")]}, "feat(shop): add b\n<signal>COMPLETE</signal>"],
    "loop:stop.i1": ["<signal>BLOCKED: which database?</signal>"],
}


class _Hook(BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, Any]]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.received.append((self.headers["Idempotency-Key"], body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def hook() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, hook: ThreadingHTTPServer) -> Iterator[System]:
    url = f"http://127.0.0.1:{hook.server_address[1]}/default"
    with ScriptedModelServer({"scripts": SCRIPTS, "files": FILES}) as model:
        yield from scripted_system(tmp_path_factory, model, "notifier-e2e",
                                   services="orchestrator,tools,git,indexer,agent_runner,notifier",
                                   AUTARCH_REQUEST_TIMEOUT="30", AUTARCH_AGENT_MAX_STEPS="10",
                                   AUTARCH_LOOP_ITERATION_TIMEOUT="20", AUTARCH_NOTIFY_WEBHOOKS=url)


def _texts(session_id: str, count: int, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        with _Hook.lock:
            got = [(key, body) for key, body in _Hook.received if body["session_id"] == session_id]
        if len(got) >= count:
            assert len({key for key, _ in got}) == len(got)
            return [body["text"] for _, body in got]
        assert time.monotonic() < deadline, got
        time.sleep(0.05)


def test_a_loop_session_notifies_in_the_seed_wording(system: System, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shop", FILES)
    with httpx.Client(base_url=system.url, headers=system.headers, timeout=30, trust_env=False) as http:
        done = http.post("/api/pulse/start", json={"projectName": "shop", "projectPath": str(repo), "goal": "a and b",
                                                   "maxIterations": 4, "script": "note"}).raise_for_status().json()
        blocked = http.post("/api/pulse/start", json={"projectName": "shop", "projectPath": str(repo),
                                                      "goal": "Pick a database", "script": "stop"}
                            ).raise_for_status().json()
        wait_status(http, done["id"], "complete")
        wait_status(http, blocked["id"], "blocked")
    texts = _texts(done["id"], 2)
    assert texts[0].startswith("📍 Iteration 1/4: ") and texts[0].endswith(". Continuing...")
    assert not texts[0].endswith(".. Continuing...")
    assert texts[1] == "✅ Session complete (2 iterations, 2 commits)"
    assert _texts(blocked["id"], 1) == ["⏸️ Blocked: which database?"]
