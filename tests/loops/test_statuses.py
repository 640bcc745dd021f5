"""Seed 001's statuses a session reaches beyond an iteration's signal: ``pending`` until its first iteration starts,
``failed`` when it cannot go on (its repository gone), each seen as a user sees it (the HTTP API, ``autarch pulse
show``, the MCP tools, the event stream) and, for ``failed``, told to a webhook in the seed's words."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from autarch.cli.main import main
from autarch.contracts.loops import NotifyTarget, ResumeLoop

from .conftest import FILES, Loops, iteration, text, write
from .test_http import events
from .webhook import Webhook

GONE = "the project repository is gone or no longer a git repository"


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    hook = Webhook().start()
    yield hook
    hook.stop()


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


def test_a_loop_whose_repository_is_removed_mid_iteration_fails(model, loops: Loops, webhook: Webhook):
    # The model thinks for a while in iteration 2: the repository goes meanwhile; the agent's work cannot be
    # committed anywhere.
    model.use({"files": FILES, "scripts": {
        "loop:gone.i1": iteration([write("one.txt", "1\n")], "feat(shop): one\n<signal>CONTINUE</signal>"),
        "loop:gone.i2": [{"content": [text("Writing two."), write("two.txt", "2\n")], "latency_ms": 3000},
                         "feat(shop): two\n<signal>CONTINUE</signal>"],
    }})
    repo = loops.repo("gone")
    started = loops.start(repo, "gone", notify=[NotifyTarget(kind="webhook", url=webhook.url("gone"))])
    loops.wait(started.id, lambda v: len(v.iterations) == 2 and v.iterations[1].status == "running",
               "iteration 2 running")
    shutil.rmtree(repo)

    view = loops.wait(started.id, lambda v: v.status not in ("pending", "running"), "the session's end")
    assert view.status == "failed", view
    assert view.status_reason.startswith(f"{GONE}: ") and str(repo) in view.status_reason  # type: ignore[operator]  # a failed session has one
    first, second = view.iterations
    assert (first.status, first.signal, first.commit_hash is not None) == ("complete", "CONTINUE", True)
    assert (second.status, second.signal, second.commit_hash, second.reason) == (
        "failed", "CONTINUE", None, view.status_reason)
    assert view.total_commits == 1
    # Nothing a person does brings it back.
    refused = loops.ask_error("resume_loop", ResumeLoop(session_id=started.id))
    assert refused.code == "loop_finished"

    kinds = [k for k in loops.events(started.id) if k.startswith("loop:")]
    assert kinds == ["loop:started", "loop:iteration_started", "loop:iteration_completed", "loop:iteration_started",
                     "loop:iteration_completed", "loop:failed"]
    # As a client of the gateway sees it.
    with httpx.Client(base_url=loops.system.url, headers=loops.system.headers, timeout=30, trust_env=False) as http:
        seen = events(http, started.id, "loop:failed")
    assert seen[-1]["reason"] == view.status_reason and seen[-1]["iteration_number"] == 2
    assert webhook.wait("gone", 2) == ["📍 Iteration 1/5: feat(shop): one. Continuing...",
                                       f"❌ Failed: {view.status_reason}"]
    failed = [body for _, _, body in webhook.received if body.get("event") == "loop:failed"]
    assert failed[0]["session_id"] == started.id and failed[0]["iteration"] == 2


def test_a_repository_removed_while_the_session_waits_fails_it_on_resume(model, loops: Loops, webhook: Webhook):
    model.use({"files": FILES, "scripts": {
        "loop:gone-blocked.i1": iteration("<signal>BLOCKED: which database?</signal>"),
        "loop:gone-blocked.i2": iteration("<signal>COMPLETE</signal>"),
    }})
    repo = loops.repo("gone-blocked")
    started = loops.start(repo, "gone-blocked",
                          notify=[NotifyTarget(kind="webhook", url=webhook.url("gone-blocked"))])
    blocked = loops.wait_status(started.id, "blocked")
    assert blocked.status_reason == "which database?"
    # Its worktree is removed only once the session ends: the branch is still wanted.
    assert blocked.worktree_path is not None
    shutil.rmtree(repo)

    loops.ask("resume_loop", ResumeLoop(session_id=started.id, message="postgres"), type(blocked))
    view = loops.wait(started.id, lambda v: v.status not in ("pending", "running"), "the session's end")
    assert view.status == "failed" and view.status_reason.startswith(f"{GONE}: "), view
    # The next iteration could not be given a worktree: it never started.
    assert len(view.iterations) == 1
    kinds = [k for k in loops.events(started.id) if k.startswith("loop:")]
    assert kinds[-3:] == ["loop:blocked", "loop:resumed", "loop:failed"], kinds
    assert webhook.wait("gone-blocked", 2) == ["⏸️ Blocked: which database?", f"❌ Failed: {view.status_reason}"]
