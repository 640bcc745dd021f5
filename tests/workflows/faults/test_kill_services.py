"""Faults: SIGKILL the orchestrator, the agent runner and the git service at random points while ten demo
workflows run; every workflow still ends with the same tree and commit messages as an undisturbed run, with
nothing lost or doubled (events, commits) and a log that replays to the live state."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System
from tests.workflows.conftest import Client, demo_scenario, git, make_repo

from .harness import BRANCH, FIGURES, Approver, assert_same_result, reference, run_to_done

RUNS = 10
VICTIMS = ("orchestrator", "agent_runner", "git")
MAX_KILLS = 12
"""Kills come 0.5-2 s apart (a restarted service needs a moment to catch up) until every run is done or this many."""


def _phase(view: dict) -> str:
    if view["stage"] == "execution":
        return "pulse" if view.get("current_pulse") else "preflight/git"
    return view["stage"]


def _killer(system: System, rng: random.Random, kills: list[tuple[str, set[str]]]) -> Callable[[Approver], None]:
    """Kill a service at a random moment, again and again, until every workflow is done: every service once per
    round, in a random order; every other kill waits (a few seconds at most) for a moment when a pulse runs, so
    that kills land in the middle of pulses and their git steps too, not only in the quick stages before. Each
    kill is logged with the phases the workflows were in at that moment."""

    def run(approver: Approver) -> None:
        # The first kill comes once the runs are under way: the approver has seen each of them.
        while len(approver.views) < len(approver.ids) and not approver.stop.wait(0.02):
            pass
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

    return run


def test_ten_demo_runs_survive_random_sigkills(system: System, model: ScriptedModelServer, tmp_path: Path) -> None:
    model.use(demo_scenario())
    client = Client(system)
    files = demo_scenario()["files"]

    # The reference: one demo run, undisturbed, on the same system.
    control = make_repo(tmp_path / "control", files)
    started = time.monotonic()
    seconds = run_to_done(client, [client.create(control, branch=BRANCH)], timeout=60, started=started)
    ref = reference(control, *seconds.values())
    # The reference itself is the demo's result: its two pulse commits and their changes.
    assert ref.log == ["test(greeter): cover the empty-name greeting",
                       "feat(greeter): greet the world when the name is empty"]
    assert 'name = "world"' in git(control, "show", f"{BRANCH}:greeter/core.py")
    assert "def test_greet_empty_name" in git(control, "show", f"{BRANCH}:tests/test_core.py")

    repos = [make_repo(tmp_path / f"repo-{n}", files) for n in range(RUNS)]
    started = time.monotonic()
    ids = [client.create(repo, branch=BRANCH) for repo in repos]
    seed = int(os.environ.get("AUTARCH_FAULT_SEED", "1234"))
    kills: list[tuple[str, set[str]]] = []
    durations = run_to_done(client, ids, timeout=300, started=started,
                            killer=_killer(system, random.Random(seed), kills))
    FIGURES.append(f"random kills (seed {seed}): one undisturbed run {ref.seconds:.1f}s; {RUNS} runs at once "
                   f"under {len(kills)} kills, the last done after {max(durations.values()):.1f}s")

    # The kills hit every service, and some of them landed while pulses were running.
    assert {victim for victim, _ in kills} == set(VICTIMS), f"seed {seed} killed only {kills}"
    assert any("pulse" in phases for _, phases in kills), f"seed {seed}: no kill during a pulse: {kills}"
    for repo, wid in zip(repos, ids, strict=True):
        assert_same_result(client, repo, wid, ref)
    client.http.close()
