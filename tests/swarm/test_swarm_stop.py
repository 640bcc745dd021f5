"""Stopping a swarm (seed 002): ``POST /api/workflows/{id}/stop`` on a bead-plan workflow stops every worker at once
(running turns cancelled, sessions closed, leases released, beads in progress reopened, nothing half-merged) and
``resume`` carries on from the recorded state to the same tree an undisturbed run makes."""

from __future__ import annotations

import copy
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.workflows.conftest import Client, approve_stages, branch_log, finish, git, start

from .conftest import swarm_scenario
from .test_swarm_e2e import BEADS


def _swarm(client: Client, wid: str) -> dict[str, Any]:
    return client.http.get("/api/beads/swarm", params={"epic_id": wid}).raise_for_status().json()


def _tree(repo: Path, branch: str) -> dict[str, str]:
    """Path → blob of every file on ``branch``; a verification evidence file (``history/<feature>/…``, which
    records its attempt and its times) by its name under the feature only."""
    feature = branch.split("/", 1)[1]
    listing = git(repo, "ls-tree", "-r", branch).splitlines()
    files = {line.split("\t", 1)[1]: line.split()[2] for line in listing}
    return {(p.replace(f"history/{feature}/", "history/<feature>/") if p.startswith("history/") else p):
            ("evidence" if p.startswith("history/") else blob) for p, blob in files.items()}


def test_a_stopped_swarm_lets_go_of_everything_and_resumes_to_the_same_tree(client: Client, model,
                                                                             tmp_path: Path) -> None:
    # The reference: the same plan, undisturbed.
    wid, repo = start(client, model, tmp_path / "reference", swarm_scenario(), branch="autarch/stop-ref")
    approve_stages(client, wid)
    reference = client.wait_awaiting(wid, "review", timeout=120)
    reference_tree = _tree(repo, reference["branch"])
    reference_log = Counter(branch_log(repo, reference["branch"]))
    finish(client, wid)

    scenario = swarm_scenario()
    for bead in BEADS:
        steps = scenario["scripts"][f"pulsing:{bead}"]
        scenario["scripts"][f"pulsing:{bead}-a2"] = copy.deepcopy(steps)
        steps[0]["delay_ms"] = 150  # slow first replies: the stop lands while the workers' turns run
    wid, repo = start(client, model, tmp_path / "stopped", scenario, branch="autarch/stop-swarm")
    approve_stages(client, wid)

    def a_worker_turn_runs(seen: list[dict[str, Any]]) -> bool:
        leased = next((i for i, e in enumerate(seen) if e["type"] == "lease:granted"), None)
        return leased is not None and any(e["type"] == "turn:started" for e in seen[leased:])

    assert a_worker_turn_runs(client.events(wid, until=a_worker_turn_runs, timeout=90))

    stopped = client.post(wid, "stop", {"reason": "user pressed stop"})
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["halt"]["reason"] == "stopped"
    tip = git(repo, "rev-parse", "autarch/stop-swarm").strip()

    # Every worker let go: no lease held, no bead in progress, no worker on a bead.
    deadline = time.monotonic() + 30
    while True:
        swarm = _swarm(client, wid)
        busy = [b["id"] for b in swarm["beads"] if b["status"] == "in_progress"]
        working = [w["name"] for w in swarm["workers"] if w.get("bead_id")]
        if not swarm["leases"] and not busy and not working:
            break
        assert time.monotonic() < deadline, f"still held after the stop: {swarm}"
        time.sleep(0.1)
    def stop_recorded(seen: list[dict[str, Any]]) -> bool:
        # The beads in progress reopened, and their turns cancelled, as a workflow stop cancels a turn.
        return any(e["type"] == "bead:reopened" and "stopped: user pressed stop" in (e.get("reason") or "")
                   for e in seen) and any(e["type"] == "turn:completed" and e["outcome"] == "cancelled" for e in seen)

    events = client.events(wid, until=stop_recorded)
    assert stop_recorded(events), [(e["type"], e.get("outcome") or e.get("reason")) for e in events][-40:]
    # Stopped means stopped: nothing is claimed and nothing lands while the workflow is halted.
    view = client.get(wid)
    assert view["halt"]["reason"] == "stopped" and view["stage"] == "execution"
    assert git(repo, "rev-parse", "autarch/stop-swarm").strip() == tip
    again = client.post(wid, "stop", {"reason": "twice"})
    assert again.status_code == 409 and again.json()["code"] == "not_running", again.text

    resumed = client.post(wid, "resume", {})
    assert resumed.status_code == 200, resumed.text
    view = client.wait_awaiting(wid, "review", timeout=120)
    tree = _tree(repo, view["branch"])
    assert tree == reference_tree, {p: (reference_tree.get(p), tree.get(p)) for p in reference_tree.keys() | tree.keys()
                                    if reference_tree.get(p) != tree.get(p)}
    log = Counter(branch_log(repo, view["branch"]))
    assert log == reference_log, log  # every bead landed exactly once, as in the undisturbed run
    beads = {b["id"]: b for b in client.http.get("/api/beads", params={"epic_id": wid}).json()["beads"]}
    assert {b: beads[b]["status"] for b in BEADS} == dict.fromkeys(BEADS, "closed")
    # A stop is not a failure of the bead: nothing was bounced.
    assert not [e for e in client.events(wid, until="swarm:finished") if e["type"] == "bead:bounced"]
    finish(client, wid)
