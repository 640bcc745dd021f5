"""Seed 001's statuses a session reaches beyond an iteration's signal: ``pending`` until its first iteration starts,
seen as a user sees it (the HTTP API, ``autarch pulse show``, the MCP tools, the event stream)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

import httpx
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from autarch.cli.main import main

from .conftest import FILES, Loops, iteration, write


@contextlib.contextmanager
def stopped(loops: Loops, service: str) -> Iterator[None]:
    """``service`` frozen (SIGSTOP): it holds its requests unanswered until it is let go again (SIGCONT)."""
    pid = loops.system.run_info()["children"][service]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _show(loops: Loops, session_id: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["pulse", "show", session_id, "--data-dir", str(loops.system.data_dir)]) == 0
    return out.getvalue()


def test_a_session_is_pending_until_its_first_iteration_starts(model, loops: Loops):
    model.use({"files": FILES, "scripts": {
        "loop:pending.i1": iteration([write("a.txt", "a\n")], "feat(shop): a\n<signal>COMPLETE</signal>")}})
    repo = loops.repo("pending")
    mcp = StdioServerParameters(command=sys.executable,
                                args=["-m", "autarch.cli.main", "mcp", "--data-dir", str(loops.system.data_dir)],
                                env={"PATH": os.environ.get("PATH", "")})
    body = {"projectName": "shop", "projectPath": str(repo), "goal": "Write a", "maxIterations": 3,
            "script": "pending"}

    async def observe() -> tuple[dict[str, Any], dict[str, Any], str, dict[str, Any]]:
        async with Client(mcp) as client, httpx.AsyncClient(base_url=loops.system.url, headers=loops.system.headers,
                                                            timeout=30, trust_env=False) as http:
            # The first iteration's anchor is looked up in the turn memory first: with the indexer frozen, that
            # waits out its lookup time (``loop_memory_timeout``, 10 s here) before the iteration starts without
            # it. Meanwhile: pending.
            with stopped(loops, "indexer"):
                started = (await http.post("/api/pulse/start", json=body)).raise_for_status().json()
                got = (await http.get(f"/api/pulse/{started['id']}")).raise_for_status().json()
                shown = _show(loops, started["id"])
                result = await client.call_tool("pulse_status", {"sessionId": started["id"]})
                assert not result.is_error, result
                status = result.structured_content or json.loads(result.content[0].text)
            return started, got, shown, status

    started, got, shown, status = asyncio.run(observe())
    assert started["status"] == "pending" and started["iterations"] == [] and started["current_iteration"] == 0
    assert got["status"] == "pending" and got["iterations"] == []
    assert "  status    pending, iteration 0/3" in shown, shown
    assert status["status"] == "pending" and status["id"] == started["id"]

    view = loops.wait_status(started["id"], "complete")
    assert [it.signal for it in view.iterations] == ["COMPLETE"] and view.total_commits == 1
    kinds = [k for k in loops.events(started["id"]) if k.startswith("loop:")]
    assert kinds == ["loop:started", "loop:iteration_started", "loop:iteration_completed", "loop:completed"]

