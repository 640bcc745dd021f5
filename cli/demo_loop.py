"""``autarch demo loop``: a Pulse Protocol loop session, offline, on a sample repository.

The bundled ``loop`` scenario plays three iterations towards one goal: a function, its test (whose report names
iteration 1's turn in an ``<anchor_hint>``, so iteration 3 starts from that turn: a chained anchor), and the
README, ending COMPLETE with one commit per iteration. Every service runs (the indexer keeps the turn memory
the anchors come from), started by ``autarch up`` on free ports with its own data directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .demo_kit import DemoError, check_target, make_sample_repo
from .gateway_client import CliError, GatewayClient
from .render import render_event

__all__ = ["GOAL", "SCRIPT", "run_loop_demo"]

SCENARIO = "loop"
SCRIPT = "demo-loop"
GOAL = "Add a case-insensitive search to the notes store, with a test and docs"
SERVICES = ("orchestrator", "tools", "git", "indexer", "agent_runner")
_FINAL = {"loop:completed", "loop:blocked", "loop:failed", "loop:aborted"}


def _print(line: str = "") -> None:
    print(line, flush=True)


def loop_scenario() -> dict[str, Any]:
    from autarch.services.scripted_model.scenario import bundled_scenario_path

    return json.loads(bundled_scenario_path(SCENARIO).read_text())


def follow_session(client: GatewayClient, session_id: str, *, timeout: float) -> str:
    """Print the session's events until it ends (or ``timeout``); the final event's type."""
    from .follow import StreamLost, WorkflowEvents

    labels: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    with WorkflowEvents(client, session_id, since=0) as events:
        for item in events:
            if time.monotonic() > deadline:
                raise DemoError(f"the loop session did not end within {timeout:g}s")
            if isinstance(item, StreamLost) or not isinstance(item, dict):
                continue
            kind = str(item.get("type", ""))
            if kind == "loop:iteration_started":
                labels[str(item.get("agent_session_id"))] = f"iteration {item.get('iteration_number')}"
            line = render_event(item, labels)
            if line is not None:
                _print(line)
            if kind in _FINAL:
                return kind
    raise DemoError("the event stream ended before the session did")


def run_loop_demo(target: Path, *, keep: bool = False, timeout: float = 300) -> int:
    from autarch.services.scripted_model import ScriptedModelServer

    from .local_system import LocalSystem

    if shutil.which("git") is None:
        raise DemoError("the demo needs git on PATH", code=2)
    target = target.expanduser().absolute()
    check_target(target)
    scenario = loop_scenario()
    started = time.monotonic()
    _print("Autarch loop demo — a Pulse Protocol session, offline, with the scripted model (no API key).")
    base = make_sample_repo(target, scenario["files"])
    _print(f"Sample repository: {target}  (main at {base[:8]})")
    data_dir = Path(tempfile.mkdtemp(prefix="autarch-demo-data-"))
    system: LocalSystem | None = None
    client: GatewayClient | None = None
    session_id = str(uuid.uuid4())
    try:
        with ScriptedModelServer(scenario) as model:
            system = LocalSystem(data_dir, model.base_url, services=SERVICES)
            _print(f"Starting Autarch ({', '.join(SERVICES)} + gateway) on {system.url} …")
            system.start()
            _print(f"  ready in {time.monotonic() - started:.1f}s")
            client = system.client()
            view = client.post("/api/pulse/start", {
                "projectName": target.name, "projectPath": str(target), "goal": GOAL, "maxIterations": 5,
                "sessionId": session_id, "script": SCRIPT, "createdBy": "cli"})
            _print(f"Loop session {view['id']} on branch {view['branch_name']}: {GOAL}")
            _print("")
            final = follow_session(client, session_id, timeout=timeout)
            view = client.get(f"/api/pulse/{session_id}")
            _print("")
            if final != "loop:completed":
                _print(f"demo failed: the session ended {view['status']}: {view.get('status_reason')}")
                return 1
            for it in view["iterations"]:
                anchor = it.get("anchor_strategy") or "none"
                commit = (it.get("commit_hash") or "")[:8] or "no commit"
                _print(f"  iteration {it['iteration_number']}: {it['signal']:<8} {commit:<9} anchor {anchor:<8} "
                       f"{it.get('output_summary') or ''}")
            log = subprocess.run(["git", "-C", str(target), "log", "--oneline", f"main..{view['branch_name']}"],
                                 capture_output=True, text=True, check=True).stdout.strip().splitlines()
            _print(f"Branch {view['branch_name']}: {len(log)} commits on top of main (main is untouched)")
            for line in log:
                _print(f"  {line}")
            _print(f"Done in {time.monotonic() - started:.1f}s: {view['current_iteration']} iterations, "
                   f"{view['total_commits']} commits, {view['total_tokens_used']:,} tokens.")
            return 0
    except CliError as exc:
        _print(f"demo failed: {exc.message}")
        if system is not None:
            _print(f"  the system's log ends with:\n{system.log_tail()}")
        return exc.exit_code
    finally:
        if client is not None:
            client.close()
        if system is not None and system.proc is not None:
            _print("Stopping Autarch …")
            system.stop()
        if keep:
            _print(f"Data directory kept: {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
            subprocess.run(["git", "-C", str(target), "worktree", "prune"], capture_output=True, check=False)
