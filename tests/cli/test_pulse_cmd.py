"""``autarch pulse …`` and following a loop session, against every service as a process and the scripted model.

The system here has the indexer too (the loop's turn memory), so it is this module's own, not the package's.
Each test's session selects its own script (the hidden ``--script``): the model answers iteration k of script
``s`` from ``loop:s.ik``.
"""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from autarch.cli.gateway_client import GatewayClient, connection_from_args
from autarch.cli.loop_cmd import follow_loop, watch_loop
from autarch.cli.main import main
from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System
from tests.workflows.conftest import make_repo, scripted_system

SERVICES = "orchestrator,tools,git,indexer,agent_runner"
FILES = {"README.md": "# shop\n", "shop/__init__.py": "", "shop/app.py": "def app():\n    return 'ok'\n"}


def write(path: str, content: str) -> dict[str, Any]:
    return {"type": "tool_use", "name": "write_file",
            "input": {"reason": f"Write {path} for this iteration", "path": path, "content": content}}


def iteration(*steps: list[dict[str, Any]] | str) -> list[Any]:
    return [s if isinstance(s, str) else {"content": s} for s in steps]


SCRIPTS = {
    "loop": ["<signal>BLOCKED: no script for this session</signal>"],
    "loop:cli.i1": iteration([write("a.txt", "a\n")], "feat(shop): add a\n<signal>CONTINUE</signal>"),
    "loop:cli.i2": iteration([write("b.txt", "b\n")], "feat(shop): add b\n<signal>COMPLETE</signal>"),
    "loop:ctl.i1": iteration("<signal>BLOCKED: which database?</signal>"),
    "loop:ctl.i2": iteration([write("db.txt", "postgres\n")], "chore(shop): pick postgres\n<signal>BLOCKED: "
                                                                 "need the password</signal>"),
}


def loop_system(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[System, ScriptedModelServer]]:
    """The scripted model with :data:`SCRIPTS` and every service as a process (shared with the MCP tests)."""
    with ScriptedModelServer({"scripts": SCRIPTS, "files": FILES}) as model:
        yield from ((s, model) for s in scripted_system(
            tmp_path_factory, model, name, services=SERVICES, AUTARCH_REQUEST_TIMEOUT="30",
            AUTARCH_AGENT_MAX_STEPS="10", AUTARCH_LOOP_ITERATION_TIMEOUT="20"))


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    for sys_, _model in loop_system(tmp_path_factory, "cli-pulse"):
        yield sys_


@pytest.fixture
def http(system: System) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=system.url, headers=system.headers, timeout=30, trust_env=False) as client:
        yield client


class Cli:
    def __init__(self, system: System, capsys: pytest.CaptureFixture[str]) -> None:
        self.system = system
        self.capsys = capsys

    def __call__(self, *argv: str, code: int = 0) -> str:
        """Run ``autarch …``; assert its exit code; its stdout (stderr when it failed)."""
        self.capsys.readouterr()
        got = main([*argv, "--data-dir", str(self.system.data_dir)])
        out, err = self.capsys.readouterr()
        assert got == code, f"autarch {' '.join(argv)} exited {got}\nstdout: {out}\nstderr: {err}"
        return out if code == 0 else err


