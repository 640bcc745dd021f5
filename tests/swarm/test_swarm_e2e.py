"""A bead plan run by a swarm, end to end: every service a process, the scripted model, a real repository.

The bundled ``swarm`` scenario plans a diamond (base → square, circle → summary) and two independent notes;
square and circle both change ``shapes/registry.py``, so they must never run at the same time.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.workflows.conftest import Client, approve_stages, assert_replay_equals_live, branch_log, finish, git, start

from .conftest import swarm_scenario

BEADS = ["base", "square", "circle", "summary", "units", "naming"]
DEPENDS = {"square": ["base"], "circle": ["base"], "summary": ["square", "circle"]}


def _swarm_events(client: Client, wid: str) -> list[dict[str, Any]]:
    """The swarm's events in stream order, up to ``swarm:finished``."""
    found = client.events(wid, until="swarm:finished")
    return [e for e in found if e["type"].split(":")[0] in ("bead", "worker", "lease", "swarm")]


def _intervals(events: list[dict[str, Any]]) -> dict[str, list[tuple[int, int]]]:
    """Bead → (claim position, end position) of each attempt, in stream order."""
    open_at: dict[str, int] = {}
    out: dict[str, list[tuple[int, int]]] = {}
    for i, e in enumerate(events):
        if e["type"] == "bead:claimed":
            open_at[e["bead_id"]] = i
        elif e["type"] in ("bead:closed", "bead:reopened") and e["bead_id"] in open_at:
            out.setdefault(e["bead_id"], []).append((open_at.pop(e["bead_id"]), i))
    return out


def test_a_diamond_and_independent_beads_run_on_three_workers_one_commit_per_bead(client: Client, model,
                                                                                  tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, swarm_scenario(), branch="autarch/shapes")
    approve_stages(client, wid)
    view = client.wait_awaiting(wid, "review", timeout=120)

    # One commit per bead, `feat(<bead-id>): <summary>`, in an order the dependencies allow.
    log = list(reversed(branch_log(repo, view["branch"])))
    assert len(log) == len(BEADS), log
    landed = [subject.split("(", 1)[1].split(")", 1)[0] for subject in log]
    assert sorted(landed) == sorted(BEADS) and all(s.startswith("feat(") for s in log)
    assert "feat(square): add the square" in log
    for bead, needs in DEPENDS.items():
        assert all(landed.index(n) < landed.index(bead) for n in needs), landed
    registry = git(repo, "show", f"{view['branch']}:shapes/registry.py")
    assert '"square"' in registry and '"circle"' in registry

    events = _swarm_events(client, wid)
    types = [e["type"] for e in events]
    assert types[0] == "swarm:started" and events[0]["max_workers"] == 3 and types[-1] == "swarm:finished"
    assert types.count("worker:joined") == 3
    spans = _intervals(events)
    # Work ran in parallel: some two attempts were open at the same time.
    flat = [(b, s, e) for b, spans_ in spans.items() for s, e in spans_]
    assert any(s1 < e2 and s2 < e1 for (b1, s1, e1) in flat for (b2, s2, e2) in flat if b1 != b2)
    # Square and circle share shapes/registry.py: never at the same time.
    for s1, e1 in spans["square"]:
        for s2, e2 in spans["circle"]:
            assert e1 < s2 or e2 < s1, (spans["square"], spans["circle"])
    # Every lease granted was released.
    granted = [e for e in events if e["type"] == "lease:granted"]
    released = [e for e in events if e["type"] == "lease:released"]
    assert len(granted) == len(released) >= len(BEADS)

    beads = client.http.get("/api/beads", params={"epic_id": wid}).raise_for_status().json()
    assert {b["id"]: b["status"] for b in beads["beads"]} == dict.fromkeys(BEADS, "closed")
    commits = {b["id"]: b["commit"] for b in beads["beads"]}
    assert set(commits.values()) == set(git(repo, "log", "--format=%H", f"main..{view['branch']}").split())

    assert_replay_equals_live(client, wid)
    replayed = json.loads(client.system.cli("replay", wid).stdout)
    live = client.http.get("/api/beads/swarm", params={"epic_id": wid}).raise_for_status().json()
    assert replayed["swarm"] == live
    finish(client, wid)


def _pulse(scenario: dict[str, Any], bead: str) -> dict[str, Any]:
    pulses = scenario["scripts"]["plan"][1]["content"][1]["input"]["pulses"]
    return next(p for p in pulses if p["id"] == bead)


def _edit_notes(bead: str) -> dict[str, Any]:
    return {"type": "tool_use", "name": "edit_file", "input": {
        "reason": "List this note", "path": "NOTES.md", "oldString": "# Notes\n", "newString": f"# Notes\n- {bead}\n"}}


def _ask_for_notes(wait_seconds: int = 0) -> dict[str, Any]:
    return {"type": "tool_use", "name": "request_scope", "input": {
        "reason": "The note must be listed in NOTES.md", "paths": ["NOTES.md"],
        "why": "Each note is listed in NOTES.md", "wait_seconds": wait_seconds}}


def _read_notes() -> dict[str, Any]:
    return {"type": "tool_use", "name": "read_file", "input": {"reason": "Read the notes", "path": "NOTES.md"}}


