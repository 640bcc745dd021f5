"""Growth benchmark (a script, not a test): does a step cost the same late in a long piece of work as early on?
Its last line is a JSON object of the figures.

    python tests/benchmarks/growth.py [--curves loop,workflow] [--loop-sizes 10,100,1000] [--workflow-sizes 2,20,200]

Without ``--curves`` it runs every curve (:data:`ALL_CURVES`; about an hour on the 2-core machine).

Each curve runs one piece of work at several sizes, each size on a fresh system (``autarch up`` on free ports and
a fresh data directory, the scripted model in this process), and measures the platform's time per step with the
model's time taken out. The figure of a curve is the ratio of the per-step time at its largest size to that at its
smallest (goal: at most 1.25), and within the largest size the ratio of its last decile of steps to its first. The
first step of each run is reported apart (``first_step_ms``) and left out of the rest: it pays one-time costs
(the indexer loading its embedder, the first request of each process).

- **loop**: one loop session of N iterations (a new file written, then CONTINUE; the last COMPLETE), the
  ``loop_max_iterations_limit`` setting raised for the run (a size under :data:`MIN_STEPS` iterations: several
  sessions of it, their steps pooled). A step is an iteration: its wall time (the previous
  iteration's end, or the session's creation, to its end as recorded) minus its two model calls, each counted at
  the scripted model's own request time (the median of direct calls). Beside it, the CPU seconds each service
  process spent per iteration, in the first and the last tenth of the run (sampled from ``/proc`` while the
  session runs), which shows which process grows, and each process's peak memory (``VmHWM``) at the end; also
  its peak and current memory as the session ended (``peak_rss_mb_session``, ``rss_mb_session_end``), before the
  benchmark reads the session's events back from the stream, which costs nats-server memory of its own.
- **loop_same_file**: the same, each iteration rewriting one file: the history grows as in ``loop``, the worktree
  does not (in ``loop`` the git service's checks of the worktree, a ``stat`` of every tracked file, grow with it).
- **workflow**: one workflow (the demo's stages, auto-approved over the gateway) whose plan is a chain of N pulses,
  each writing one file then completing (a size under :data:`MIN_STEPS` steps: several workflows, pooled). A step
  is a pulse: the time between the recorded ends of two pulses (``pulse:completed``'s ``occurred_at``; the first
  from its start) minus its three model calls. CPU and memory by process as for the loop.
- **swarm**: one swarm epic of N independent beads, 4 workers; its figure is the platform's CPU per bead
  (``growth_swarm.py`` says how it is measured, and why not the wall time between closes).
- **agent_session**: one agent session of N turns, compaction on (``growth_session.py`` says how).
- **sse_fanout** (``growth_sse.py``), **event_store** (``growth_events.py``): measured by modules of their own,
  each also a script; see their docstrings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import nats

from autarch.cli.demo_cmd import SERVICES as WORKFLOW_SERVICES
from autarch.cli.demo_cmd import create_workflow, demo_scenario, drive, make_sample_repo
from autarch.cli.local_system import LocalSystem
from autarch.contracts import subjects
from autarch.contracts.loops import ListLoops, LoopList, LoopSummary, LoopView, StartLoop
from autarch.runtime.requests import request
from autarch.services.scripted_model import ScriptedModelServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from growth_events import event_store_curve  # type: ignore[import-not-found]  # a sibling script, found from this folder
from growth_sse import sse_curve  # type: ignore[import-not-found]  # a sibling script, found from this folder
from loops import make_repo, model_request_ms, scenario  # type: ignore[import-not-found]  # a sibling script, found from this folder

CURVES_ELSEWHERE = {"sse_fanout": sse_curve, "event_store": event_store_curve}
"""Curves measured by modules of their own (each takes a scratch directory and returns its figures)."""

LOOP_SERVICES = ("orchestrator", "tools", "git", "indexer", "agent_runner")
GOAL_RATIO = 1.25
ALL_CURVES = ("loop", "loop_same_file", "workflow", "swarm", "agent_session", "sse_fanout", "event_store")
# A curve named here would be reported as not measured yet; every curve of issue 34 is measured now.
PENDING: dict[str, str] = {}


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) the process has used so far; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_mb(pid: int, field: str) -> float | None:
    """A memory figure of ``/proc/<pid>/status`` (``VmHWM`` the peak, ``VmRSS`` now) in MiB; None when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def peak_rss_mb(pid: int) -> float | None:
    return status_mb(pid, "VmHWM")


