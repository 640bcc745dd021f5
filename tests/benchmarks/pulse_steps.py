"""Benchmark: the git service's share of one loop iteration as the worktree grows, with and without the watch.

An iteration of a loop that adds a file each time is, for the git service, a ``start_pulse`` (the clean check),
one new file, and a ``checkpoint_pulse`` (a scan like ``git add -A``, commit, fast-forward, reset). Both the
clean check and the checkpoint's scan ``stat`` every tracked file; the worktree watch (``services/git/watch.py``)
lets the clean check trust the checkpoint's scan when inotify saw nothing since.

Two worktrees of two copies of one repository are driven in turns, in process (no NATS hop), one by an engine
with the watch and one without, so both meet the same machine load. At each size (tracked files) the next
``--pulses`` iterations are timed; the figures are medians of CPU time (user + system) per call, which on this
machine swings less than wall time (file creation takes 0.3-0.9 ms here). The last line printed is JSON.

    .venv/bin/python tests/benchmarks/pulse_steps.py [--sizes 100,1000,10000] [--pulses 30]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autarch.contracts.git import CheckpointPulse, CreateWorkflowBranch, RegisterRepository, StartPulse
from autarch.services.git.engine import GitEngine

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "Autarch", "GIT_AUTHOR_EMAIL": "autarch@localhost",
           "GIT_COMMITTER_NAME": "Autarch", "GIT_COMMITTER_EMAIL": "autarch@localhost", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null"}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=GIT_ENV)


class Side:
    """One engine and its workflow worktree, adding a file under ``bench/`` each pulse."""

    def __init__(self, root: Path, repo: Path, *, watch: bool) -> None:
        self.engine = GitEngine(data_dir=root / "data", watch_worktrees=watch)
        registered = self.engine.register_repository(RegisterRepository(path=str(repo), base_branch="main"))
        view = self.engine.create_workflow_branch(
            CreateWorkflowBranch(run_id="loop", repository_id=registered.repository_id, branch="bench-loop"))
        self.worktree = Path(view.worktree_path)
        self.pulses = 0

    def pulse(self) -> tuple[float, float]:
        """One iteration; the CPU seconds of its clean check and of its checkpoint."""
        self.pulses += 1
        number = self.pulses
        started = time.process_time()
        self.engine.start_pulse(StartPulse(run_id="loop", pulse_id=f"i{number}"))
        checked = time.process_time()
        (self.worktree / "bench" / f"it{number}.py").write_text(f"STEP = {number}\n")
        written = time.process_time()
        self.engine.checkpoint_pulse(CheckpointPulse(run_id="loop", pulse_id=f"i{number}",
                                                     summary=f"feat: iteration {number}", skip_if_unchanged=True))
        return checked - started, time.process_time() - written


def make_repository(path: Path, files: int) -> None:
    """``files`` tracked files, 100 to a directory (``bench/`` holds only what the pulses add)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for i in range(files):
        directory = path / "src" / f"d{i // 100:04d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{i}.py").write_text(f"VALUE = {i}\n")
    (path / "bench").mkdir()
    (path / "bench" / "README").write_text("iterations write here\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="tracked files at each measured size")
    parser.add_argument("--pulses", type=int, default=30, help="iterations timed at each size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    figures: list[dict[str, object]] = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="autarch-bench-") as tmp:
            base = Path(tmp) / "repo"
            make_repository(base, size)
            shutil.copytree(base, Path(tmp) / "repo-off", symlinks=True)
            on = Side(Path(tmp) / "on", base, watch=True)
            off = Side(Path(tmp) / "off", Path(tmp) / "repo-off", watch=False)
            for _ in range(3):  # the watch's first checkpoints set its watches up; caches warm on both sides
                on.pulse()
                off.pulse()
            timed: dict[str, list[tuple[float, float]]] = {"watch": [], "scan": []}
            for _ in range(args.pulses):
                timed["watch"].append(on.pulse())
                timed["scan"].append(off.pulse())
            row: dict[str, object] = {"tracked_files": size + 1 + on.pulses}
            for name, samples in timed.items():
                check = statistics.median(s[0] for s in samples) * 1000
                checkpoint = statistics.median(s[1] for s in samples) * 1000
                row[name] = {"clean_check_cpu_ms": round(check, 2), "checkpoint_cpu_ms": round(checkpoint, 2),
                             "iteration_cpu_ms": round(check + checkpoint, 2)}
            row["watched_dirs"] = on.engine.watch.watched(on.worktree)
            figures.append(row)
            print(f"{row['tracked_files']:>7} files  clean check {row['watch']['clean_check_cpu_ms']:6.2f} ms "  # type: ignore[index]
                  f"(scan: {row['scan']['clean_check_cpu_ms']:6.2f})  checkpoint "  # type: ignore[index]
                  f"{row['watch']['checkpoint_cpu_ms']:6.2f} ms (scan side: {row['scan']['checkpoint_cpu_ms']:6.2f})",  # type: ignore[index]
                  file=sys.stderr, flush=True)
            on.engine.close()
            off.engine.close()

    def ratio(side: str, key: str) -> float:
        first, last = figures[0][side], figures[-1][side]
        return round(last[key] / first[key], 2)  # type: ignore[index]

    print(json.dumps({"benchmark": "pulse_steps", "pulses": args.pulses, "sizes": figures,
                      "clean_check_ratio": {"watch": ratio("watch", "clean_check_cpu_ms"),
                                            "scan": ratio("scan", "clean_check_cpu_ms")},
                      "iteration_ratio": {"watch": ratio("watch", "iteration_cpu_ms"),
                                          "scan": ratio("scan", "iteration_cpu_ms")}}))


if __name__ == "__main__":
    main()
