"""Schema evolution: every stored version of every event still decodes, with nothing renamed or retyped.

The rule: new fields get defaults (in an event or in a struct it holds); nothing is renamed or retyped. A
fixture is added for each event type when it is introduced (``<kind>.<name>.v1.json``) and a new one for each
new shape (``v2``, …); fixtures are never edited.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import msgspec
import pytest

from autarch.contracts.events import EVENT_TYPES, AnyEvent

FIXTURES = Path(__file__).parent / "fixtures" / "events"
ALL_FIXTURES = sorted(FIXTURES.glob("*.json"))
decoder = msgspec.json.Decoder(AnyEvent)


def test_every_event_type_has_a_fixture():
    covered = {json.loads(p.read_text())["type"] for p in ALL_FIXTURES}
    members = {cls.__struct_config__.tag for cls in typing.get_args(AnyEvent)}
    assert members == set(EVENT_TYPES)
    assert covered == members, f"events without a fixture: {sorted(members - covered)}"


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.name)
def test_stored_fixture_decodes_and_keeps_every_field(path: Path):
    stored = json.loads(path.read_text())
    event = decoder.decode(path.read_bytes())
    assert type(event).__struct_config__.tag == stored["type"]
    again = json.loads(msgspec.json.encode(event))
    for key, value in stored.items():
        assert key in again, f"{path.name}: field {key!r} was renamed or removed"
        assert _keeps(value, again[key]), f"{path.name}: field {key!r} changed type or meaning"


def _keeps(stored: object, again: object) -> bool:
    """``again`` says everything ``stored`` said; a nested struct may have gained fields (with defaults)."""
    if isinstance(stored, dict):
        return isinstance(again, dict) and all(k in again and _keeps(v, again[k]) for k, v in stored.items())
    if isinstance(stored, list):
        return isinstance(again, list) and len(again) == len(stored) and all(map(_keeps, stored, again))
    return type(stored) is type(again) and stored == again


def test_fields_added_after_v1_have_defaults():
    for cls in typing.get_args(AnyEvent):
        tag = cls.__struct_config__.tag
        v1 = FIXTURES / f"{tag.replace(':', '.')}.v1.json"
        stored_fields = set(json.loads(v1.read_text())) - {"type"}
        required = {f.name for f in msgspec.structs.fields(cls) if f.required}
        assert required <= stored_fields, f"{tag}: new required fields {sorted(required - stored_fields)}"
