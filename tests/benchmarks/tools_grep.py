"""Benchmark: the tools service's grep against ripgrep over the Python standard library, and the NATS hop.

The tree is a copy of the installed standard library (``sysconfig``'s ``stdlib``, without
``site-packages`` and ``__pycache__``): real code we did not write, ~2,400 files, ~100 MB with
the test suite and a static library. For each query, the ``grep`` tool call (through the
executor, in process, grep workers started as the service starts them) and ``rg`` (a fresh
process, as an agent would run it) are timed alternately so both see the same machine load;
the figure is the median. ``rg`` runs with ``--hidden`` (the tool searches hidden files) and
with globs excluding the files the sensitivity gate keeps out of grep. The full result sets
(``path``, line number) are compared.

Then one small tool call (``read_file`` of a short file) is timed over NATS (request to the
tools service) and in process; the difference is the cost of the hop (p50/p99, µs).

The last line printed is JSON. Without ``rg`` the benchmark says so, still measures the tool,
and exits 0.

    .venv/bin/python tests/benchmarks/tools_grep.py [--runs 7] [--calls 400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.contracts import subjects
from autarch.contracts.tools import ToolCall, ToolResult
from autarch.runtime.bus import connect
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.tools.context import ToolContext
from autarch.services.tools.grep import compile_pattern
from autarch.services.tools.paths import Worktree
from autarch.services.tools.reading import grep_matches
from autarch.services.tools.sensitivity import is_sensitive_path
from autarch.services.tools.service import build_executor, start

QUERIES = [
    ("def __init__", False),
    (r"class \w+Error\(", False),
    ("socket", False),
    ("TODO", True),
    (r"^\s*return None$", False),
]
GOAL = 1.5


def copy_stdlib(target: Path) -> Path:
    source = Path(sysconfig.get_paths()["stdlib"])
    tree = target / "stdlib"
    shutil.copytree(source, tree, symlinks=True, ignore=shutil.ignore_patterns("site-packages", "__pycache__"))
    return tree


def tree_size(tree: Path) -> tuple[int, int]:
    files = [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()]
    return len(files), sum(p.stat().st_size for p in files)


def rg_command(rg: str, tree: Path, pattern: str, case_sensitive: bool) -> list[str]:
    excluded = sorted({p.name for p in tree.rglob("*") if is_sensitive_path(str(p.relative_to(tree)))})
    globs = [arg for name in excluded for arg in ("-g", f"!{name}")]
    case = "-s" if case_sensitive else "-i"
    return [rg, case, "--hidden", "--null", "-n", "--no-heading", "--no-messages", *globs, "-e", pattern, "."]


def rg_matches(output: bytes) -> set[tuple[str, int]]:
    found = set()
    for line in output.split(b"\n"):
        if not line:
            continue
        path, _, rest = line.partition(b"\0")
        number = rest.split(b":", 1)[0]
        found.add((os.path.normpath(path.decode("utf-8", "surrogateescape")), int(number)))
    return found


def grep_call(tree: Path, pattern: str, case_sensitive: bool) -> ToolCall:
    return ToolCall(
        session_id="bench",
        tool_call_id=uuid.uuid4().hex,
        role="pulsing",
        root=str(tree),
        tool="grep",
        arguments={"reason": "benchmark", "pattern": pattern, "caseSensitive": case_sensitive},
    )


def worker_cpu_seconds(executor: object) -> float:
    """CPU time (user + system) used so far by the grep worker processes (from ``/proc``)."""
    total = 0
    for worker in getattr(executor.engine, "_pool", []):  # type: ignore[attr-defined]  # the engine's private pool, measured here
        try:
            with open(f"/proc/{worker.process.pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def grep_benchmark(tree: Path, data: Path, runs: int, rg: str | None, workers: int | None) -> list[dict]:
    executor = build_executor(Settings(data_dir=str(data), tools_grep_workers=workers))
    await asyncio.to_thread(executor.engine.start)
    results = []
    try:
        ctx = ToolContext(
            call=grep_call(tree, "x", False),
            variant="base",
            worktree=Worktree(tree),
            store=executor.store,
            engine=executor.engine,
            forwarder=executor.forwarder,
            redactor=executor.redactor,
            settings=executor.settings,
        )
        for number, (pattern, case_sensitive) in enumerate(QUERIES):
            started = time.perf_counter()
            await executor.call(grep_call(tree, pattern, case_sensitive))  # warms the workers' file caches
            first_ms = (time.perf_counter() - started) * 1000
            ours_ms: list[float] = []
            rg_ms: list[float] = []
            ours_cpu = rg_cpu = 0.0
            rg_output = b""
            for _ in range(runs):
                cpu = time.process_time() + worker_cpu_seconds(executor)
                started = time.perf_counter()
                result = await executor.call(grep_call(tree, pattern, case_sensitive))
                ours_ms.append((time.perf_counter() - started) * 1000)
                ours_cpu += time.process_time() + worker_cpu_seconds(executor) - cpu
                assert not result.is_error, result.content
                if rg:
                    command = rg_command(rg, tree, pattern, case_sensitive)
                    cpu = children_cpu_seconds()
                    started = time.perf_counter()
                    done = subprocess.run(command, cwd=tree, capture_output=True, check=False)
                    rg_ms.append((time.perf_counter() - started) * 1000)
                    rg_cpu += children_cpu_seconds() - cpu
                    rg_output = done.stdout
            ours = set(await asyncio.to_thread(grep_matches, ctx, compile_pattern(pattern, case_sensitive)))
            entry: dict = {
                "pattern": pattern,
                "case_sensitive": case_sensitive,
                "matches": len(ours),
                "ours_ms": round(statistics.median(ours_ms), 1),
                "ours_min_ms": round(min(ours_ms), 1),
                "ours_cpu_ms": round(ours_cpu / runs * 1000, 1),
            }
            if number == 0:
                entry["ours_first_call_ms"] = round(first_ms, 1)  # empty file caches: every file read
            if rg:
                theirs = rg_matches(rg_output)
                entry.update(
                    rg_ms=round(statistics.median(rg_ms), 1),
                    rg_min_ms=round(min(rg_ms), 1),
                    rg_cpu_ms=round(rg_cpu / runs * 1000, 1),
                    ratio=round(statistics.median(ours_ms) / statistics.median(rg_ms), 2),
                    identical=ours == theirs,
                    rg_matches=len(theirs),
                )
                if ours != theirs:
                    entry["only_ours"] = sorted(ours - theirs)[:5]
                    entry["only_rg"] = sorted(theirs - ours)[:5]
            results.append(entry)
            print(json.dumps(entry), flush=True)
    finally:
        executor.close()
    return results


async def nats_overhead(tree: Path, data: Path, calls: int) -> dict:
    (tree / "bench_small.txt").write_text("hello\n")
    server = EmbeddedNats(data / "nats").start()
    try:
        nc = await connect(server.url, name="bench")
        settings = Settings(data_dir=str(data / "svc"), tools_grep_workers=0)
        stop = await start(nc, settings)
        local = build_executor(Settings(data_dir=str(data / "local")), grep_workers=0)
        subject = subjects.request("tools", "call")

        def small_call() -> ToolCall:
            return ToolCall(
                session_id="bench",
                tool_call_id=uuid.uuid4().hex,
                role="pulsing",
                root=str(tree),
                tool="read_file",
                arguments={"reason": "benchmark", "path": "bench_small.txt"},
            )

        try:
            for _ in range(20):  # warm both paths
                await request(nc, subject, small_call(), ToolResult)
                await local.call(small_call())
            over_nats, in_process = [], []
            for _ in range(calls):
                started = time.perf_counter()
                await request(nc, subject, small_call(), ToolResult)
                over_nats.append((time.perf_counter() - started) * 1e6)
                started = time.perf_counter()
                await local.call(small_call())
                in_process.append((time.perf_counter() - started) * 1e6)
        finally:
            local.close()
            await stop()
            await nc.drain()
    finally:
        server.stop()
    figures = {
        "calls": calls,
        "nats_p50_us": round(percentile(over_nats, 0.50)),
        "nats_p99_us": round(percentile(over_nats, 0.99)),
        "in_process_p50_us": round(percentile(in_process, 0.50)),
        "in_process_p99_us": round(percentile(in_process, 0.99)),
    }
    figures["overhead_p50_us"] = figures["nats_p50_us"] - figures["in_process_p50_us"]
    figures["overhead_p99_us"] = figures["nats_p99_us"] - figures["in_process_p99_us"]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per query and tool (median reported)")
    parser.add_argument("--calls", type=int, default=400, help="small tool calls timed for the NATS overhead")
    parser.add_argument("--workers", type=int, help="grep worker processes (default: the service's, one per CPU)")
    args = parser.parse_args()
    rg = shutil.which("rg")
    if rg is None:
        print("ripgrep (rg) is not installed (Debian package 'ripgrep'): measuring the tool alone, no comparison")
    with tempfile.TemporaryDirectory(prefix="autarch-bench-") as tmp:
        base = Path(tmp)
        tree = copy_stdlib(base)
        files, size = tree_size(tree)
        stdlib = sysconfig.get_paths()["stdlib"]
        print(f"tree: copy of {stdlib} ({files} files, {size / 1e6:.1f} MB), cpus {os.cpu_count()}")
        queries = asyncio.run(grep_benchmark(tree, base / "data", args.runs, rg, args.workers))
        overhead = asyncio.run(nats_overhead(tree, base / "data2", args.calls))
        nats_p50, local_p50 = overhead["nats_p50_us"], overhead["in_process_p50_us"]
        print(f"one read_file call: over NATS p50 {nats_p50} µs, in process {local_p50} µs")
    summary: dict = {
        "benchmark": "tools_grep",
        "tree": "python stdlib copy (no site-packages, no __pycache__)",
        "files": files,
        "bytes": size,
        "cpus": os.cpu_count(),
        "grep_workers": args.workers if args.workers is not None else "one per CPU",
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "queries": queries,
        "nats": overhead,
    }
    if rg is None:
        summary.update(rg=None, note="ripgrep not installed; no comparison")
    else:
        ratios = [q["ratio"] for q in queries]
        summary.update(
            rg=subprocess.run([rg, "--version"], capture_output=True, text=True).stdout.split("\n")[0],
            ratio_median=round(statistics.median(ratios), 2),
            ratio_max=max(ratios),
            goal_ratio=GOAL,
            goal_met=statistics.median(ratios) <= GOAL,
            identical=all(q["identical"] for q in queries),
        )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
