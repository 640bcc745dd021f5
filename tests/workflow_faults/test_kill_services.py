"""Faults: SIGKILL the orchestrator, the agent runner and the git service at random points while ten demo
workflows run; every workflow still ends with the same tree and commit messages as an undisturbed run, with
nothing lost or doubled (events, commits) and a log that replays to the live state."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.runtime.natsserver import free_port
from autarch.services.scripted_model import ScriptedModelServer
from tests.e2e.conftest import System
from tests.workflows.conftest import SERVICES, Client, assert_replay_equals_live, demo_scenario, git, make_repo

RUNS = 10
VICTIMS = ("orchestrator", "agent_runner", "git")
MAX_KILLS = 12
"""Kills come 0.5-2 s apart (a restarted service needs a moment to catch up) until every run is done or this many."""
BRANCH = "autarch/demo"


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


class Approver(threading.Thread):
    """Approves each card once, as a person watching would (approve is not retried: it is not idempotent), and
    keeps the latest view of every workflow for the killer to aim with."""

    def __init__(self, client: Client, ids: list[str]) -> None:
        super().__init__(daemon=True)
        self.client, self.ids = client, ids
        self.views: dict[str, dict] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        approved: set[tuple[str, str, int]] = set()
        while not self.stop.is_set():
            for wid in self.ids:
                try:
                    view = self.client.get(wid)
                except Exception:
                    continue  # the gateway answers 503 while the orchestrator restarts
                self.views[wid] = view
                key = (wid, view["stage"], len(view.get("artifact_stages", [])))
                if view["awaiting_approval"] and key not in approved:
                    try:
                        if self.client.post(wid, "approve").status_code == 200:
                            approved.add(key)
                    except Exception:
                        pass
            time.sleep(0.05)

    def finished(self) -> bool:
        return len(self.views) == len(self.ids) and all(v["status"] == "done" for v in self.views.values())


def _phase(view: dict) -> str:
    if view["stage"] == "execution":
        return "pulse" if view.get("current_pulse") else "preflight/git"
    return view["stage"]


def _killer(system: System, approver: Approver, rng: random.Random, kills: list[tuple[str, set[str]]]) -> None:
    """Kill a service at a random moment, again and again, until every workflow is done: every service once per
    round, in a random order; every other kill waits (a few seconds at most) for a moment when a pulse runs, so
    that kills land in the middle of pulses and their git steps too, not only in the quick stages before. Each
    kill is logged with the phases the workflows were in at that moment."""
    time.sleep(0.5)
    order: list[str] = []
    while not approver.stop.is_set() and not approver.finished() and len(kills) < MAX_KILLS:
        if not order:
            order = rng.sample(VICTIMS, len(VICTIMS))
        victim = order.pop()
        if len(kills) % 2 == 1:
            aim = time.monotonic() + 5
            while time.monotonic() < aim and not approver.stop.is_set() and not any(
                    _phase(v) == "pulse" for v in list(approver.views.values()) if v["status"] != "done"):
                time.sleep(0.02)
        pid = system.run_info()["children"].get(victim)
        if pid:
            phases = {_phase(v) for v in approver.views.values() if v["status"] != "done"}
            try:
                os.kill(pid, signal.SIGKILL)
                kills.append((victim, phases))
            except ProcessLookupError:
                pass
        approver.stop.wait(rng.uniform(0.5, 2.0))


def _run_to_done(client: Client, ids: list[str], *, killer_seed: int | None, system: System,
                 timeout: float) -> list[tuple[str, set[str]]]:
    approver = Approver(client, ids)
    kills: list[tuple[str, set[str]]] = []
    approver.start()
    killer = None
    if killer_seed is not None:
        killer = threading.Thread(target=_killer, args=(system, approver, random.Random(killer_seed), kills),
                                  daemon=True)
        killer.start()
    try:
        # The approver's views, not requests of our own: the gateway answers 503 while the orchestrator restarts.
        deadline = time.monotonic() + timeout
        while not approver.finished() and time.monotonic() < deadline:
            time.sleep(0.2)
        if killer is not None:
            approver.stop.set()  # the killer stops with the approver (if it has not already)
            killer.join()
        for wid in ids:
            client.wait(wid, lambda v: v["status"] == "done" and v["worktree_path"] is None, "done",
                        timeout=max(1.0, deadline - time.monotonic()))
    finally:
        approver.stop.set()
        approver.join()
        if killer is not None:
            killer.join()
    return kills


def test_ten_demo_runs_survive_random_sigkills(system: System, tmp_path: Path) -> None:
    client = Client(system)
    files = demo_scenario()["files"]

    # The reference: one demo run, undisturbed, on the same system.
    control = make_repo(tmp_path / "control", files)
    _run_to_done(client, [client.create(control, branch=BRANCH)], killer_seed=None, system=system, timeout=60)
    expected_log = git(control, "log", "--format=%s", f"main..{BRANCH}").splitlines()
    expected_tree = git(control, "rev-parse", f"{BRANCH}^{{tree}}").strip()
    # The reference itself is the demo's result: its two pulse commits and their changes.
    assert expected_log == ["test(greeter): cover the empty-name greeting",
                            "feat(greeter): greet the world when the name is empty"]
    assert 'name = "world"' in git(control, "show", f"{BRANCH}:greeter/core.py")
    assert "def test_greet_empty_name" in git(control, "show", f"{BRANCH}:tests/test_core.py")

    repos = [make_repo(tmp_path / f"repo-{n}", files) for n in range(RUNS)]
    ids = [client.create(repo, branch=BRANCH) for repo in repos]
    seed = int(os.environ.get("AUTARCH_FAULT_SEED", "1234"))
    kills = _run_to_done(client, ids, killer_seed=seed, system=system, timeout=300)

    # The kills hit every service, and some of them landed while pulses were running.
    assert {victim for victim, _ in kills} == set(VICTIMS), f"seed {seed} killed only {kills}"
    assert any("pulse" in phases for _, phases in kills), f"seed {seed}: no kill during a pulse: {kills}"

    for repo in repos:
        assert git(repo, "log", "--format=%s", f"main..{BRANCH}").splitlines() == expected_log
        assert git(repo, "rev-parse", f"{BRANCH}^{{tree}}").strip() == expected_tree
        assert git(repo, "status", "--porcelain") == ""
        assert git(repo, "worktree", "list").count("\n") == 1  # the workflow's worktree is gone
    for wid in ids:
        runs = client.artifacts(wid)["pulse_runs"]
        assert [(r["id"], r["status"]) for r in runs] == [("pulse-1", "succeeded"), ("pulse-2", "succeeded")]
        events = client.events(wid)
        # Nothing doubled: no event twice in the stream (a relay that re-published after a crash would repeat one
        # to the letter, occurred_at included), each pulse completed once, one end.
        assert len({json.dumps(e, sort_keys=True) for e in events}) == len(events)
        names = Counter(e["type"] for e in events)
        assert names["pulse:completed"] == 2 and names["workflow:completed"] == 1
        assert names["preflight:completed"] == 1 and names["workflow:created"] == 1
        completed_turns = [e["turn_id"] for e in events if e["type"] == "turn:completed"]
        assert len(completed_turns) == len(set(completed_turns))
        assert_replay_equals_live(client, wid)
    client.http.close()
