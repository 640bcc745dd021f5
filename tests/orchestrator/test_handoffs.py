"""A worker's handoff document is exactly the seed's schema 2.0 (checked with a strict JSON Schema validator)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import msgspec

from autarch.contracts.beads import SwarmMode
from autarch.runtime.aggregates import project
from autarch.services.orchestrator.swarm.handoffs import (
    STATE_FILE,
    handoff_document,
    manifest_document,
    owner_file,
    state_document,
)
from autarch.services.orchestrator.swarm.model import Swarm

from .test_swarm_model import WID, _bead

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "contracts" / "handoff.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
AT = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


def _swarm(mode: SwarmMode) -> Swarm:
    swarm = Swarm(workflow_id=WID, mode=mode, max_workers=1, at=AT.isoformat(),
                  beads=[_bead("a"), _bead("b", "a", verification_evidence="history/x/verification/b.md")])
    swarm.join("AmberFalcon", "w1", "/wt/1")
    first = swarm.claim("a", "AmberFalcon")
    swarm.merged_as(first, "c0ffee")
    return swarm


def test_a_workers_handoff_validates_and_names_its_runtime() -> None:
    swarm = _swarm("swarm")
    a = swarm.claim("b", "AmberFalcon")
    doc = handoff_document(swarm, a, swarm.beads["b"], feature="x", tokens_used_pct=0.671, paused_at=AT)
    VALIDATOR.validate(doc)
    assert doc["owner_id"] == "worker-AmberFalcon"
    assert doc["read_first"] == [".pulse/handoffs/worker-AmberFalcon.json", ".pulse/beads/b.md"]
    assert doc["payload"]["runtime"]["runtime_nickname"] == "w1"
    assert doc["payload"]["context_snapshot"] == {"tokens_used_pct": 0.671, "last_bead_closed": "a"}
    assert doc["payload"]["verification_evidence_paths"] == ["history/x/verification/b.md"]


def test_a_standalone_handoff_has_no_runtime_and_its_own_file() -> None:
    swarm = _swarm("standalone")
    a = swarm.claim("b", "AmberFalcon")
    doc = handoff_document(swarm, a, swarm.beads["b"], feature="x", tokens_used_pct=0.7, paused_at=AT)
    VALIDATOR.validate(doc)
    assert "runtime" not in doc["payload"] and doc["owner_id"] == "single-worker"
    assert owner_file(swarm, "AmberFalcon") == ".pulse/handoffs/single-worker.json"
    # A standalone run records its completions in .pulse/STATE.md (bead a landed): read it first too.
    assert doc["read_first"] == [".pulse/handoffs/single-worker.json", ".pulse/beads/b.md", STATE_FILE]


def test_a_standalone_runs_state_lists_what_landed_and_what_is_left() -> None:
    swarm = _swarm("standalone")
    text = state_document(swarm)
    done, left = text.split("## Left")
    assert "- a: " in done and "Commit: c0ffee." in done and "- b" not in done
    assert left.strip().splitlines() == ["- b"]


def test_the_schema_refuses_a_handoff_missing_a_field() -> None:
    swarm = _swarm("swarm")
    doc = handoff_document(swarm, swarm.claim("b", "AmberFalcon"), swarm.beads["b"], feature="x",
                           tokens_used_pct=0.7, paused_at=AT)
    del doc["payload"]["transfer"]["resume_notes"]
    assert not VALIDATOR.is_valid(doc)


def test_the_manifest_lists_each_handoff_once_per_owner() -> None:
    swarm = _swarm("swarm")
    a = swarm.claim("b", "AmberFalcon")
    doc = handoff_document(swarm, a, swarm.beads["b"], feature="x", tokens_used_pct=0.7, paused_at=AT)
    swarm.handed_off(a, "turn-1", owner_file(swarm, "AmberFalcon"), doc)
    again = swarm.attempts[("b", 1)]
    assert again.generation == 1 and again.stale_sessions and again.session_id not in again.stale_sessions
    manifest = json.loads(manifest_document(swarm.handoffs))
    assert [h["owner_file"] for h in manifest["handoffs"]] == [".pulse/handoffs/worker-AmberFalcon.json"]


def test_a_recorded_handoff_replays_typed_and_is_written_back_as_recorded() -> None:
    swarm = _swarm("swarm")
    a = swarm.claim("b", "AmberFalcon")
    doc = handoff_document(swarm, a, swarm.beads["b"], feature="x", tokens_used_pct=0.671, paused_at=AT)
    swarm.handed_off(a, "turn-1", owner_file(swarm, "AmberFalcon"), doc)
    replayed = project(None, swarm.collect_events())
    typed = replayed.handoff_documents[-1]
    assert (typed.owner_id, typed.payload.runtime.runtime_nickname) == ("worker-AmberFalcon", "w1")
    # What the fresh session is given to read is the document exactly as the event recorded it.
    assert json.dumps(msgspec.to_builtins(typed), indent=2) == json.dumps(doc, indent=2)
