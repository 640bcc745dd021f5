"""SIGKILL the agent runner while a worker is mid-bead: the bead is done again at most once and lands once.

The runner is restarted by ``autarch up``'s supervisor. Either it comes back within the lease TTL and carries
the durable turn on (the same attempt lands), or the worker's leases lapse first and the bead returns to ready
and is redone as attempt 2; in both cases the branch holds exactly one commit per bead.
"""

from __future__ import annotations

import copy
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.workflows.conftest import Client, approve_stages, branch_log, finish, start
from tests.workflows.faults.harness import kill

from .conftest import swarm_scenario
from .test_swarm_e2e import BEADS, _swarm_events


@pytest.mark.parametrize("victim_bead", ["base", "square", "naming"])
def test_killing_the_runner_mid_bead_redoes_it_at_most_once_and_commits_it_once(
        client: Client, model, tmp_path: Path, victim_bead: str) -> None:
    scenario = swarm_scenario()
    steps = scenario["scripts"][f"pulsing:{victim_bead}"]
    steps[0]["delay_ms"] = 150  # a slow first reply: the kill lands while the worker's turn runs
    # The kill lands on whatever turns run at that moment: on a busy machine another bead's may be one of them,
    # and each bead redone gets its second attempt's script too.
    for bead in BEADS:
        scenario["scripts"][f"pulsing:{bead}-a2"] = copy.deepcopy(scenario["scripts"][f"pulsing:{bead}"])
    wid, repo = start(client, model, tmp_path, scenario, branch=f"autarch/kill-{victim_bead}")
    approve_stages(client, wid)

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = client.events(wid, until=lambda seen: any(
            e["type"] == "lease:granted" and e.get("bead_id") == victim_bead for e in seen), timeout=5)
        if any(e["type"] == "lease:granted" and e.get("bead_id") == victim_bead for e in found):
            break
    else:
        raise AssertionError(f"{victim_bead} never started")
    # The worker's turn runs: its first model call (the slow one) has reached the model.
    while model.attempts(f"pulsing:{victim_bead}", 0) == 0:
        assert time.monotonic() < deadline, f"{victim_bead}'s worker never called the model"
        time.sleep(0.01)
    assert kill(client.system, "agent_runner") is not None

    try:
        view = client.wait_awaiting(wid, "review", timeout=120)
    except AssertionError as exc:
        swarm = client.http.get("/api/beads/swarm", params={"epic_id": wid}).json()
        raise AssertionError(f"{exc}\nswarm: {json.dumps(swarm, indent=1)}") from None
    log = branch_log(repo, view["branch"])
    landed = Counter(s.split("(", 1)[1].split(")", 1)[0] for s in log)
    assert landed == Counter(BEADS), log  # every bead exactly once
    events = _swarm_events(client, wid)
    closed = Counter(e["bead_id"] for e in events if e["type"] == "bead:closed")
    assert closed == Counter(BEADS)
    attempts = [e["attempt"] for e in events if e["type"] == "bead:claimed" and e["bead_id"] == victim_bead]
    assert attempts in ([1], [1, 2]), attempts
    finish(client, wid)
