"""Benchmark: what the sandbox, and its resource limits, cost an agent's ``shell`` call.

A ``shell`` call (``echo hi``, through the executor, in process, exactly as the tools service runs it) is timed
unconfined (``sandbox = "off"``), confined with every resource limit off (all ``sandbox_*`` limits 0), and
confined with the default limits, in turn (in a new random order every round), so all three see the same machine
load; then the same for a command
that does some work (the tools service's own Python importing a module), where the fixed cost matters less.
Figures are p50 and p99 in milliseconds; "added" is confined minus unconfined at the same percentile, and "limits"
is confined with the default limits minus confined without any.

Calls are ``--gap`` seconds apart (default 0.1): an agent's calls are a model turn apart, and the launch server
uses the pause to ready its spare launcher (``services/tools/sandbox_zygote.py``); ``--gap 0`` times them back to
back. ``unshare -Urpn --fork true`` (util-linux, when installed) is timed too, as a reference for what creating
the same namespaces costs by itself. The machine's load average is printed with the figures.

The last line printed is JSON.

    .venv/bin/python tests/benchmarks/sandbox.py [--calls 100] [--gap 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from autarch.contracts.tools import ToolCall
from autarch.runtime.settings import Settings
from autarch.services.tools.executor import ToolExecutor
from autarch.services.tools.sandbox import capabilities
from autarch.services.tools.service import build_executor

COMMANDS = {"echo": "echo hi", "python": f"{sys.executable} -c 'import json; print(json.dumps([1]))'"}
NO_LIMITS = {"sandbox_memory_mib": 0, "sandbox_processes": 0, "sandbox_file_size_mib": 0, "sandbox_write_mib": 0,
             "sandbox_cpu_seconds": 0}
MODES = {"off": {"sandbox": "off"}, "on_no_limits": NO_LIMITS, "on": {}}


def _percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered), 1), "p99_ms": round(_percentile(ordered, 0.99), 1)}


async def _call(executor: ToolExecutor, root: Path, command: str) -> float:
    call = ToolCall(session_id="bench", tool_call_id=uuid.uuid4().hex, role="pulsing", root=str(root), tool="shell",
                    arguments={"reason": "benchmark", "command": command})
    started = time.perf_counter()
    result = await executor.call(call)
    elapsed = (time.perf_counter() - started) * 1000
    if '"exit_code":0' not in result.content:
        raise SystemExit(f"the benchmark command failed: {result.content}")
    return elapsed


async def _measure(calls: int, gap: float) -> dict[str, dict[str, dict[str, float]]]:
    tmp = Path(tempfile.mkdtemp(prefix="autarch-bench-"))
    root = tmp / "worktree"
    root.mkdir()
    executors = {mode: build_executor(Settings(data_dir=str(tmp / f"data-{mode}"), **overrides), grep_workers=0)  # type: ignore[arg-type]  # settings by name
                 for mode, overrides in MODES.items()}
    try:
        out: dict[str, dict[str, dict[str, float]]] = {}
        for name, command in COMMANDS.items():
            samples: dict[str, list[float]] = {mode: [] for mode in executors}
            order = list(executors)
            shuffle = random.Random(7).shuffle
            for i in range(calls + 5):
                # A new order every round: a mode must not always follow the same other one, which would have it
                # pay for that one's after-work (a launch server readying its next spare).
                shuffle(order)
                for mode in order:
                    executor = executors[mode]
                    await asyncio.sleep(gap)
                    elapsed = await _call(executor, root, command)
                    if i >= 5:  # warm-up: first imports, the capability probe, the launch server's start
                        samples[mode].append(elapsed)
            figures = {mode: _figures(values) for mode, values in samples.items()}
            for label, mode, base in (("added_ms", "on", "off"), ("added_no_limits_ms", "on_no_limits", "off"),
                                      ("limits_ms", "on", "on_no_limits")):
                figures[label] = {p: round(figures[mode][f"{p}_ms"] - figures[base][f"{p}_ms"], 1)
                                  for p in ("p50", "p99")}
            out[name] = figures
        return out
    finally:
        for executor in executors.values():
            executor.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _unshare_reference(calls: int) -> dict[str, float] | None:
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        subprocess.run([unshare, "-Urpn", "--fork", "true"], check=False, capture_output=True)
        samples.append((time.perf_counter() - started) * 1000)
    return _figures(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--gap", type=float, default=0.1, help="seconds between calls (0: back to back)")
    args = parser.parse_args()
    caps = capabilities()
    if caps.landlock_abi < 1:
        print("no Landlock on this kernel: the sandbox would refuse (or use bubblewrap); nothing to measure")
        print(json.dumps({"landlock_abi": 0}))
        return 0
    load_before = os.getloadavg()
    figures = asyncio.run(_measure(args.calls, args.gap))
    load_after = os.getloadavg()
    for name, result in figures.items():
        print(f"shell {COMMANDS[name]!r}:")
        for mode in MODES:
            print(f"  {mode:13s} p50 {result[mode]['p50_ms']:6.1f} ms   p99 {result[mode]['p99_ms']:6.1f} ms")
        for label in ("added_ms", "added_no_limits_ms", "limits_ms"):
            print(f"  {label:19s} p50 {result[label]['p50']:+6.1f} ms   p99 {result[label]['p99']:+6.1f} ms")
    reference = _unshare_reference(args.calls)
    if reference:
        print(f"reference: unshare -Urpn --fork true p50 {reference['p50_ms']} ms")
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
    summary = {"landlock_abi": caps.landlock_abi, "namespaces": caps.namespaces, "calls": args.calls,
               "gap_s": args.gap, "load_before": load_before, "load_after": load_after, **figures,
               "unshare_reference": reference}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
