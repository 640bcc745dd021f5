"""Benchmark: the git service's three bead verbs (``begin_bead``, ``commit_bead``, ``merge_bead``), in process.

Two measures, each on a fresh repository whose files sit in one directory (``pkg/``), 4 workers taking the beads
in turn, each bead writing one new file:

- ``--files 30,300,3000``: the repository holds N files from the start; the median ms of each verb over
  ``--beads`` beads (the first 4 left out). What a bead costs as the repository's size grows.
- ``--grow 1000``: the repository starts empty and each bead adds its file, as a wide epic does; the ms of a bead
  (the three verbs) by tenth of the run. What a bead costs as the epic's history grows.

No NATS hop, no service: the engine's own time. The last line printed is JSON.

    .venv/bin/python tests/benchmarks/git_beads.py [--files 30,300,3000] [--beads 40] [--grow 1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from autarch.contracts.bead_git import BeginBead, CommitBead, MergeBead, OpenWorker
from autarch.contracts.git import CreateWorkflowBranch, RegisterRepository
from autarch.services.git.commits import Identity
from autarch.services.git.engine import GitEngine

WORKERS = 4
VERBS = ("begin", "commit", "merge")
_GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b",
            "PATH": "/usr/bin:/bin:/usr/local/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}


def _run(tmp: Path, files: int, beads: int) -> dict[str, list[float]]:
    """Seconds per verb of each of ``beads`` beads on a repository of ``files`` files (at least one)."""
    repo = tmp / "repo"
    (repo / "pkg").mkdir(parents=True)
    for i in range(max(1, files)):
        (repo / "pkg" / f"m{i:05d}.py").write_text(f"N = {i}\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "initial"]):
        subprocess.run(["git", *args], cwd=repo, env=_GIT_ENV, check=True)
    engine = GitEngine(data_dir=tmp / "data", identity=Identity(author_name="Bench", author_email="bench@localhost"))
    registered = engine.register_repository(RegisterRepository(path=str(repo), base_branch="main"))
    engine.create_workflow_branch(CreateWorkflowBranch(run_id="wf", repository_id=registered.repository_id,
                                                       branch="autarch/bench"))
    worktrees = {f"w{k}": Path(engine.open_worker(OpenWorker(workflow_id="wf", worker=f"w{k}")).worktree_path)
                 for k in range(1, WORKERS + 1)}
    times: dict[str, list[float]] = {verb: [] for verb in VERBS}
    for k in range(beads):
        worker, bead = f"w{k % WORKERS + 1}", f"b{k:05d}"
        began = time.perf_counter()
        engine.begin_bead(BeginBead(workflow_id="wf", worker=worker, bead_id=bead, attempt=1))
        times["begin"].append(time.perf_counter() - began)
        (worktrees[worker] / "pkg" / f"{bead}.py").write_text(f"BEAD = {k}\n")
        began = time.perf_counter()
        engine.commit_bead(CommitBead(workflow_id="wf", worker=worker, bead_id=bead, attempt=1, summary=f"add {bead}"))
        times["commit"].append(time.perf_counter() - began)
        began = time.perf_counter()
        merged = engine.merge_bead(MergeBead(workflow_id="wf", worker=worker, bead_id=bead, attempt=1))
        times["merge"].append(time.perf_counter() - began)
        if merged.status != "merged":
            raise SystemExit(f"bead {bead}: {merged.status}")
    return times


def by_size(sizes: list[int], beads: int) -> dict[str, Any]:
    runs = []
    for files in sizes:
        with tempfile.TemporaryDirectory(prefix="autarch-bench-beads-") as tmp:
            times = _run(Path(tmp), files, beads)
        medians = {verb: round(statistics.median(times[verb][WORKERS:]) * 1000, 2) for verb in VERBS}
        medians["bead"] = round(sum(medians[verb] for verb in VERBS), 2)
        print(f"{files} files: ms per verb {medians}", flush=True)
        runs.append({"files": files, **medians})
    ratio = round(runs[-1]["bead"] / runs[0]["bead"], 2) if runs else None
    return {"runs": runs, "ratio": ratio}


def growing(beads: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="autarch-bench-beads-") as tmp:
        times = _run(Path(tmp), 1, beads)
    per_bead = [sum(parts) * 1000 for parts in zip(*(times[verb] for verb in VERBS), strict=True)]
    tenth = max(1, len(per_bead) // 10)
    tenths = [round(statistics.median(per_bead[i * tenth:(i + 1) * tenth]), 2) for i in range(len(per_bead) // tenth)]
    print(f"{beads} beads, each adding a file: ms per bead by tenth {tenths}", flush=True)
    return {"beads": beads, "bead_ms_by_tenth": tenths, "ratio": round(tenths[-1] / tenths[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", default="30,300,3000")
    parser.add_argument("--beads", type=int, default=40)
    parser.add_argument("--grow", type=int, default=1000, help="beads of the growing run (0: none)")
    args = parser.parse_args()
    figures: dict[str, Any] = {"by_size": by_size([int(n) for n in args.files.split(",") if n], args.beads)}
    if args.grow:
        figures["growing"] = growing(args.grow)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
