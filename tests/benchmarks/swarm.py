"""Swarm benchmark (a script, not a test). Its last line is a JSON object of the figures.

    python tests/benchmarks/swarm.py [--latency-ms 600] [--workers 1,2,4] [--timeout 300]

A bead plan of 12 beads in three levels of 4 (each bead of level k+1 waits on two of level k: width 4,
critical path 3) is run by the whole system (``autarch up`` with the gateway and an embedded nats-server) once
per worker count, the scripted model answering every worker call after a fixed latency (``latency_ms``: a
model's time to first token; 2 calls per bead). For each count it reports the swarm's wall time (its
``swarm:started`` to ``swarm:finished`` events), the speedup against 1 worker, and the ideal speedup the DAG
allows with that many workers: 12 unit beads take at least max(critical path, ceil(12 / workers)) units, so
the ideal is 12 / that. The goal with 4 workers is a speedup of at least 0.8 x the ideal.

Every run's branch is checked: one ``feat(<bead>)`` commit per bead, in dependency order.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from autarch.cli.demo_cmd import SERVICES, create_workflow, drive, make_sample_repo
from autarch.cli.local_system import LocalSystem

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.benchmarks.workflows import start_model

LEVELS, WIDTH = 3, 4
BRANCH = "autarch/swarm-bench"


def bead_ids() -> list[str]:
    return [f"l{level}b{i}" for level in range(LEVELS) for i in range(WIDTH)]


def dependencies(bead: str) -> list[str]:
    level, i = int(bead[1]), int(bead[3:])
    if level == 0:
        return []
    return sorted({f"l{level - 1}b{i}", f"l{level - 1}b{(i + 1) % WIDTH}"})


def scenario(latency_ms: int) -> dict[str, Any]:
    """The bundled swarm scenario's stages, with a 12-bead plan whose workers answer after ``latency_ms``."""
    from autarch.services.scripted_model.scenario import bundled_scenario_path

    base = json.loads(bundled_scenario_path("swarm").read_text())
    scripts = {k: v for k, v in base["scripts"].items() if not k.startswith("pulsing:")}
    pulses = [{"id": b, "title": f"Module {b}", "description": f"Add pkg/{b}.py.", "expectedChanges": [f"pkg/{b}.py"],
               "estimatedSize": "small", "verify": [f"test -s pkg/{b}.py"], **({"dependsOn": dependencies(b)}
                                                                                if dependencies(b) else {})}
              for b in bead_ids()]
    plan = scripts["plan"]
    plan[1]["content"][-1]["input"] = {"approachSummary": "Three levels of four modules.", "pulses": pulses}
    for b in bead_ids():
        scripts[f"pulsing:{b}"] = [
            {"latency_ms": latency_ms, "content": [{"type": "tool_use", "name": "write_file", "input": {
                "reason": f"Create pkg/{b}.py", "path": f"pkg/{b}.py", "content": f"NAME = {b!r}\n"}}]},
            {"latency_ms": latency_ms, "content": [{"type": "tool_use", "name": "complete_pulse", "input": {
                "summary": f"feat(pkg): add {b}", "filesChanged": [f"pkg/{b}.py"]}}]},
            "Bead complete.",
        ]
    return {"description": "swarm benchmark", "files": {**base["files"], "pkg/__init__.py": ""}, "scripts": scripts}


def ideal_speedup(workers: int) -> float:
    n = LEVELS * WIDTH
    return n / max(LEVELS, math.ceil(n / workers))


def _time(event: Mapping[str, Any]) -> float:
    return datetime.fromisoformat(str(event["occurred_at"]).replace("Z", "+00:00")).timestamp()


def run_once(tmp: Path, workers: int, model_url: str, *, timeout: float) -> dict[str, Any]:
    system = LocalSystem(tmp / f"data-{workers}", model_url, services=SERVICES,
                         extra_env={"AUTARCH_SWARM_WORKERS": str(workers)})
    marks: dict[str, float] = {}
    try:
        system.start()
        repo = tmp / f"repo-{workers}"
        make_sample_repo(repo, scenario(0)["files"])
        client = system.client(timeout=60)

        def on_event(event: Mapping[str, Any], _received: float) -> None:
            if event.get("type") in ("swarm:started", "swarm:finished"):
                marks[str(event["type"])] = _time(event)

        wid = create_workflow(client, repo, title="Swarm benchmark", request="Add the modules", branch=BRANCH)
        outcome = drive(client, wid, timeout=timeout, alive=system.alive, on_event=on_event)
        client.close()
        log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s", f"main..{BRANCH}"], capture_output=True,
                             text=True).stdout.splitlines()
        landed = [s.split("(", 1)[1].split(")", 1)[0] for s in reversed(log) if s.startswith("feat(")]
        in_order = sorted(landed) == sorted(bead_ids()) and all(
            landed.index(d) < landed.index(b) for b in bead_ids() for d in dependencies(b))
        if outcome.status != "completed" or not in_order:
            print(f"{workers} workers: {outcome.status} {outcome.message}; landed {landed}", file=sys.stderr)
            print(system.log_tail(40), file=sys.stderr)
        wall = marks["swarm:finished"] - marks["swarm:started"] if len(marks) == 2 else None
        return {"workers": workers, "completed": outcome.status == "completed", "branch_ok": in_order,
                "swarm_wall_s": round(wall, 2) if wall is not None else None}
    finally:
        system.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency-ms", type=int, default=600)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="autarch-swarm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        scenario_file = tmp / "swarm-bench.json"
        scenario_file.write_text(json.dumps(scenario(args.latency_ms)))
        model, model_url = start_model(tmp, str(scenario_file))
        try:
            runs = [run_once(tmp, w, model_url, timeout=args.timeout) for w in counts]
        finally:
            model.terminate()
            model.wait(10)
    base = next((r["swarm_wall_s"] for r in runs if r["workers"] == 1), None)
    for r in runs:
        r["ideal_speedup"] = round(ideal_speedup(r["workers"]), 2)
        if base and r["swarm_wall_s"]:
            r["speedup"] = round(base / r["swarm_wall_s"], 2)
            r["of_ideal"] = round(r["speedup"] / r["ideal_speedup"], 2)
        print(f"{r['workers']} workers: {r['swarm_wall_s']} s, speedup {r.get('speedup')} "
              f"(ideal {r['ideal_speedup']}, {r.get('of_ideal')} of it)")
    four = next((r for r in runs if r["workers"] == 4), None)
    figures = {"beads": LEVELS * WIDTH, "width": WIDTH, "critical_path": LEVELS, "latency_ms": args.latency_ms,
               "calls_per_bead": 2, "runs": runs, "machine_cores": os.cpu_count(),
               "goal": "4 workers: speedup >= 0.8 x ideal",
               "goal_met": bool(four and four.get("of_ideal") and four["of_ideal"] >= 0.8),
               "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
