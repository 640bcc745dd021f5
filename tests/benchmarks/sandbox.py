"""Benchmark: what the sandbox costs an agent's ``shell`` call.

A ``shell`` call (``echo hi``, through the executor, in process, exactly as the tools service runs it) is timed
with ``sandbox = "on"`` and ``sandbox = "off"`` alternately, so both see the same machine load; then the same for
a command that does some work (``python3 -c`` importing a module), where the fixed cost matters less. Figures are
p50 and p90 in milliseconds and the difference on, minus off, at the median. ``unshare -Urpn --fork true`` (util-linux,
when installed) is timed too, as a reference for what creating the same namespaces costs by itself.

The last line printed is JSON.

    .venv/bin/python tests/benchmarks/sandbox.py [--calls 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

COMMANDS = {"echo": "echo hi", "python": "python3 -c 'import json; print(json.dumps([1]))'"}


def _figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered), 1), "p90_ms": round(ordered[int(len(ordered) * 0.9)], 1)}


async def _call(executor: ToolExecutor, root: Path, command: str) -> float:
    call = ToolCall(session_id="bench", tool_call_id=uuid.uuid4().hex, role="pulsing", root=str(root), tool="shell",
                    arguments={"reason": "benchmark", "command": command})
    started = time.perf_counter()
    result = await executor.call(call)
    elapsed = (time.perf_counter() - started) * 1000
    if '"exit_code":0' not in result.content:
        raise SystemExit(f"the benchmark command failed: {result.content}")
    return elapsed


async def _measure(calls: int) -> dict[str, dict[str, dict[str, float]]]:
    tmp = Path(tempfile.mkdtemp(prefix="autarch-bench-"))
    root = tmp / "worktree"
    root.mkdir()
    executors = {mode: build_executor(Settings(data_dir=str(tmp / f"data-{mode}"), sandbox=mode), grep_workers=0)
                 for mode in ("on", "off")}
    try:
        out: dict[str, dict[str, dict[str, float]]] = {}
        for name, command in COMMANDS.items():
            samples: dict[str, list[float]] = {"on": [], "off": []}
            for i in range(calls + 5):
                for mode, executor in executors.items():
                    elapsed = await _call(executor, root, command)
                    if i >= 5:  # warm-up: first imports, the capability probe
                        samples[mode].append(elapsed)
            out[name] = {mode: _figures(values) for mode, values in samples.items()}
            out[name]["cost_ms"] = {"p50": round(out[name]["on"]["p50_ms"] - out[name]["off"]["p50_ms"], 1)}
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
    parser.add_argument("--calls", type=int, default=60)
    args = parser.parse_args()
    caps = capabilities()
    if caps.landlock_abi < 1:
        print("no Landlock on this kernel: the sandbox would refuse (or use bubblewrap); nothing to measure")
        print(json.dumps({"landlock_abi": 0}))
        return 0
    figures = asyncio.run(_measure(args.calls))
    for name, result in figures.items():
        print(f"shell {COMMANDS[name]!r}: sandbox on p50 {result['on']['p50_ms']} ms (p90 {result['on']['p90_ms']}), "
              f"off p50 {result['off']['p50_ms']} ms (p90 {result['off']['p90_ms']}); "
              f"the sandbox adds {result['cost_ms']['p50']} ms")
    reference = _unshare_reference(args.calls)
    if reference:
        print(f"reference: unshare -Urpn --fork true p50 {reference['p50_ms']} ms")
    summary = {"landlock_abi": caps.landlock_abi, "namespaces": caps.namespaces, "calls": args.calls,
               **figures, "unshare_reference": reference}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