def processes(system: LocalSystem) -> dict[str, int]:
    info = system.run_info() or {}
    pids = {name: pid for name, pid in (info.get("children") or {}).items() if pid}
    if info.get("nats_pid"):
        pids["nats-server"] = info["nats_pid"]
    return pids


def deciles(values: list[float]) -> list[float]:
    """The mean of each tenth of ``values`` (fewer parts when there are fewer than ten values)."""
    parts = min(10, len(values))
    size = len(values) / parts
    return [statistics.fmean(values[round(i * size): round((i + 1) * size)]) for i in range(parts)]


async def run_loop(nats_url: str, repo: Path, iterations: int, pids: dict[str, int], at_end: dict[str, Any]
                   ) -> tuple[LoopView, LoopSummary, list[datetime], list[tuple[int, dict[str, float]]]]:
    """One session of ``iterations``: its first view, its last summary, when each iteration ended, and (iterations
    ended, CPU seconds by process) samples. ``at_end`` gets each process's peak and current memory as the session
    ended, before this benchmark reads the session's events back (that read, of every message of the session
    through one consumer, has nats-server load each of the stream's blocks: a cost of the benchmark, not of the
    session)."""
    nc = await nats.connect(nats_url)
    samples: list[tuple[int, dict[str, float]]] = []
    try:
        command = StartLoop(session_id=str(uuid.uuid4()), project_name=repo.name, project_path=str(repo),
                            goal="Write the benchmark steps", max_iterations=iterations, script="bench")
        view = await request(nc, subjects.request("orchestrator", "start_loop"), command, LoopView, timeout=30)
        deadline = time.monotonic() + 120 + 10 * iterations
        while time.monotonic() < deadline:
            # The summary, not the session's view: a view of every iteration would be a cost growing with the run.
            listed = await request(nc, subjects.request("orchestrator", "list_loops"), ListLoops(limit=1000),
                                   LoopList, timeout=30)
            summary = next(s for s in listed.items if s.id == view.id)
            cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
            samples.append((summary.total_commits, {k: v for k, v in cpu.items() if v is not None}))
            if summary.status not in ("pending", "running"):
                break
            await asyncio.sleep(0.25)
        at_end["peak_rss_mb"] = {name: peak_rss_mb(pid) for name, pid in pids.items()}
        at_end["rss_mb"] = {name: status_mb(pid, "VmRSS") for name, pid in pids.items()}
        ended = await iteration_ends(nc, view.id)
    finally:
        await nc.close()
    return view, summary, ended, samples


async def iteration_ends(nc: Any, session_id: str) -> list[datetime]:
    """When each iteration of the session ended, as recorded (``loop:iteration_completed``), read back from the
    event stream: the session's view holds every iteration's prompt and output, more than one reply may carry
    after a thousand iterations."""
    js = nc.jetstream()
    sub = await js.subscribe(f"{subjects.EVENTS_PREFIX}.{session_id}.>", ordered_consumer=True)
    ends: dict[int, datetime] = {}
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=5)
            except nats.errors.TimeoutError:
                return [ends[n] for n in sorted(ends)]
            event = json.loads(msg.data)
            if event.get("type") == "loop:iteration_completed":
                ends[event["iteration_number"]] = datetime.fromisoformat(event["occurred_at"])
    finally:
        await sub.unsubscribe()


