"""Scale-out benchmark (a script, not a test): the local cluster against the embedded default. Last line: JSON.

    python tests/benchmarks/cluster.py [--workflows N] [--timeout S] [--postgres URL]

Runs N demo workflows at once (each on its own sample repository, auto-approved, followed over SSE) on three
shapes, one after the other, each on free ports with a fresh data directory and the scripted model in its own
process:

- ``embedded``: ``autarch up`` as shipped (one nats-server, SQLite stores, one process per service);
- ``cluster x1``: ``autarch up --cluster 3 --instances 1`` (three JetStream nodes, the stream replicated three
  times with ``sync_interval: always``, PostgreSQL stores in a fresh schema);
- ``cluster x2``: the same with ``--instances 2`` (two processes of every service and gateway, the orchestrator
  in two partitions so both of its instances work; drivers spread over both gateways).

For each: workflows per minute (completed / wall time from the first create to the last ``workflow:completed``)
and event → SSE latency p50/p99 (receive time on one extra all-workflows stream, read by a process of its own,
minus the event's ``occurred_at``). Every branch is checked for the demo's two commits. Needs a PostgreSQL server
for the cluster shapes (default ``postgresql://postgres@127.0.0.1:5432/test``); without one they are reported as
skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autarch.cli.demo_cmd import BRANCH, SERVICES
from autarch.cli.local_system import LocalSystem
from tests.benchmarks.workflows import COMMITS, LatencyProbe, drive_all, pct, sample_repos, start_model

SHAPES: dict[str, dict[str, int]] = {
    "embedded": {},
    "cluster x1": {"cluster": 3, "instances": 1},
    "cluster x2": {"cluster": 3, "instances": 2},
}


def postgres_answers(dsn: str) -> bool:
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=2):
            return True
    except Exception:
        return False


def run_shape(tmp: Path, model_url: str, shape: dict[str, int], *, workflows: int, timeout: float,
              postgres: str | None) -> dict[str, Any]:
    schema = f"autarch_bench_{uuid.uuid4().hex[:8]}"
    system = LocalSystem(tmp / "data", model_url, services=SERVICES,
                         postgres_url=f"{postgres}?schema={schema}" if shape else None, **shape)  # type: ignore[arg-type]  # the size arguments
    gateways = [system.url] + [f"http://127.0.0.1:{system.port + i}" for i in range(1, shape.get("instances", 1))]
    try:
        begun = time.monotonic()
        system.start(timeout=180)
        startup_s = time.monotonic() - begun
        repos = sample_repos(tmp, workflows)
        probe = LatencyProbe(system, "process")
        probe.start()
        if not probe.connected.wait(30):
            raise RuntimeError("the latency stream did not connect")
        runs = drive_all(system, repos, timeout=timeout, urls=gateways)
        outcomes, wall = runs.outcomes, runs.wall
        probe.finish(30)
        if probe.error:
            raise RuntimeError(f"the latency stream failed: {probe.error}")
        completed = sum(1 for o in outcomes.values() if o == "completed")
        branches_ok = sum(
            1 for repo in repos
            if subprocess.run(["git", "-C", str(repo), "log", "--format=%s", f"main..{BRANCH}"], capture_output=True,
                              text=True).stdout.splitlines() == COMMITS)
        if completed < workflows:
            failed = {i: o for i, o in outcomes.items() if o != "completed"}
            print(f"failed workflows: {failed or 'some drivers did not finish'}\n{system.log_tail(40)}",
                  file=sys.stderr)
        lat = probe.latencies_ms
        return {
            "workflows_completed": completed,
            "branches_ok": branches_ok,
            "startup_s": round(startup_s, 2),
            "total_wall_s": round(wall, 2),
            "workflows_per_min": round(len(runs.durations) / wall * 60, 1) if wall > 0 and runs.durations else None,
            "sse_events": len(lat),
            "event_to_sse_p50_ms": round(pct(lat, 50), 2) if lat else None,
            "event_to_sse_p99_ms": round(pct(lat, 99), 2) if lat else None,
        }
    finally:
        system.stop()
        if shape and postgres:
            _drop_schema(postgres, schema)


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workflows", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--postgres", default=os.environ.get("AUTARCH_TEST_POSTGRES_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of: " + ", ".join(SHAPES))
    args = parser.parse_args()
    postgres = args.postgres if postgres_answers(args.postgres) else None
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="autarch-bench-cluster-") as tmp_dir:
        tmp = Path(tmp_dir)
        model, model_url = start_model(tmp)
        try:
            for name in args.shapes.split(","):
                shape = SHAPES[name]
                if shape and postgres is None:
                    results[name] = {"skipped": f"no PostgreSQL server answers at {args.postgres}"}
                    continue
                print(f"--- {name}: {args.workflows} workflows", file=sys.stderr, flush=True)
                results[name] = run_shape(tmp / name.replace(" ", "-"), model_url, shape, workflows=args.workflows,
                                          timeout=args.timeout, postgres=postgres)
                print(f"{name}: {json.dumps(results[name])}", flush=True)
        finally:
            model.terminate()
            try:
                model.wait(10)
            except subprocess.TimeoutExpired:
                model.kill()
    results["workflows"] = args.workflows
    results["machine_cores"] = os.cpu_count()
    print(json.dumps(results))
    ok = all(r.get("workflows_completed") == args.workflows and r.get("branches_ok") == args.workflows
             for r in results.values() if isinstance(r, dict) and "skipped" not in r)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
