"""Benchmark: starting subprocesses from a service's event loop, per child watcher (a script, not a test).

    .venv/bin/python tests/benchmarks/spawn.py [--spawns 200] [--concurrency 20] [--repeat 3]

The tools service starts a subprocess per shell call, three for a preflight command (``git status`` before
and after it). On Python 3.11, asyncio's default watcher starts a thread per subprocess and the loop waits until
that thread runs; ``runtime.process.watch_children_with_pidfds`` has the loop poll a pidfd instead. Each
round runs in a fresh interpreter: ``--spawns`` runs of ``true``, ``--concurrency`` at a time, while a 1 ms
ticker on the same loop records how late it wakes (what every other call of the service waits). The last
line is JSON: per watcher, the median over rounds of the wall time and of the ticker's p50/p99 lateness.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

ROUND = """
import asyncio, json, sys, time
from autarch.runtime.process import watch_children_with_pidfds

async def main(pidfd, spawns, concurrency):
    if pidfd:
        watch_children_with_pidfds()
    late, done = [], False
    async def tick():
        while not done:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append(time.perf_counter() - t - 0.001)
    ticker = asyncio.create_task(tick())
    async def one():
        proc = await asyncio.create_subprocess_exec("true")
        await proc.wait()
    started = time.perf_counter()
    for _ in range(spawns // concurrency):
        await asyncio.gather(*(one() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    done = True
    await ticker
    late.sort()
    watcher = type(asyncio.get_event_loop_policy().get_child_watcher()).__name__
    print(json.dumps({"watcher": watcher, "wall_ms": wall * 1000, "late_p50_ms": late[len(late) // 2] * 1000,
                      "late_p99_ms": late[int(len(late) * 0.99)] * 1000}))

asyncio.run(main(sys.argv[1] == "pidfd", int(sys.argv[2]), int(sys.argv[3])))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rounds: dict[str, list[dict]] = {"default": [], "pidfd": []}
    for _ in range(args.repeat):
        for mode in rounds:  # alternated, so a change in the machine's load hits both alike
            out = subprocess.run([sys.executable, "-c", ROUND, mode, str(args.spawns), str(args.concurrency)],
                                 capture_output=True, text=True, check=True).stdout
            rounds[mode].append(json.loads(out.splitlines()[-1]))
    report: dict = {"benchmark": "spawn", "python": sys.version.split()[0], "spawns": args.spawns,
                    "concurrency": args.concurrency, "repeat": args.repeat, "unix_time": int(time.time())}
    for mode, rows in rounds.items():
        report[mode] = {"watcher": rows[0]["watcher"],
                        **{key: round(statistics.median(r[key] for r in rows), 2)
                           for key in ("wall_ms", "late_p50_ms", "late_p99_ms")}}
        print(f"{mode:8} {report[mode]['watcher']:22} {args.spawns} spawns in {report[mode]['wall_ms']:.0f} ms, "
              f"loop late p50 {report[mode]['late_p50_ms']:.2f} / p99 {report[mode]['late_p99_ms']:.2f} ms")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
