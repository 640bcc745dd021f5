"""SIGKILL of the runner mid-turn: a new runner resumes the turn with no model call or tool run twice."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from autarch.contracts import subjects
from autarch.contracts.agents import GetSession, SessionView
from autarch.runtime.requests import request

from .conftest import RUNNER, get_session, start_session, wait_turn
from .scenarios import NEW


def _spawn_runner(nats_url: str, data_dir: Path, base_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTARCH_")}
    env.update(
        AUTARCH_NATS_URL=nats_url,
        AUTARCH_DATA_DIR=str(data_dir),
        AUTARCH_ANTHROPIC_BASE_URL=base_url,
        AUTARCH_REQUEST_TIMEOUT="5",
    )
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "autarch.services.agent_runner"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _calls(tools_dir: Path, session_id: str) -> dict[str, str]:
    """tool → state of the tools service's idempotency records for one session."""
    db = sqlite3.connect(tools_dir / "tools" / "sessions.sqlite3")
    try:
        return dict(db.execute("SELECT tool, state FROM calls WHERE session_id = ?", (session_id,)).fetchall())
    finally:
        db.close()


async def _ready(nc, session_id: str) -> SessionView:
    return await request(
        nc,
        subjects.request(RUNNER, "get_session"),
        GetSession(session_id=session_id),
        SessionView,
        retry_unavailable=30.0,
    )


async def test_sigkill_mid_turn_then_resume_runs_no_tool_and_no_model_call_twice(
    nc, nats_server, data_dir, scripted, tools, repo, tmp_path
):
    log = tmp_path / "runner.log"
    proc = _spawn_runner(nats_server.url, data_dir, scripted.base_url, log)
    try:
        await request(nc, subjects.request(RUNNER, "list_sessions"), {}, dict, retry_unavailable=30.0)
        accepted = await start_session(nc, role="pulsing", script="crash", root=repo)
        # Kill while the slow shell command runs: the edit before it is recorded, the tools service runs the shell.
        deadline = time.monotonic() + 20
        while _calls(tools, accepted.session_id).get("shell") != "running":
            assert time.monotonic() < deadline, f"shell never started: {_calls(tools, accepted.session_id)}"
            await asyncio.sleep(0.01)
        view = await get_session(nc, accepted.session_id)
        assert view.turns[0].tool_calls[2].output is None
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert NEW in (repo / "greeter/core.py").read_text()

        proc = _spawn_runner(nats_server.url, data_dir, scripted.base_url, log)
        await _ready(nc, accepted.session_id)
        view = await wait_turn(nc, accepted.session_id, accepted.turn_id, timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    turn = view.turns[0]
    assert turn.outcome is not None and turn.outcome.tool == "complete_pulse", (turn, log.read_text()[-3000:])
    # Every edit is in the files exactly once.
    core = (repo / "greeter/core.py").read_text()
    assert core.count('(name or "world")') == 1
    assert (repo / "README.md").read_text().count("greets the world") == 1
    assert (repo / "shell.log").read_text() == "ran\n"
    # The shell call was asked again after the restart and answered from the tools service's record.
    shell = turn.tool_calls[2]
    assert shell.name == "shell" and shell.replayed and not shell.is_error
    # The tools service's idempotency records: each mutating tool-call id claimed and run once.
    db = sqlite3.connect(tools / "tools" / "sessions.sqlite3")
    rows = db.execute(
        "SELECT tool_call_id, tool, state FROM calls WHERE session_id = ?", (accepted.session_id,)
    ).fetchall()
    db.close()
    mutating = [c.tool_use_id for c in turn.tool_calls if c.name in ("edit_file", "shell")]
    assert sorted(r[0] for r in rows) == sorted(mutating) and {r[2] for r in rows} == {"done"}
    # And the model was asked for each step exactly once: nothing recorded was requested again.
    for step in range(6):
        assert scripted.attempts("pulsing:crash", step) == 1, step