@pytest.fixture
def cli(system: System, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(system, capsys)


def wait_status(http: httpx.Client, session_id: str, status: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = http.get(f"/api/pulse/{session_id}").raise_for_status().json()
        if view["status"] == status:
            return view
        assert time.monotonic() < deadline, f"timed out waiting for {status}: {json.dumps(view, indent=1)}"
        time.sleep(0.1)


def started_id(out: str) -> str:
    match = re.match(r"^([0-9a-f-]{36})  ", out)
    assert match, out
    return match.group(1)


def test_start_follow_show_and_list(cli: Cli, http: httpx.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    repo = make_repo(tmp_path / "shop", FILES)
    monkeypatch.chdir(repo)
    out = cli("pulse", "start", "--project-path", ".", "--goal", "Write a and b", "--max-iterations", "4",
              "--context-strategy", "none", "--script", "cli", "--follow")
    sid = started_id(out)
    lines = out.splitlines()
    assert any(re.search(r"iteration 1/4 started", line) for line in lines), out
    assert any(re.search(r"iteration 1/4 CONTINUE · [0-9a-f]{8} · ", line) for line in lines), out
    assert any(re.search(r"iteration 2/4 COMPLETE · [0-9a-f]{8} · ", line) for line in lines), out
    assert "loop complete (2 iterations, 2 commits)" in out
    assert lines[-1].startswith(f"{sid}  complete, iteration 2/4, last signal COMPLETE")

    view = http.get(f"/api/pulse/{sid}").json()
    assert view["created_by"] == "cli" and view["project_path"] == str(repo) and view["project_name"] == "shop"
    assert view["context_strategy"] == "none"

    shown = cli("pulse", "show", sid[:8])
    assert f"({sid})" in shown and "Write a and b" in shown and "2 commits" in shown
    rows = [line.split() for line in shown.splitlines() if re.match(r"^\d+/4 ", line)]
    commits = [it["commit_hash"][:7] for it in view["iterations"]]
    assert [r[:4] for r in rows] == [["1/4", "complete", "CONTINUE", commits[0]],
                                     ["2/4", "complete", "COMPLETE", commits[1]]]
    assert json.loads(cli("pulse", "show", sid, "--json"))["id"] == sid

    listed = cli("pulse", "list", "--status", "complete")
    assert sid in listed and "2/4" in listed
    assert sid not in cli("pulse", "list", "--status", "running")

    # Following a session that already ended replays it and returns at once; `watch` knows loop ids.
    client = GatewayClient(connection_from_args(_args(cli.system)))
    buffer = io.StringIO()
    assert follow_loop(client, sid, out=buffer) == 0
    assert "iteration 2/4 COMPLETE" in buffer.getvalue()
    assert watch_loop(client, "not-a-session") is None
    assert watch_loop(client, "2b9a4c1e-0000-4000-8000-000000000000") is None
    client.close()


def test_block_resume_pause_and_abort(cli: Cli, http: httpx.Client, tmp_path: Path):
    repo = make_repo(tmp_path / "shop", FILES)
    out = cli("pulse", "start", "--project-path", str(repo), "--project-name", "db-shop", "--goal",
              "Pick a database", "--script", "ctl")
    sid = started_id(out)
    assert f"autarch watch {sid}" in out
    view = wait_status(http, sid, "blocked")
    assert view["project_name"] == "db-shop" and view["notify"] == []
    shown = cli("pulse", "show", sid)
    assert "which database?" in shown and f"autarch pulse resume {sid}" in shown

    with GatewayClient(connection_from_args(_args(cli.system))) as client:
        buffer = io.StringIO()
        assert follow_loop(client, sid, out=buffer) == 1  # a blocked session ends the follow, exit 1
    assert "loop BLOCKED: which database?" in buffer.getvalue()
    assert buffer.getvalue().splitlines()[-1].startswith(f"{sid}  blocked, iteration 1/10")

    # `autarch watch` knows loop sessions: it follows the iterations, and a blocked session ends it with exit 1.
    cli.capsys.readouterr()
    assert main(["watch", sid, "--data-dir", str(cli.system.data_dir)]) == 1
    assert "loop BLOCKED: which database?" in cli.capsys.readouterr().out

    err = cli("pulse", "pause", sid, code=1)
    assert "loop_not_running" in err

    out = cli("pulse", "resume", sid, "--message", "postgres")
    assert out.startswith(f"{sid}  running")
    wait_status(http, sid, "blocked")
    assert http.get(f"/api/pulse/{sid}").json()["iterations"][1]["signal"] == "BLOCKED"

    out = cli("pulse", "abort", sid, "--reason", "enough")
    assert out.startswith(f"{sid}  aborted")
    err = cli("pulse", "resume", sid, code=1)
    assert "loop_finished" in err
    assert sid in cli("pulse", "list", "--status", "aborted")


def test_errors_are_typed(cli: Cli, tmp_path: Path):
    not_repo = tmp_path / "plain"
    not_repo.mkdir()
    err = cli("pulse", "start", "--project-path", str(not_repo), "--goal", "x", code=1)
    assert err.startswith("autarch: not_a_repository: ")
    assert "not_found" in cli("pulse", "show", "0123abcd-0000-4000-8000-000000000000", code=1)
    assert "not_found" in cli("pulse", "abort", "ffffffff", code=1)
    assert "is not a loop session id" in cli("pulse", "show", "zz", code=1)
    before = json.loads(cli("pulse", "list", "--json"))["total"]
    with pytest.raises(SystemExit) as exc:
        main(["pulse", "start", "--project-path", ".", "--goal", "  "])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["pulse", "start", "--project-path", ".", "--goal", "x", "--max-iterations", "0"])
    with pytest.raises(SystemExit):
        main(["pulse", "list", "--status", "sleeping"])
    assert json.loads(cli("pulse", "list", "--json"))["total"] == before


def test_notify_webhooks_go_into_the_start(cli: Cli, http: httpx.Client, tmp_path: Path):
    repo = make_repo(tmp_path / "shop", FILES)
    out = cli("pulse", "start", "--project-path", str(repo), "--goal", "Pick a database", "--script", "ctl",
              "--notify-webhook", "http://127.0.0.1:9/hook", "--notify-webhook", "https://example.com/h")
    view = wait_status(http, started_id(out), "blocked")
    assert [(n["kind"], n["url"]) for n in view["notify"]] == [("webhook", "http://127.0.0.1:9/hook"),
                                                               ("webhook", "https://example.com/h")]


def test_a_session_with_notify_targets_has_its_events_on_the_stream(http: httpx.Client, tmp_path: Path):
    repo = make_repo(tmp_path / "shop", FILES)
    session = http.post("/api/pulse/start", json={
        "projectName": "shop", "projectPath": str(repo), "goal": "Pick a database", "script": "ctl",
        "notify": [{"kind": "webhook", "url": "http://127.0.0.1:9/hook"}]}).raise_for_status().json()
    params = {"workflow": session["id"], "since": "0", "deltas": "false"}
    seen = []
    with http.stream("GET", "/api/events", params=params, timeout=httpx.Timeout(10, read=8)) as reply:
        try:
            for line in reply.iter_lines():
                if line.startswith("event:"):
                    seen.append(line.split(":", 1)[1].strip())
                if "loop:blocked" in seen:
                    break
        except httpx.ReadTimeout:
            pass
    # The loop's own events in their order; the agent runner's (session:, turn:) come from another process and
    # may reach the stream before the orchestrator's relay publishes iteration_started.
    loop_events = [name for name in seen if name.startswith("loop:")]
    assert loop_events[:2] == ["loop:started", "loop:iteration_started"] and loop_events[-1] == "loop:blocked", seen


def _args(system: System) -> Any:
    import argparse

    return argparse.Namespace(url=None, token_file=None, data_dir=str(system.data_dir))
