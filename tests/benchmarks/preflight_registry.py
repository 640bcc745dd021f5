"""Benchmark: a real project's preflight through the registry proxy, against an open network.

The more-itertools 10.5.0 sdist (``pip download more-itertools==10.5.0 --no-binary :all: --no-deps``, or
``--sdist PATH``) is unpacked into a git repository; each run gets a fresh copy of it and one preflight ``shell``
call, through the executor exactly as the tools service runs it:

    python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/python -m unittest

(a venv, the build backend fetched for the editable install, its tests). ``proxy`` runs it with the default
settings (no network namespace exit but the registry proxy, which reaches PyPI or this machine's configured
mirrors); ``open`` with ``sandbox_network = true``. The two alternate, so both see the same machine load. pip's
cache lives in the call's private HOME, so every run downloads what it needs.

Before that, the fixed cost: the p50 of 30 preflight calls of ``echo hi`` in each mode (the gate and the forwarder
are what ``proxy`` adds; a preflight call also runs ``git status`` before and after its command).

The last line printed is JSON: the echo p50s, seconds per run and the median of each mode, the hosts the proxy
reached, the load.

    .venv/bin/python tests/benchmarks/preflight_registry.py [--rounds 3] [--sdist more-itertools-10.5.0.tar.gz]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

from autarch.contracts.tools import ToolCall
from autarch.runtime.settings import Settings
from autarch.services.tools.executor import ToolExecutor
from autarch.services.tools.service import build_executor

COMMAND = ("python3 -m venv .venv && {pip_env}.venv/bin/pip install -q --disable-pip-version-check -e . && "
           ".venv/bin/python -m unittest 2>&1 | tail -3")
PYPI_ONLY = "env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "
"""``--pypi-only``: pip without this machine's configured mirrors (no config file, no find-links), so every
package comes from PyPI over the network."""


class _Reached(logging.Handler):
    """Collects the proxy's "reached" log lines (what each preflight call fetched through it)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _project(tmp: Path, sdist: str | None) -> Path:
    """The sdist unpacked and committed as a git repository."""
    if sdist is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "more-itertools==10.5.0", "--no-binary",
                        ":all:", "--no-deps", "-d", str(tmp)], check=True)
        sdist = str(next(tmp.glob("more*itertools-10.5.0.tar.gz")))
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp, filter="data")
    repo = next(p for p in tmp.iterdir() if p.is_dir() and p.name.startswith("more"))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "more-itertools 10.5.0"], cwd=repo, check=True)
    return repo


async def _run(executor: ToolExecutor, repo: Path, copy: Path, command: str) -> tuple[float, dict]:
    shutil.copytree(repo, copy, symlinks=True)
    call = ToolCall(session_id="bench", tool_call_id=uuid.uuid4().hex, role="preflight", root=str(copy),
                    tool="shell", arguments={"reason": "benchmark", "command": command, "timeoutSeconds": 300})
    started = time.perf_counter()
    result = await executor.call(call)
    elapsed = time.perf_counter() - started
    value = json.loads(result.content)
    if value.get("exit_code") != 0 or "OK" not in value.get("stdout", ""):
        raise SystemExit(f"the preflight command failed: {json.dumps(value, indent=1)}")
    return elapsed, value


async def _echo(executors: dict[str, ToolExecutor], repo: Path, copy: Path, calls: int = 30) -> dict[str, float]:
    """The fixed cost of a preflight call: ``echo hi`` with the proxy (a gate, the forwarder) and without."""
    shutil.copytree(repo, copy, symlinks=True)
    samples: dict[str, list[float]] = {mode: [] for mode in executors}
    for i in range(calls + 3):
        for mode, executor in executors.items():
            call = ToolCall(session_id="bench", tool_call_id=uuid.uuid4().hex, role="preflight", root=str(copy),
                            tool="shell", arguments={"reason": "benchmark", "command": "echo hi"})
            started = time.perf_counter()
            result = await executor.call(call)
            if i >= 3:  # warm-up
                samples[mode].append((time.perf_counter() - started) * 1000)
            if '"exit_code":0' not in result.content:
                raise SystemExit(f"echo hi failed: {result.content}")
    return {mode: round(statistics.median(values), 1) for mode, values in samples.items()}


async def _measure(rounds: int, sdist: str | None, *, pypi_only: bool) -> dict:
    command = COMMAND.format(pip_env=PYPI_ONLY if pypi_only else "")
    reached = _Reached()
    logging.getLogger("tools.egress").addHandler(reached)
    logging.getLogger("tools.egress").setLevel(logging.INFO)
    tmp = Path(tempfile.mkdtemp(prefix="autarch-bench-preflight-"))
    try:
        repo = _project(tmp, sdist)
        executors = {
            "proxy": build_executor(Settings(data_dir=str(tmp / "data-proxy")), grep_workers=0),
            "open": build_executor(Settings(data_dir=str(tmp / "data-open"), sandbox_network=True), grep_workers=0),
        }
        seconds: dict[str, list[float]] = {mode: [] for mode in executors}
        tests = ""
        try:
            echo = await _echo(executors, repo, tmp / "echo")
            print(f"preflight 'echo hi', p50 ms: {echo}", flush=True)
            for i in range(rounds):
                for mode, executor in executors.items():
                    elapsed, value = await _run(executor, repo, tmp / f"run-{mode}-{i}", command)
                    seconds[mode].append(round(elapsed, 2))
                    tests = next((line for line in value["stdout"].splitlines() if line.startswith("Ran ")), tests)
                    print(f"{mode:5} round {i + 1}: {elapsed:6.2f} s  ({tests})", flush=True)
        finally:
            for executor in executors.values():
                executor.close()
        medians = {mode: round(statistics.median(values), 2) for mode, values in seconds.items()}
        return {"pypi_only": pypi_only, "echo_p50_ms": echo, "seconds": seconds, "median_s": medians,
                "proxy_minus_open_s": round(medians["proxy"] - medians["open"], 2), "tests": tests,
                "proxy_reached": reached.lines[-1].split(" reached ", 1)[-1] if reached.lines else None,
                "load_avg": [round(x, 2) for x in os.getloadavg()]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sdist", help="the more-itertools 10.5.0 sdist (default: pip download it)")
    parser.add_argument("--pypi-only", action="store_true", help="ignore this machine's pip mirrors (see PYPI_ONLY)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    print(json.dumps(asyncio.run(_measure(args.rounds, args.sdist, pypi_only=args.pypi_only))))


if __name__ == "__main__":
    main()
