"""Faults: SIGKILL the orchestrator, the agent runner and the git service at random points while ten demo
workflows run; every workflow still ends with the same tree and commit messages as an undisturbed run."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.runtime.natsserver import free_port
from autarch.services.scripted_model import ScriptedModelServer
from tests.e2e.conftest import System
from tests.workflows.conftest import SERVICES, Client, demo_scenario, git, make_repo

RUNS = 10
VICTIMS = ("orchestrator", "agent_runner", "git")
EXPECTED_LOG = ["test(greeter): cover the empty-name greeting",
                "feat(greeter): greet the world when the name is empty"]


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    with ScriptedModelServer("demo") as model:
        data = tmp_path_factory.mktemp("faults") / "data"
        data.mkdir()
        env = {"AUTARCH_ANTHROPIC_BASE_URL": model.base_url, "AUTARCH_ANTHROPIC_API_KEY": "scripted",
               "AUTARCH_REQUEST_TIMEOUT": "5", "AUTARCH_GIT_REQUEST_TIMEOUT": "5"}
        sys_ = System(data_dir=data, port=free_port(), nats_port=free_port(), services=SERVICES, extra_env=env)
        sys_.start(timeout=60)
        yield sys_
        if sys_.proc is not None:
            sys_.stop()


def _approver(client: Client, ids: list[str], stop: threading.Event) -> None:
    """Approve each card once, as a person watching would (approve is not retried: it is not idempotent)."""
    approved: set[tuple[str, str, int]] = set()
    while not stop.is_set():
        for wid in ids:
            try:
                view = client.get(wid)
            except Exception:
                continue  # the gateway answers 503 while the orchestrator restarts
            key = (wid, view["stage"], len(view.get("artifact_stages", [])))
            if view["awaiting_approval"] and key not in approved:
                try:
                    if client.post(wid, "approve").status_code == 200:
                        approved.add(key)
                except Exception:
                    pass
        time.sleep(0.05)


def _killer(system: System, rng: random.Random, stop: threading.Event, kills: list[str]) -> None:
    time.sleep(0.5)
    order: list[str] = []
    while not stop.is_set():
        if not order:  # every service is killed once per round, in a random order at random moments
            order = rng.sample(VICTIMS, len(VICTIMS))
        victim = order.pop()
        pid = system.run_info()["children"].get(victim)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
                kills.append(victim)
            except ProcessLookupError:
                pass
        stop.wait(rng.uniform(0.4, 1.5))


def test_ten_demo_runs_survive_random_sigkills(system: System, tmp_path: Path) -> None:
    client = Client(system)
    files = demo_scenario()["files"]
    repos = [make_repo(tmp_path / f"repo-{n}", files) for n in range(RUNS)]
    ids = [client.create(repo, branch="autarch/demo") for repo in repos]

    seed = int(os.environ.get("AUTARCH_FAULT_SEED", "1234"))
    rng = random.Random(seed)
    stop_approving, stop_killing = threading.Event(), threading.Event()
    kills: list[str] = []
    approver = threading.Thread(target=_approver, args=(client, ids, stop_approving), daemon=True)
    killer = threading.Thread(target=_killer, args=(system, rng, stop_killing, kills), daemon=True)
    approver.start()
    killer.start()
    try:
        deadline = time.monotonic() + 240
        # Kill at random while the workflows move through their stages, then let them finish undisturbed.
        while time.monotonic() < deadline and len(kills) < 9:
            time.sleep(0.2)
        stop_killing.set()
        killer.join()
        for wid in ids:
            client.wait(wid, lambda v: v["status"] == "done" and v["worktree_path"] is None, "done",
                        timeout=max(1.0, deadline - time.monotonic()))
    finally:
        stop_killing.set()
        stop_approving.set()
        approver.join()
    assert set(kills) == set(VICTIMS), f"seed {seed} killed only {kills}"

    trees = set()
    for repo in repos:
        assert git(repo, "log", "--format=%s", "main..autarch/demo").splitlines() == EXPECTED_LOG
        trees.add(git(repo, "rev-parse", "autarch/demo^{tree}").strip())
        assert git(repo, "status", "--porcelain") == ""
    assert len(trees) == 1  # every run ended with the very same tree, the demo's
    assert 'name = "world"' in git(repos[0], "show", "autarch/demo:greeter/core.py")
    assert "def test_greet_empty_name" in git(repos[0], "show", "autarch/demo:tests/test_core.py")
    for wid in ids:
        runs = client.artifacts(wid)["pulse_runs"]
        assert [(r["id"], r["status"]) for r in runs] == [("pulse-1", "succeeded"), ("pulse-2", "succeeded")]
    client.http.close()
