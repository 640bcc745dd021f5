"""The Swarm aggregate: ready work, claims, attempts, bounces — and replay rebuilding all of it."""

from __future__ import annotations

import msgspec
import pytest

from autarch.contracts.agents import SubmitPlanArgs
from autarch.contracts.beads import Dependency, TddSteps
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.swarm.model import Bead, Swarm, SwarmError
from autarch.services.orchestrator.swarm.plan import bead_dicts, bounced_pulses, is_bead_plan, level_width

WID = "7d4c2f1e-8a9b-4c3d-9e2f-1a2b3c4d5e6f"


def _bead(bead_id: str, *deps: str, files: list[str] | None = None, **fields: object) -> dict[str, object]:
    bead = Bead(id=bead_id, title=bead_id, files=files or [f"{bead_id}.py"], verify=["true"],
                dependencies=[Dependency(bead_id=d) for d in deps], created_at="2026-11-25T09:00:00+00:00",
                updated_at="2026-11-25T09:00:00+00:00")
    return {**msgspec.to_builtins(bead), **fields}


def diamond() -> Swarm:
    swarm = Swarm(workflow_id=WID, mode="swarm", max_workers=2, at="2026-11-25T09:00:00+00:00",
                  beads=[_bead("a"), _bead("b", "a"), _bead("c", "a"), _bead("d", "b", "c"), _bead("x")])
    swarm.join("w-one", "w1", "/wt/1")
    swarm.join("w-two", "w2", "/wt/2")
    return swarm


def test_ready_is_open_with_every_blocker_closed() -> None:
    swarm = diamond()
    assert sorted(b for b in swarm.beads if swarm.is_ready(b)) == ["a", "x"]
    a = swarm.claim("a", "w-one")
    assert not swarm.is_ready("a") and swarm.beads["a"].status == "in_progress"
    swarm.merged_as(a, "c0ffee")
    assert sorted(b for b in swarm.beads if swarm.is_ready(b)) == ["b", "c", "x"]
    assert swarm.workers["w-one"].beads_closed == ["a"] and swarm.workers["w-one"].status == "idle"


def test_a_claim_is_refused_for_a_bead_that_is_taken_blocked_or_by_a_busy_worker() -> None:
    swarm = diamond()
    swarm.claim("a", "w-one")
    with pytest.raises(SwarmError, match="not ready"):
        swarm.claim("a", "w-two")
    with pytest.raises(SwarmError, match="not ready"):
        swarm.claim("b", "w-two")  # blocked by a
    with pytest.raises(SwarmError, match="not free"):
        swarm.claim("x", "w-one")  # w-one is working on a


def test_a_reopened_bead_is_ready_again_and_its_next_claim_is_a_new_attempt() -> None:
    swarm = diamond()
    first = swarm.claim("a", "w-one")
    swarm.reopen(first, "merge conflict")
    assert swarm.is_ready("a") and swarm.beads["a"].assignee is None
    second = swarm.claim("a", "w-two")
    assert (first.number, second.number) == (1, 2) and second.session_id != first.session_id


def test_a_bead_without_verify_is_bounced_and_an_edit_that_supplies_it_reopens_it() -> None:
    swarm = diamond()
    swarm.add_bead(Bead(id="y", title="no checks", files=["y.py"]))
    assert swarm.beads["y"].status == "bounced" and "verify" in (swarm.beads["y"].bounce_reason or "")
    swarm.edit_bead("y", {"verify": ["pytest -q"]})
    assert swarm.beads["y"].status == "open" and swarm.is_ready("y")


def test_tdd_required_needs_its_steps() -> None:
    swarm = diamond()
    swarm.add_bead(Bead(id="t", title="tdd", files=["t.py"], verify=["pytest"], testing_mode="tdd-required"))
    assert swarm.beads["t"].status == "bounced" and "tdd_steps" in (swarm.beads["t"].bounce_reason or "")
    swarm.edit_bead("t", {"tdd_steps": msgspec.to_builtins(TddSteps(red="pytest -k new", green="pytest"))})
    assert swarm.beads["t"].status == "open"


def test_dependencies_refuse_cycles_and_unknown_beads() -> None:
    swarm = diamond()
    with pytest.raises(SwarmError, match="cycle"):
        swarm.add_dependency("a", "d", "blocks")
    with pytest.raises(SwarmError, match="no bead"):
        swarm.add_dependency("a", "nope", "blocks")
    swarm.add_dependency("x", "d", "parent-child")  # grouping only: x stays ready
    assert swarm.is_ready("x")


def test_closing_by_hand_unblocks_and_a_worked_bead_cannot_be_closed_by_hand() -> None:
    swarm = diamond()
    swarm.claim("a", "w-one")
    with pytest.raises(SwarmError, match="being worked"):
        swarm.close_by_hand("a", "done elsewhere")
    swarm.close_by_hand("x", "dropped")
    assert swarm.beads["x"].status == "closed"


def test_replay_rebuilds_beads_claims_attempts_and_leases(tmp_path) -> None:
    app = WorkflowApplication(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                                   "SQLITE_DBNAME": str(tmp_path / "events.sqlite")})
    swarm = diamond()
    a = swarm.claim("a", "w-one")
    swarm.begun(a, "base0")
    swarm.leased(a, ["a.py"])
    swarm.session_opened(a, "turn-1")
    swarm.turn_handled(a, "turn-2", "tool", summary="feat(a): a", nudge=None)
    x = swarm.claim("x", "w-two")
    swarm.lease_conflict(x, ["x.py"], ["someone"])
    app.save(swarm)
    again = app.get_swarm(WID)
    assert msgspec.to_builtins(list(again.beads.values())) == msgspec.to_builtins(list(swarm.beads.values()))
    assert again.attempts == swarm.attempts and again.leases == swarm.leases and again.workers == swarm.workers
    assert again.workers["w-two"].status == "waiting"


def test_a_plan_with_verify_is_a_bead_plan_and_its_gaps_are_named() -> None:
    plan = msgspec.convert({"approachSummary": "x", "pulses": [
        {"id": "p1", "title": "t", "description": "d", "expectedChanges": ["a.py"], "estimatedSize": "small",
         "verify": ["pytest"]},
        {"id": "p2", "title": "t", "description": "d", "expectedChanges": [], "estimatedSize": "small",
         "dependsOn": ["p1"]},
        {"id": "p3", "title": "t", "description": "d", "expectedChanges": ["c.py"], "estimatedSize": "small",
         "verify": ["pytest"], "testingMode": "tdd-required"},
    ]}, SubmitPlanArgs)
    assert is_bead_plan(plan)
    assert bounced_pulses(plan) == {"p2": ["expectedChanges", "verify"], "p3": ["tddSteps"]}
    beads = bead_dicts(plan, feature="shapes", at="2026-11-25T09:00:00+00:00")
    assert beads[1]["dependencies"] == [{"bead_id": "p1", "type": "blocks"}]
    assert beads[0]["verification_evidence"] == "history/shapes/verification/p1.md"


def test_level_width_counts_what_can_run_at_once() -> None:
    swarm = diamond()
    assert level_width(list(swarm.beads.values())) == 2  # {a, x}, then {b, c}