def test_a_worker_writing_outside_its_bead_is_refused_then_widened_on_request(client: Client, model,
                                                                               tmp_path: Path) -> None:
    scenario = swarm_scenario()
    # The naming bead declares docs/naming.md only; its worker tries NOTES.md too, is refused, asks, and is given it.
    steps = scenario["scripts"]["pulsing:naming"]
    steps[0]["content"].insert(1, _read_notes())
    steps[1:1] = [{"content": [_edit_notes("naming")]}, {"content": [_ask_for_notes()]},
                  {"content": [_edit_notes("naming")]}]
    wid, repo = start(client, model, tmp_path, scenario, branch="autarch/widen")
    approve_stages(client, wid)
    view = client.wait_awaiting(wid, "review", timeout=120)

    events = client.events(wid, until="swarm:finished")
    sessions = {e["session_id"] for e in events if e["type"] == "bead:claimed" and e["bead_id"] == "naming"}
    edits = [e for e in events if e["type"] == "turn:tool_completed" and e["tool"] == "edit_file"
             and e["session_id"] in sessions]
    refused = json.loads(edits[0]["output"])
    assert edits[0]["is_error"] and refused["code"] == "outside_bead_scope", refused
    assert refused["bead_files"] == ["docs/naming.md"] and "request_scope" in refused["error"]
    assert not edits[1]["is_error"], edits[1]
    requested = [e for e in events if e["type"] == "bead:scope_requested"]
    widened = [e for e in events if e["type"] == "bead:widened"]
    assert [(e["bead_id"], e["paths"]) for e in requested] == [("naming", ["NOTES.md"])]
    assert [(e["bead_id"], e["added"], e["files"]) for e in widened] == [
        ("naming", ["NOTES.md"], ["docs/naming.md", "NOTES.md"])]
    assert widened[0]["worker"] == requested[0]["worker"] and widened[0]["request_id"] == requested[0]["request_id"]
    # The widened bead's lease covered the file, and the write landed in the bead's own commit.
    granted = [e for e in events if e["type"] == "lease:granted" and e["bead_id"] == "naming"]
    assert granted and all(e["holder"] == widened[0]["worker"] for e in granted)
    assert git(repo, "show", f"{view['branch']}:NOTES.md") == "# Notes\n- naming\n"
    naming = next(line for line in git(repo, "log", "--format=%H %s", view["branch"]).splitlines()
                  if "feat(naming)" in line).split()[0]
    assert git(repo, "show", "--name-only", "--format=", naming).split() == [
        "NOTES.md", "docs/naming.md", "history/widen/verification/naming.md"]
    bead = client.http.get(f"/api/beads/{wid}/naming").raise_for_status().json()
    assert bead["files"] == ["docs/naming.md", "NOTES.md"]
    finish(client, wid)


def test_a_commit_whose_files_changed_since_it_began_is_not_forced_the_bead_is_reopened(
        client: Client, model, tmp_path: Path) -> None:
    scenario = swarm_scenario()
    # units declares NOTES.md and edits it. naming began at the same time and asks for NOTES.md (waiting for units
    # to let go of it): widened once units landed, its edit is of the file as it was when naming began, so its
    # merge meets units' change: a conflict, never forced.
    _pulse(scenario, "units")["expectedChanges"].append("NOTES.md")
    units = scenario["scripts"]["pulsing:units"]
    units[0]["content"].insert(1, _read_notes())
    units.insert(1, {"content": [_edit_notes("units")]})
    naming = scenario["scripts"]["pulsing:naming"]
    naming[0]["content"].insert(1, _read_notes())
    naming[1:1] = [{"content": [_ask_for_notes(wait_seconds=60)]},
                   {"content": [_edit_notes("naming")]}]
    scenario["scripts"]["pulsing:naming-a2"] = copy.deepcopy(naming)
    wid, repo = start(client, model, tmp_path, scenario, branch="autarch/notes")
    approve_stages(client, wid)
    view = client.wait_awaiting(wid, "review", timeout=120)

    events = _swarm_events(client, wid)
    reopened = [e for e in events if e["type"] == "bead:reopened"]
    assert [e["bead_id"] for e in reopened] == ["naming"], reopened
    assert reopened[0]["conflict"]["kind"] == "merge" and reopened[0]["conflict"]["files"] == ["NOTES.md"]
    claims = [e for e in events if e["type"] == "bead:claimed" and e["bead_id"] == "naming"]
    assert [c["attempt"] for c in claims] == [1, 2]
    log = branch_log(repo, view["branch"])
    assert len(log) == len(BEADS) and sum(1 for s in log if s.startswith("feat(naming)")) == 1
    assert git(repo, "show", f"{view['branch']}:NOTES.md") == "# Notes\n- naming\n- units\n"
    finish(client, wid)


def test_a_pulse_without_verify_is_bounced_back_to_planning(client: Client, model, tmp_path: Path) -> None:
    scenario = swarm_scenario()
    plan = scenario["scripts"]["plan"]
    good = copy.deepcopy(plan[1])
    bad = plan[1]["content"][1]["input"]["pulses"]
    del bad[4]["verify"]  # units
    plan.extend([{"content": [{"type": "tool_use", "name": "submit_plan",
                               "input": good["content"][1]["input"]}]}, "Plan resubmitted."])
    wid, repo = start(client, model, tmp_path, scenario, branch="autarch/bounce")
    approve_stages(client, wid, "scoping", "research")
    client.wait_awaiting(wid, "planning")
    view = client.approve(wid)
    assert view["stage"] == "planning" and not view["awaiting_approval"]
    assert "units: missing verify" in view["last_feedback"]
    # The planning agent gets the bounce and submits the plan again, complete this time.
    client.wait_awaiting(wid, "planning")
    client.approve(wid)
    view = client.wait_awaiting(wid, "review", timeout=120)
    assert len(branch_log(repo, view["branch"])) == len(BEADS)
    finish(client, wid)
