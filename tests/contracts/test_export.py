"""``autarch contracts export DIR`` writes a JSON Schema per contract, and docs/ carries the current output."""

from __future__ import annotations

import json
from pathlib import Path

from autarch.cli.contracts_cmd import all_contracts, export_schemas
from autarch.cli.main import main

DOCS_SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "contracts" / "schemas"


def test_export_writes_one_valid_schema_per_contract(tmp_path):
    assert main(["contracts", "export", str(tmp_path / "out")]) == 0
    written = {p.stem for p in (tmp_path / "out").glob("*.json")}
    assert set(all_contracts()) | {"events.AnyEvent"} == written
    schema = json.loads((tmp_path / "out" / "workflows.CreateWorkflow.json").read_text())
    props = schema["$defs"]["CreateWorkflow"]["properties"]
    assert {"workflow_id", "title", "request", "repo", "base_branch"} <= set(props)
    union = json.loads((tmp_path / "out" / "events.AnyEvent.json").read_text())
    assert "workflow:created" in json.dumps(union)


def test_docs_carry_the_current_schemas(tmp_path):
    export_schemas(tmp_path)
    current = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    documented = {p.name: p.read_text() for p in DOCS_SCHEMAS.glob("*.json")}
    stale = "docs/contracts/schemas is stale: run `autarch contracts export docs/contracts/schemas`"
    assert documented == current, stale
