"""Benchmark: checkpoint commit + fast-forward + worktree reset, the git service against git.

A repository of 10,000 files (100 directories of 100 files) and an identical copy get the same
50 files changed per round, each in a worktree of its own. One is ended by the git service's
checkpoint (in process, no NATS hop): snapshot, commit, move the pulse branch, fast-forward the
workflow branch, switch HEAD, delete the pulse branch, reset. The other by the same steps with
the git command line:
``git add -A``, ``git commit``, ``git update-ref``, ``git symbolic-ref``, ``git branch -D``,
``git reset --hard``. Preparing each round (starting the pulse, editing files) is not timed.
The repository is packed first (``git gc``), as a clone is, and neither side runs an automatic
gc. The last line printed is JSON with both medians and their ratio (goal: at most 1.2x git).

    .venv/bin/python tests/benchmarks/git_ops.py [--files 10000] [--changed 50] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autarch.contracts.git import CheckpointPulse, CreateWorkflowBranch, RegisterRepository, StartPulse
from autarch.services.git.engine import GitEngine

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Autarch",
    "GIT_AUTHOR_EMAIL": "autarch@localhost",
    "GIT_COMMITTER_NAME": "Autarch",
    "GIT_COMMITTER_EMAIL": "autarch@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    # No automatic gc: a commit over 10,000 loose objects would start a detached `git gc --auto`
    # that packs (and prunes) the store while the copy below reads it, and competes for the CPU
    # during the timed rounds. dulwich never runs one, so neither side does.
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "gc.auto",
    "GIT_CONFIG_VALUE_0": "0",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repository(root: Path, files: int) -> list[str]:
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    paths = []
    per_dir = 100
    for i in range(files):
        d = i // per_dir
        path = f"src/pkg{d // 10}/mod{d % 10}/file{i % per_dir}.py"
        full = root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(f"# file {i}\n" + "value = 1\n" * 30)
        paths.append(path)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    git(root, "gc", "-q")  # packed, as a cloned repository is
    return paths


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def edit(worktree: Path, paths: list[str], round_no: int) -> None:
    for path in paths:
        with open(worktree / path, "a") as f:
            f.write(f"changed = {round_no}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="autarch-bench-") as tmp:
        tmp_path = Path(tmp)
        repo = tmp_path / "repo"
        paths = make_repository(repo, args.files)
        # Each side gets its own object store: in a shared one, the second side to commit the same
        # content would find every blob and tree already written by the first.
        git_repo = tmp_path / "repo-for-git"
        shutil.copytree(repo, git_repo, symlinks=True)

        engine = GitEngine(data_dir=tmp_path / "data")
        registered = engine.register_repository(RegisterRepository(path=str(repo), base_branch="main"))
        view = engine.create_workflow_branch(
            CreateWorkflowBranch(run_id="bench", repository_id=registered.repository_id, branch="bench-autarch")
        )
        ours_worktree = Path(view.worktree_path)
        git_worktree = tmp_path / "git-worktree"
        git(git_repo, "worktree", "add", "-q", "-b", "bench-git", str(git_worktree), "main")
        git(git_worktree, "status", "--porcelain")  # let git refresh its fresh index once

        ours: list[float] = []
        theirs: list[float] = []
        ours_cpu: list[float] = []
        theirs_cpu: list[float] = []
        for round_no in range(args.rounds + 1):  # round 0 warms caches and is not counted
            changed = rng.sample(paths, args.changed)

            engine.start_pulse(StartPulse(run_id="bench", pulse_id=f"p{round_no}"))
            edit(ours_worktree, changed, round_no)
            started, started_cpu = time.perf_counter(), time.process_time()
            engine.checkpoint_pulse(
                CheckpointPulse(run_id="bench", pulse_id=f"p{round_no}", summary=f"feat: round {round_no}")
            )
            elapsed_ours = time.perf_counter() - started
            cpu_ours = time.process_time() - started_cpu

            pulse = f"bench-git.pulse-p{round_no}"
            git(git_worktree, "switch", "-q", "-c", pulse)
            edit(git_worktree, changed, round_no)
            old = git(git_worktree, "rev-parse", "bench-git")
            started, started_cpu = time.perf_counter(), _children_cpu()
            git(git_worktree, "add", "-A")
            git(git_worktree, "commit", "-q", "-m", f"feat: round {round_no}")
            git(git_worktree, "update-ref", "refs/heads/bench-git", "HEAD", old)
            git(git_worktree, "symbolic-ref", "HEAD", "refs/heads/bench-git")
            git(git_worktree, "branch", "-q", "-D", pulse)
            git(git_worktree, "reset", "-q", "--hard")
            elapsed_git = time.perf_counter() - started
            cpu_git = _children_cpu() - started_cpu

            if round_no:
                ours.append(elapsed_ours)
                theirs.append(elapsed_git)
                ours_cpu.append(cpu_ours)
                theirs_cpu.append(cpu_git)

        log = git(repo, "log", "--oneline", "bench-autarch").splitlines()
        assert len(log) == args.rounds + 2, log  # one commit per pulse, plus the initial commit
        assert git(ours_worktree, "status", "--porcelain") == ""
        ours_ms = statistics.median(ours) * 1000
        git_ms = statistics.median(theirs) * 1000
        ours_cpu_ms = statistics.median(ours_cpu) * 1000
        git_cpu_ms = statistics.median(theirs_cpu) * 1000
        print(f"{args.files} files, {args.changed} changed per round, {args.rounds} rounds", file=sys.stderr)
        print(f"autarch git service: median {ours_ms:.1f} ms  (all: {[round(t * 1000, 1) for t in ours]})")
        print(f"git command line:    median {git_ms:.1f} ms  (all: {[round(t * 1000, 1) for t in theirs]})")
        print(f"CPU (user+sys) median: autarch {ours_cpu_ms:.1f} ms, git {git_cpu_ms:.1f} ms (wall adds I/O waits)")
        print(
            json.dumps(
                {
                    "benchmark": "git_checkpoint_ff_reset",
                    "files": args.files,
                    "changed": args.changed,
                    "rounds": args.rounds,
                    "autarch_ms": round(ours_ms, 1),
                    "git_cli_ms": round(git_ms, 1),
                    "ratio": round(ours_ms / git_ms, 2),
                    "autarch_cpu_ms": round(ours_cpu_ms, 1),
                    "git_cli_cpu_ms": round(git_cpu_ms, 1),
                    "cpu_ratio": round(ours_cpu_ms / git_cpu_ms, 2),
                    "goal_ratio": 1.2,
                }
            )
        )


if __name__ == "__main__":
    main()
