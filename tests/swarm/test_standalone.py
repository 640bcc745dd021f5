"""Standalone mode (seed 002): when preflight says a swarm is not safe, one worker runs the bead plan, and with no
coordinator to report to, it records each completion in ``.pulse/STATE.md`` instead of mailing it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.workflows.conftest import Client, approve_stages, branch_log, finish, start

from .conftest import swarm_scenario
from .test_swarm_e2e import BEADS


def test_a_standalone_run_records_its_completions_in_the_state_file(client: Client, model, tmp_path: Path) -> None:
    scenario = swarm_scenario()
    preflight = scenario["scripts"]["preflight"][1]["content"][0]["input"]
    preflight["recommendedMode"] = "single-worker"
    # Slow replies from the second bead on: the state file is read while the run is still under way.
    for bead in BEADS[1:]:
        scenario["scripts"][f"pulsing:{bead}"][0]["delay_ms"] = 100
    wid, repo = start(client, model, tmp_path, scenario, branch="autarch/standalone")
    approve_stages(client, wid)

    def first_closed(seen: list[dict[str, Any]]) -> bool:
        return any(e["type"] == "bead:closed" for e in seen)

    events = client.events(wid, until=first_closed, timeout=90)
    started = next(e for e in events if e["type"] == "swarm:started")
    assert started["mode"] == "standalone" and started["max_workers"] == 1
    closed = next(e for e in events if e["type"] == "bead:closed")
    swarm = client.http.get("/api/beads/swarm", params={"epic_id": wid}).raise_for_status().json()
    (worker,) = swarm["workers"]
    state = Path(worker["worktree_path"]) / ".pulse" / "STATE.md"
    deadline = time.monotonic() + 30
    while not state.exists():
        assert time.monotonic() < deadline, f"{state} was not written after {closed['bead_id']} landed"
        time.sleep(0.05)
    text = state.read_text()
    assert f"- {closed['bead_id']}: " in text and "## Left" in text, text

    view = client.wait_awaiting(wid, "review", timeout=180)
    assert len(branch_log(repo, view["branch"])) == len(BEADS)
    mail = [e["message"] for e in client.events(wid, until="swarm:finished") if e["type"] == "mail:posted"]
    # Nobody to report to: no completion is mailed (the worker's own startup reports still go on the thread).
    assert not [m for m in mail if m["subject"].startswith("Completed ")], [m["subject"] for m in mail]
    finish(client, wid)
