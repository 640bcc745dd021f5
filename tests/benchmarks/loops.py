"""Loop sessions benchmark (a script, not a test). Its last line is a JSON object of the figures.

    python tests/benchmarks/loops.py [--sessions N] [--iterations K] [--turns T]

Starts every service (``autarch up`` with the indexer, on free ports and a fresh data directory) with the
scripted model in this process, then runs N loop sessions one after another, each K iterations (a file written,
then CONTINUE; the last COMPLETE), over the orchestrator's NATS verbs. It reports:

- **platform time per iteration, excluding the model**: each iteration's wall time (the previous iteration's
  end, or the session's creation, to this iteration's end as recorded: context and anchor, git pulse, agent
  session, tools, commit, recording) minus the time its model calls took, measured as the scripted model's own
  request time (the median of direct calls, times the iteration's model calls); p50/p99;
- **anchor resolution** over T recorded turns of one project, per strategy (chained/explicit lookups,
  semantic search, temporal latest, the slice), p50/p99, through NATS requests to the indexer
  (``tests/benchmarks/loops_anchor.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import nats

from autarch.cli.local_system import LocalSystem
from autarch.contracts import subjects
from autarch.contracts.loops import GetLoop, LoopView, StartLoop
from autarch.runtime.requests import request
from autarch.services.scripted_model import ScriptedModelServer

FILES = {"README.md": "# bench\n", "bench/__init__.py": ""}
SERVICES = ("orchestrator", "tools", "git", "indexer", "agent_runner")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def scenario(iterations: int, *, files: str = "new") -> dict[str, Any]:
    """Each iteration writes ``bench/step{n}.py`` (``files="new"``: the worktree grows a file an iteration) or
    rewrites ``bench/step.py`` (``"same"``: the history grows, the worktree does not), then signals."""
    scripts = {}
    for n in range(1, iterations + 1):
        signal = "COMPLETE" if n == iterations else "CONTINUE"
        write = {"type": "tool_use", "name": "write_file",
                 "input": {"reason": "Write this iteration's step",
                           "path": f"bench/step{n}.py" if files == "new" else "bench/step.py",
                           "content": f"STEP = {n}\n"}}
        scripts[f"loop:bench.i{n}"] = [{"content": [write]}, f"feat(bench): step {n}\n<signal>{signal}</signal>"]
    return {"files": FILES, "scripts": scripts}


def make_repo(root: Path) -> Path:
    root.mkdir(parents=True)
    for path, content in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content)
    git = ["git", "-C", str(root), "-c", "user.name=Bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "initial"], check=True)
    return root


def model_request_ms(base_url: str, samples: int = 50) -> float:
    """The scripted model's own time for one request (what a model call costs here), median of direct calls."""
    body = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
            "system": "autarch-role: loop\n",
            "tools": [{"name": "write_file", "description": "w", "input_schema": {"type": "object"}}]}
    headers = {"x-api-key": "scripted", "anthropic-version": "2023-06-01", "x-autarch-script": "bench.i1"}
    times = []
    with httpx.Client(base_url=base_url, trust_env=False) as client:
        for _ in range(samples):
            started = time.perf_counter()
            client.post("/v1/messages", json=body, headers=headers).raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def run_sessions(nats_url: str, tmp: Path, sessions: int, iterations: int) -> list[LoopView]:
    nc = await nats.connect(nats_url)
    views = []
    try:
        for s in range(sessions):
            repo = make_repo(tmp / f"repo{s}")
            command = StartLoop(session_id=str(uuid.uuid4()), project_name=repo.name, project_path=str(repo),
                                goal="Write the benchmark steps", max_iterations=iterations, script="bench")
            view = await request(nc, subjects.request("orchestrator", "start_loop"), command, LoopView, timeout=30)
            deadline = time.monotonic() + 60 + 10 * iterations
            while view.status in ("pending", "running") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                view = await request(nc, subjects.request("orchestrator", "get_loop"),
                                     GetLoop(session_id=view.id), LoopView, timeout=30)
            if view.status != "complete" or view.total_commits != iterations:
                raise SystemExit(f"session {view.id} ended {view.status} ({view.status_reason}) "
                                 f"with {view.total_commits} commits")
            views.append(view)
    finally:
        await nc.close()
    return views


def platform_times(views: list[LoopView], model_ms: float, calls_per_iteration: int) -> list[float]:
    times = []
    for view in views:
        previous: datetime = view.created_at
        for it in view.iterations:
            assert it.ended_at is not None
            wall = (it.ended_at - previous).total_seconds() * 1000
            times.append(wall - calls_per_iteration * model_ms)
            previous = it.ended_at
    return times


async def anchor_figures(nats_url: str, turns: int) -> dict[str, Any]:
    """Anchor resolution over ``turns`` recorded turns, measured by ``loops_anchor.py`` against this system."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from loops_anchor import measure_anchor_resolution  # type: ignore[import-not-found]  # a sibling script, found from this folder

    nc = await nats.connect(nats_url)
    try:
        return await measure_anchor_resolution(nc, "/bench/anchors", turns)
    finally:
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--turns", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="autarch-bench-loops-") as tmp_dir:
        tmp = Path(tmp_dir)
        with ScriptedModelServer(scenario(args.iterations)) as model:
            system = LocalSystem(tmp / "data", model.base_url, services=SERVICES)
            system.start(timeout=120)
            try:
                nats_url = f"nats://127.0.0.1:{system.nats_port}"
                views = asyncio.run(run_sessions(nats_url, tmp, args.sessions, args.iterations))
                model_ms = model_request_ms(model.base_url)
                times = platform_times(views, model_ms, calls_per_iteration=2)
                anchors = asyncio.run(anchor_figures(nats_url, args.turns))
            finally:
                system.stop()
    figures = {
        "sessions": args.sessions,
        "iterations_per_session": args.iterations,
        "model_request_ms_p50": round(model_ms, 3),
        "platform_ms_per_iteration_p50": round(pct(times, 50), 1),
        "platform_ms_per_iteration_p99": round(pct(times, 99), 1),
        "goal_platform_ms_p50": 50,
        "anchor_resolution": anchors,
        "goal_semantic_ms_p50": 20,
    }
    print(f"platform time per iteration (model excluded): p50 {figures['platform_ms_per_iteration_p50']} ms, "
          f"p99 {figures['platform_ms_per_iteration_p99']} ms over {len(times)} iterations "
          f"(model request {model_ms:.2f} ms, 2 calls an iteration)")
    print(f"anchor resolution over {args.turns} turns: {json.dumps(anchors)}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
