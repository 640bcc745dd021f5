"""Schema evolution: every stored version of every event still decodes, with nothing renamed or retyped.

The rule: new fields get defaults (in an event or in a struct it holds); nothing is renamed or retyped within a
schema version. A rename is a new schema version whose older shape ``contracts.events.upcast`` still reads (loop
events, version 2: ``workflow_id`` became ``session_id``). A fixture is added for each event type when it is
introduced (``<kind>.<name>.v1.json``) and a new one for each new shape (``v2``, …); fixtures are never edited.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import msgspec
import pytest

from autarch.contracts.events import EVENT_TYPES, AnyEvent, LoopEvent, decode_event, event_subject, upcast

FIXTURES = Path(__file__).parent / "fixtures" / "events"
ALL_FIXTURES = sorted(FIXTURES.glob("*.json"))


def test_every_event_type_has_a_fixture():
    covered = {json.loads(p.read_text())["type"] for p in ALL_FIXTURES}
    members = {cls.__struct_config__.tag for cls in typing.get_args(AnyEvent)}
    assert members == set(EVENT_TYPES)
    assert covered == members, f"events without a fixture: {sorted(members - covered)}"


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.name)
def test_stored_fixture_decodes_and_keeps_every_field(path: Path):
    stored = upcast(json.loads(path.read_text()))  # a renamed field is compared under its new name
    event = decode_event(path.read_bytes())
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
        stored_fields = set(upcast(json.loads(v1.read_text()))) - {"type"}
        required = {f.name for f in msgspec.structs.fields(cls) if f.required}
        assert required <= stored_fields, f"{tag}: new required fields {sorted(required - stored_fields)}"


def test_a_loop_event_recorded_with_the_session_in_workflow_id_still_decodes():
    """Before issue 33 a loop event carried its session's id as ``workflow_id`` (version 1); it reads as version 2,
    the id in ``session_id``, and goes on the same subject as it did."""
    old = (b'{"type": "loop:iteration_started", "workflow_id": "5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13", '
           b'"occurred_at": "2026-11-25T05:00:00Z", "schema_version": 1, "iteration_number": 1, "max_iterations": 3, '
           b'"agent_session_id": "a1", "anchor_strategy": "none"}')
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(old, type=AnyEvent)  # the strict decoder alone no longer reads it
    event = decode_event(old)
    assert isinstance(event, LoopEvent) and event.session_id == "5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13"
    assert event.schema_version == 2 and "workflow_id" not in json.loads(msgspec.json.encode(event))
    assert event_subject(event) == "autarch.events.5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13.loop." \
                                   "5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13.iteration_started"
    # A workflow event is not touched by the loop rename: one without its id still fails.
    with pytest.raises(msgspec.ValidationError):
        decode_event(b'{"type": "workflow:completed", "occurred_at": "2026-11-25T05:00:00Z"}')
