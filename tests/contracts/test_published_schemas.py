"""The published schemas hold in a strict JSON Schema validator, carry their version, and accept every event."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import jsonschema
import msgspec
import pytest

from autarch.cli.contracts_cmd import SCHEMA_BASE, published_schema, schema_version
from autarch.contracts.events import AnyEvent, decode_event, upcast

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "events").glob("*.json"))
UNION = published_schema("events.AnyEvent", AnyEvent)
validator = jsonschema.Draft202012Validator(UNION, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def test_every_schema_compiles_strictly_and_names_its_version(tmp_path):
    from autarch.cli.contracts_cmd import export_schemas

    for path in export_schemas(tmp_path):
        schema = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"].startswith(f"{SCHEMA_BASE}{path.stem}/v") and schema["$id"].endswith(".json")
        assert "discriminator" not in path.read_text(), path.name


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_stored_event_validates_against_the_union(path: Path):
    # As read today: an older version of a renamed field (a loop event's v1 ``workflow_id``) upcast first.
    stored = upcast(json.loads(path.read_text()))
    validator.validate(stored)
    # And as it goes on the wire today: with its schema version.
    event = decode_event(path.read_bytes())
    wire = json.loads(msgspec.json.encode(event))
    assert wire["schema_version"] == schema_version(type(event))
    validator.validate(wire)


def test_each_event_type_publishes_its_own_version():
    for cls in typing.get_args(AnyEvent):
        assert schema_version(cls) >= 1
        schema = published_schema(f"events.{cls.__name__}", cls)
        assert schema["$id"].endswith(f"/v{schema_version(cls)}.json")
