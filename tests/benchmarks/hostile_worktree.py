"""Benchmark: the git service's checkpoint of a worktree an agent filled (issue 32's audit; docs/security.md).

Two runs of the engine in process (no NATS hop), each in a fresh child process so that its peak memory
(``ru_maxrss``) is its own:

- ``files``: a pulse adds ``--files`` new files (100,000 by default, 1,000 per directory) and is checkpointed:
  the time of the checkpoint (snapshot, objects, commit, reset) and the process's peak memory;
- ``sparse``: a pulse adds a 5 GiB sparse file beside one small file: the checkpoint answers ``file_too_large``
  without reading it; peak memory must stay flat (compared with the same pulse without the sparse file).

    .venv/bin/python tests/benchmarks/hostile_worktree.py [--files 100000] [--sparse-gib 5]

With ``--pulse``, the same crowd as a real pulse through every service (``autarch up``, the scripted model): a
workflow whose first pulse's shell leaves ``--files`` files (100 a directory, the command of
``tests/workflows/test_hostile_pulse.py``, which runs 5,000 in the suite) and one whose pulse leaves none, each
timed from the last approval to ``done`` (its worktree removed); the difference is what the files cost:

    .venv/bin/python tests/benchmarks/hostile_worktree.py --pulse [--files 100000]

The last line printed is JSON with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _run(kind: str, files: int, sparse_gib: int) -> dict[str, object]:
    from autarch.contracts.git import CheckpointPulse, CreateWorkflowBranch, RegisterRepository, StartPulse
    from autarch.runtime.errors import ServiceFailure
    from autarch.services.git.engine import GitEngine

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("bench\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "initial")
        engine = GitEngine(data_dir=Path(tmp) / "data")
        registered = engine.register_repository(RegisterRepository(path=str(repo), base_branch="main"))
        engine.create_workflow_branch(
            CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch="autarch/b")
        )
        wt = Path(engine.start_pulse(StartPulse(run_id="wf1", pulse_id="p1")).worktree_path)
        if kind == "files":
            for i in range(files):
                directory = wt / f"d{i // 1000:03}"
                if i % 1000 == 0:
                    directory.mkdir()
                (directory / f"f{i:06}.txt").write_text(f"{i}\n")
        else:
            (wt / "small.txt").write_text("small\n")
            if kind == "sparse":
                with open(wt / "huge.bin", "wb") as f:
                    f.truncate(sparse_gib << 30)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        outcome = "committed"
        try:
            engine.checkpoint_pulse(CheckpointPulse(run_id="wf1", pulse_id="p1", summary="feat(b): bench"))
        except ServiceFailure as exc:
            outcome = exc.code
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return {"kind": kind, "outcome": outcome, "seconds": round(seconds, 3),
                "peak_mib": round(peak / 1024, 1), "growth_mib": round((peak - before) / 1024, 1)}


def _pulses(files: int) -> dict[str, object]:
    """Two workflows on one system: the pulse leaving ``files`` files, and the same pulse leaving none."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests package, for its helpers
    from autarch.cli.local.natsserver import free_port
    from autarch.services.scripted_model import ScriptedModelServer
    from tests.system import System
    from tests.workflows import scenarios
    from tests.workflows.conftest import Client, approve_stages, branch_log, start
    from tests.workflows.test_hostile_pulse import crowd_command

    figures: dict[str, object] = {"files": files}
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer("demo") as model:
        data = Path(tmp) / "data"
        data.mkdir()
        env = {"AUTARCH_ANTHROPIC_BASE_URL": model.base_url, "AUTARCH_ANTHROPIC_API_KEY": "scripted",
               "AUTARCH_REQUEST_TIMEOUT": "600", "AUTARCH_PREFLIGHT_TIMEOUT": "60"}
        system = System(data_dir=data, port=free_port(), nats_port=free_port(),
                        services="orchestrator,tools,git,agent_runner", extra_env=env).start(timeout=90)
        client = Client(system)
        try:
            for name, count in (("none", 0), ("crowd", files)):
                scenario = scenarios.base()
                if count:
                    command = crowd_command(count) + "; echo left"
                    scenario["scripts"]["pulsing"].insert(0, scenarios.tool("shell", reason="Crowd", command=command,
                                                                            timeoutSeconds=300))
                case = Path(tmp) / name
                case.mkdir()
                wid, repo = start(client, model, case, scenario)
                approve_stages(client, wid, "scoping", "research")
                client.wait_awaiting(wid, "planning")
                began = time.perf_counter()
                client.approve(wid)
                client.wait_awaiting(wid, "review", timeout=1800)
                client.approve(wid)
                view = client.wait(wid, lambda v: v["status"] == "done" and v["worktree_path"] is None, "done",
                                   timeout=600)
                seconds = time.perf_counter() - began
                tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", view["branch"]], cwd=repo,
                                      capture_output=True, check=True, text=True).stdout.splitlines()
                figures[name] = {"seconds": round(seconds, 1), "status": view["status"],
                                 "commits": len(branch_log(repo, view["branch"])),
                                 "committed_files": sum(path.startswith("many/") for path in tree)}
                print(f"{name:>6}: {figures[name]}", flush=True)
        finally:
            client.http.close()
            system.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--sparse-gib", type=int, default=5)
    parser.add_argument("--child", choices=["files", "sparse", "small"])
    parser.add_argument("--pulse", action="store_true", help="the crowd as a real pulse through every service")
    args = parser.parse_args()
    if args.pulse:
        print(json.dumps(_pulses(args.files)))
        return
    if args.child:
        print(json.dumps(_run(args.child, args.files, args.sparse_gib)))
        return
    figures = {}
    for kind in ("small", "sparse", "files"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--files", str(args.files),
             "--sparse-gib", str(args.sparse_gib)],
            check=True, capture_output=True, text=True,
        ).stdout.strip().splitlines()[-1]
        figures[kind] = json.loads(out)
        print(f"{kind:>6}: {figures[kind]}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
