"""Worker discipline end to end: verification run fresh at close (a failure keeps the bead open and the worker
fixes it in the same turn), TDD's red before production code, and the evidence in the bead's commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.workflows.conftest import Client, approve_stages, finish, git, start

from .conftest import swarm_scenario
from .test_swarm_e2e import BEADS, _swarm_events

CHECK = "PYTHONPATH=. python3 tests/test_naming.py"
"""naming's red, green and verify step: the test run from the worktree's root (so ``shapes`` imports)."""


def _tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": arguments}


def _step(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"content": list(blocks)}


def discipline_scenario() -> dict[str, Any]:
    scenario = swarm_scenario()
    pulses = {p["id"]: p for p in scenario["scripts"]["plan"][1]["content"][-1]["input"]["pulses"]}
    # units: its check wants the words "square units"; the first draft lacks them.
    pulses["units"]["verify"] = ["grep -q 'square units' docs/units.md"]
    scenario["scripts"]["pulsing:units"] = [
        _step(_tool("write_file", reason="Draft the note", path="docs/units.md",
                    content="# Units\n\nAreas.\n")),
        _step(_tool("complete_pulse", summary="docs: say which units areas use", filesChanged=["docs/units.md"])),
        _step(_tool("write_file", reason="Say it as the check wants", path="docs/units.md",
                    content="# Units\n\nAreas are in square units.\n")),
        _step(_tool("complete_pulse", summary="docs: say which units areas use", filesChanged=["docs/units.md"])),
        "Bead complete.",
    ]
    # naming: tdd-required; the worker tries production code first, is refused, then goes red → green.
    test = "from shapes.naming import module_name\n\nassert module_name('Square') == 'square'\nprint('ok')\n"
    pulses["naming"].update({
        "title": "Module naming", "description": "shapes/naming.py: module_name(class name) → module name.",
        "expectedChanges": ["shapes/naming.py", "tests/test_naming.py"], "testingMode": "tdd-required",
        "tddSteps": {"red": CHECK, "green": CHECK},
        "verify": ["PYTHONPATH=. python3 tests/test_naming.py"]})
    production = "def module_name(cls: str) -> str:\n    return cls.lower()\n"
    scenario["scripts"]["pulsing:naming"] = [
        _step(_tool("write_file", reason="The function", path="shapes/naming.py", content=production)),
        _step(_tool("write_file", reason="The test first", path="tests/test_naming.py", content=test)),
        _step(_tool("shell", reason="See it fail", command="PYTHONPATH=. python3 tests/test_naming.py")),
        _step(_tool("write_file", reason="Now the function", path="shapes/naming.py", content=production)),
        _step(_tool("complete_pulse", summary="feat(shapes): name modules after their shape",
                    filesChanged=["shapes/naming.py", "tests/test_naming.py"])),
        "Bead complete.",
    ]
    return scenario


def test_verification_refuses_a_failing_close_and_tdd_evidence_lands_in_the_commit(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, discipline_scenario(), branch="autarch/discipline")
    approve_stages(client, wid)
    view = client.wait_awaiting(wid, "review", timeout=120)
    branch = view["branch"]

    # units: the first close was refused with the check's result, in the same turn; the fix landed once.
    units = [r for r in model.requests if r.script == "units" and r.body]
    refusal = json.dumps(units[2].body["messages"][-1])  # the request after the first complete_pulse
    assert "Completion refused" in refusal and "grep -q" in refusal
    assert len({r.body["messages"][0]["content"][0]["text"][:80] for r in units}) == 1  # one session, one turn
    assert "square units" in git(repo, "show", f"{branch}:docs/units.md")

    # naming: production code before red was refused; red failed, green passed; both are in the evidence.
    naming = [r for r in model.requests if r.script == "naming" and r.body]
    first_result = json.dumps(naming[1].body["messages"][-1])
    assert "refused" in first_result and "tdd-required" in first_result
    evidence = client.http.get(f"/api/beads/{wid}/naming/evidence").raise_for_status().json()["evidence"]
    assert len(evidence) == 1 and evidence[0]["passed"] and evidence[0]["testing_mode"] == "tdd-required"
    steps = [(r["step"], r["command"], r["passed"]) for r in evidence[0]["runs"]]
    assert steps == [("tdd-red", "PYTHONPATH=. python3 tests/test_naming.py", True),
                     ("tdd-green", "PYTHONPATH=. python3 tests/test_naming.py", True),
                     ("verify", "PYTHONPATH=. python3 tests/test_naming.py", True)]
    assert evidence[0]["runs"][0]["exit_code"] != 0 and evidence[0]["runs"][1]["exit_code"] == 0
    assert all(r["output_digest"].startswith("sha256:") for r in evidence[0]["runs"])
    record = git(repo, "show", f"{branch}:history/discipline/verification/naming.md")
    assert "tdd-red (must fail)" in record and "tdd-green" in record and CHECK in record
    # The evidence is in the bead's own commit, beside its code.
    log = git(repo, "log", "--format=%H %s", f"main..{branch}").splitlines()
    naming_commit = next(line for line in log if "feat(naming)" in line).split()[0]
    changed = git(repo, "show", "--name-only", "--format=", naming_commit).split()
    assert sorted(changed) == ["history/discipline/verification/naming.md", "shapes/naming.py",
                               "tests/test_naming.py"]

    events = _swarm_events(client, wid)
    recorded = [e for e in events if e["type"] == "bead:evidence"]
    assert sorted(e["bead_id"] for e in recorded) == sorted(BEADS)
    assert all(e["evidence"]["passed"] for e in recorded)
    finish(client, wid)


def test_decision_references_are_checked_against_the_features_context_md(client: Client, model,
                                                                          tmp_path: Path) -> None:
    scenario = swarm_scenario()
    pulses = {p["id"]: p for p in scenario["scripts"]["plan"][1]["content"][-1]["input"]["pulses"]}
    pulses["units"]["decisionRefs"] = ["D1"]
    scenario["files"]["history/decide/CONTEXT.md"] = "# Decisions\n\n## D1 — areas are in square units\n"
    wid, _ = start(client, model, tmp_path, scenario, branch="autarch/decide")
    approve_stages(client, wid)
    client.wait_awaiting(wid, "review", timeout=120)

    evidence = client.http.get(f"/api/beads/{wid}/units/evidence").raise_for_status().json()["evidence"]
    runs = evidence[-1]["runs"]
    assert [r["step"] for r in runs] == ["verify", "decisions"] and all(r["passed"] for r in runs), runs
    assert "decisions defined in history/decide/CONTEXT.md: D1" in runs[1]["output_excerpt"]
    # A bead without decision references has no such step.
    naming = client.http.get(f"/api/beads/{wid}/naming/evidence").raise_for_status().json()["evidence"]
    assert [r["step"] for r in naming[-1]["runs"]] == ["verify"]
    finish(client, wid)