def cpu_per_iteration(samples: list[tuple[int, dict[str, float]]], total: int) -> dict[str, dict[str, float]]:
    """CPU ms per iteration of each process over the first and the last tenth of the iterations."""
    tenth = max(1, total // 10)

    def between(lo: int, hi: int) -> dict[str, float]:
        first = next((s for s in samples if s[0] >= lo), None)
        last = next((s for s in samples if s[0] >= hi), samples[-1])
        if first is None or last[0] <= first[0]:
            return {}
        n = last[0] - first[0]
        return {name: round((last[1].get(name, 0) - first[1].get(name, 0)) * 1000 / n, 1) for name in first[1]}

    return {"first_tenth": between(0, tenth), "last_tenth": between(total - tenth, total)}


MIN_STEPS = 30
"""A size of fewer iterations runs as many sessions of that size as it takes to measure this many (at most 5), one
after another on the same system, each session's first iteration left out: the median of a 10-iteration session's
nine iterations moved between 45 and 59 ms from one run to the next on the shared 2-core machine."""


def loop_size(tmp: Path, iterations: int, files: str = "new") -> dict[str, Any]:
    with ScriptedModelServer(scenario(iterations, files=files)) as model:
        system = LocalSystem(tmp / "data", model.base_url, services=LOOP_SERVICES,
                             extra_env={"AUTARCH_LOOP_MAX_ITERATIONS_LIMIT": str(max(iterations, 200)),
                                        "AUTARCH_LOOP_ITERATION_TIMEOUT": "600"})
        system.start(timeout=120)
        try:
            pids = processes(system)
            model_ms = model_request_ms(model.base_url)
            sessions = 0
            firsts: list[float] = []
            steps: list[float] = []
            started = time.monotonic()
            while True:
                sessions += 1
                repo = make_repo(tmp / f"repo{sessions}")
                at_end: dict[str, Any] = {}
                view, summary, ends, samples = asyncio.run(
                    run_loop(f"nats://127.0.0.1:{system.nats_port}", repo, iterations, pids, at_end))
                previous: datetime = view.created_at
                own = []
                for end in ends:
                    own.append((end - previous).total_seconds() * 1000 - 2 * model_ms)
                    previous = end
                if len(own) > 1:
                    firsts.append(own[0])
                    own = own[1:]
                steps.extend(own)
                if len(steps) >= MIN_STEPS or sessions >= 5 or summary.status != "complete":
                    break
            wall = time.monotonic() - started
            memory = {name: peak_rss_mb(pid) for name, pid in pids.items()}
        finally:
            system.stop()
    first = firsts[0] if firsts else None
    parts = deciles(steps) if steps else []
    return {
        "iterations": iterations, "files": files, "first_step_ms": round(first, 1) if first is not None else None,
        "sessions_pooled": sessions,
        "status": summary.status, "commits": summary.total_commits, "wall_s": round(wall, 1),
        "model_request_ms": round(model_ms, 3),
        "step_ms_median": round(statistics.median(steps), 1) if steps else None,
        "step_ms_deciles": [round(d, 1) for d in parts],
        "decile_ratio": round(parts[-1] / parts[0], 2) if parts else None,
        "cpu_ms_per_iteration": cpu_per_iteration(samples, len(own)),
        "peak_rss_mb": memory,
        "peak_rss_mb_session": at_end.get("peak_rss_mb"),
        "rss_mb_session_end": at_end.get("rss_mb"),
    }


def loop_curve(tmp: Path, sizes: list[int], files: str = "new") -> dict[str, Any]:
    """``files="new"``: each iteration adds a file, so the worktree the git service checks every iteration grows
    with the session (as a loop building something does); ``"same"``: each rewrites one file, so only the history
    grows. The two apart tell a cost of the history from a cost of the work's size."""
    what = "one session of {n} iterations" + (", each rewriting the same file" if files == "same" else "")
    return curve("loop" if files == "new" else "loop_same_file", what, sizes,
                 lambda n: loop_size(tmp / f"loop{n}-{files}", n, files), size_key="iterations")


def curve(name: str, what: str, sizes: list[int], run: Any, *, size_key: str) -> dict[str, Any]:
    runs = []
    for n in sizes:
        print(f"{name}: {what.format(n=n)} …", flush=True)
        result = run(n)
        print(f"  {result['status']} in {result['wall_s']} s; per-step ms by decile {result['step_ms_deciles']}",
              flush=True)
        runs.append(result)
    smallest, largest = runs[0], runs[-1]
    ratio = (round(largest["step_ms_median"] / smallest["step_ms_median"], 2)
             if smallest["step_ms_median"] and largest["step_ms_median"] else None)
    return {"sizes": sizes, "runs": runs, "ratio": ratio, "goal": GOAL_RATIO,
            "largest_complete": largest["status"] == "complete" and largest["commits"] == largest[size_key]}


def workflow_scenario(pulses: int) -> dict[str, Any]:
    """The demo's scenario with a plan of ``pulses`` chained pulses, each writing its own file."""
    scenario = demo_scenario()
    scripts = scenario["scripts"]
    plan = [{"id": f"pulse-{k}", "title": f"Step {k}", "description": f"Write bench/p{k}.py.",
             "expectedChanges": [f"bench/p{k}.py"], "estimatedSize": "small",
             **({"dependsOn": [f"pulse-{k - 1}"]} if k > 1 else {})} for k in range(1, pulses + 1)]
    submit = {"type": "tool_use", "name": "submit_plan",
              "input": {"approachSummary": f"{pulses} small steps, one file each.", "pulses": plan}}
    scripts["plan"] = [{"content": [submit]}, "Planned."]
    for key in [k for k in scripts if k.startswith("pulsing")]:
        del scripts[key]
    for k in range(1, pulses + 1):
        write = {"type": "tool_use", "name": "write_file",
                 "input": {"reason": "This pulse's step", "path": f"bench/p{k}.py", "content": f"STEP = {k}\n"}}
        done = {"type": "tool_use", "name": "complete_pulse",
                "input": {"summary": f"feat(bench): step {k}", "filesChanged": [f"bench/p{k}.py"]}}
        scripts[f"pulsing:pulse-{k}"] = [{"content": [write]}, {"content": [done]}, "Pulse complete."]
    # A review that looks at nothing in particular and approves (the demo's comments a file no pulse touches).
    verdict = {"type": "tool_use", "name": "complete_review",
               "input": {"reason": "Record the verdict", "recommendation": "approve", "summary": "Every step is in."}}
    scripts["review"] = [{"content": [verdict]}, "Review complete."]
    return scenario


def discussion_request_ms(base_url: str, samples: int = 50) -> float:
    """The scripted model's own time for one request of the workflow scenario (its ``discussion`` script), median."""
    body = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
            "system": "autarch-role: discussion\n",
            "tools": [{"name": "read_file", "description": "r", "input_schema": {"type": "object"}}]}
    headers = {"x-api-key": "scripted", "anthropic-version": "2023-06-01"}
    times = []
    with httpx.Client(base_url=base_url, trust_env=False) as client:
        for _ in range(samples):
            started = time.perf_counter()
            client.post("/v1/messages", json=body, headers=headers).raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def workflow_size(tmp: Path, pulses: int) -> dict[str, Any]:
    """One workflow of ``pulses`` chained pulses; a size under :data:`MIN_STEPS` pulses runs as many workflows of it
    as it takes to measure that many steps (at most 30), one after another on the same system: a workflow of 2
    pulses has a single step (its first pulse, timed from its start, is reported apart)."""
    scenario = workflow_scenario(pulses)
    steps: list[float] = []
    firsts: list[float] = []
    samples: list[tuple[int, dict[str, float]]] = []
    pids: dict[str, int] = {}

    with ScriptedModelServer(scenario) as model:
        system = LocalSystem(tmp / "data", model.base_url, services=WORKFLOW_SERVICES)
        system.start(timeout=120)
        try:
            pids.update(processes(system))
            model_ms = discussion_request_ms(model.base_url)
            client = system.client(timeout=60)
            started = time.monotonic()
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            workflows = 0
            while True:
                workflows += 1
                ends: list[datetime] = []
                first_start: list[datetime] = []
                samples.clear()

                def on_event(event: Any, _received: float, ends: list[datetime] = ends,
                             first_start: list[datetime] = first_start) -> None:
                    kind = event.get("type")
                    if kind == "pulse:started" and not first_start:
                        first_start.append(datetime.fromisoformat(event["occurred_at"]))
                        samples.append((0, {k: v for k, v in ((n, cpu_seconds(p)) for n, p in pids.items())
                                            if v is not None}))
                    elif kind == "pulse:completed":
                        ends.append(datetime.fromisoformat(event["occurred_at"]))
                        samples.append((len(ends), {k: v for k, v in ((n, cpu_seconds(p)) for n, p in pids.items())
                                                    if v is not None}))

                repo = tmp / f"repo{workflows}"
                make_sample_repo(repo, scenario["files"])
                wid = create_workflow(client, repo)
                outcome = drive(client, wid, timeout=600 + 20 * pulses, alive=system.alive, on_event=on_event)
                own = []
                previous = first_start[0] if first_start else None
                for end in ends:
                    if previous is not None:
                        own.append((end - previous).total_seconds() * 1000 - 3 * model_ms)
                    previous = end
                if own:
                    firsts.append(own[0])
                steps.extend(own[1:])
                if len(steps) >= MIN_STEPS or workflows >= 30 or outcome.status != "completed":
                    break
            wall = time.monotonic() - started
            after = {name: cpu_seconds(pid) for name, pid in pids.items()}
            memory = {name: peak_rss_mb(pid) for name, pid in pids.items()}
        finally:
            system.stop()
    parts = deciles(steps) if steps else []
    status = "complete" if outcome.status == "completed" else f"{outcome.status}: {outcome.message}"
    return {
        "pulses": pulses, "first_step_ms": round(firsts[0], 1) if firsts else None, "status": status,
        "workflows_pooled": workflows, "commits": len(ends), "wall_s": round(wall, 1),
        "model_request_ms": round(model_ms, 3),
        "step_ms_median": round(statistics.median(steps), 1) if steps else None,
        "step_ms_deciles": [round(d, 1) for d in parts],
        "decile_ratio": round(parts[-1] / parts[0], 2) if parts else None,
        "cpu_ms_per_pulse": {name: round((after[name] - before[name]) * 1000 / max(1, pulses * workflows), 1)  # type: ignore[operator]  # the CPU figures are numbers
                             for name in pids if after.get(name) is not None and before.get(name) is not None},
        "cpu_ms_per_pulse_tenths": cpu_per_iteration(samples, len(ends)),
        "peak_rss_mb": memory,
    }


def workflow_curve(tmp: Path, sizes: list[int]) -> dict[str, Any]:
    return curve("workflow", "one workflow of {n} pulses", sizes, lambda n: workflow_size(tmp / f"wf{n}", n),
                 size_key="pulses")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curves", default=",".join(ALL_CURVES),
                        help="comma-separated, of: " + ", ".join(ALL_CURVES) + " (default: all)")
    parser.add_argument("--loop-sizes", default="10,100,1000")
    parser.add_argument("--workflow-sizes", default="2,20,200")
    parser.add_argument("--swarm-sizes", default="6,30,300")
    parser.add_argument("--session-sizes", default="5,50,500")
    args = parser.parse_args()
    curves = [c.strip() for c in args.curves.split(",") if c.strip()]
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="autarch-bench-growth-") as tmp_dir:
        tmp = Path(tmp_dir)
        if "loop" in curves:
            figures["loop"] = loop_curve(tmp, [int(s) for s in args.loop_sizes.split(",")])
        if "loop_same_file" in curves:
            figures["loop_same_file"] = loop_curve(tmp, [int(s) for s in args.loop_sizes.split(",")], "same")
        if "workflow" in curves:
            figures["workflow"] = workflow_curve(tmp, [int(s) for s in args.workflow_sizes.split(",")])
        if "swarm" in curves:
            from growth_swarm import swarm_curve  # type: ignore[import-not-found]  # a sibling script, found from this folder
            figures["swarm"] = swarm_curve(tmp, [int(s) for s in args.swarm_sizes.split(",")])
        if "agent_session" in curves:
            from growth_session import session_curve  # type: ignore[import-not-found]  # a sibling script, found from this folder
            figures["agent_session"] = session_curve(tmp, [int(s) for s in args.session_sizes.split(",")])
        for name, measure in CURVES_ELSEWHERE.items():
            if name in curves:
                figures[name] = measure(tmp / name)
    for name, what in PENDING.items():
        figures.setdefault(name, {"measured": False, "would_measure": what})
    for name, curve in figures.items():
        if curve.get("ratio") is not None:
            print(f"{name}: largest/smallest per-step {curve['ratio']} (goal ≤ {curve.get('goal', GOAL_RATIO)})")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
