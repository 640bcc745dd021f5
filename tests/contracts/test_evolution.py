"""Schema evolution: every stored version of every event still decodes, with nothing renamed or retyped.

The rule: new fields get defaults (in an event or in a struct it holds); nothing is renamed or retyped within a
schema version. A rename is a new schema version whose older shape ``contracts.events.upcast`` still reads (loop
events, version 2: ``workflow_id`` became ``session_id``; agent session and turn events, version 2: ``workflow_id``
became ``run_id``). A fixture is added for each event type when it is
introduced (``<kind>.<name>.v1.json``) and a new one for each new shape (``v2``, …); fixtures are never edited.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import msgspec
import pytest

from autarch.contracts.events import (
    EVENT_TYPES,
    AnyEvent,
    LoopEvent,
    SessionStarted,
    TurnCompleted,
    current_shape,
    decode_as,
    decode_event,
    event_subject,
    upcast,
)

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


LOOP = "5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13"
AGENT = "9d3c2a1b-7e6f-4a5b-8c9d-0e1f2a3b4c5d"
OLD_TURN = (b'{"type": "turn:completed", "workflow_id": "' + LOOP.encode() + b'", '
            b'"occurred_at": "2026-11-25T05:00:00Z", "session_id": "' + AGENT.encode() + b'", '
            b'"turn_id": "t1", "text": "done", "thoughts": "", '
            b'"outcome": "block", "tool": "complete_pulse", "arguments": {"description": "d"}}')
"""A loop iteration's agent turn as the runner recorded it before issue 33: the loop session's id in ``workflow_id``
(version 1, ``schema_version`` absent)."""


def test_a_session_or_turn_event_recorded_with_its_run_in_workflow_id_reads_in_the_new_shape():
    """Before issue 33 an agent session's and turn's events carried their run (a workflow, or a loop session) as
    ``workflow_id`` (version 1); they read as version 2, the run in ``run_id``, on the same subject as before."""
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(OLD_TURN, type=AnyEvent)  # the strict decoder alone no longer reads it
    for event in (decode_event(OLD_TURN), decode_as(msgspec.json.Decoder(TurnCompleted), OLD_TURN)):
        assert isinstance(event, TurnCompleted) and event.run_id == LOOP and event.session_id == AGENT
        assert event.schema_version == 2 and event.tool == "complete_pulse"
        assert event_subject(event) == f"autarch.events.{LOOP}.turn.{AGENT}.completed"
    replayed = json.loads(current_shape(OLD_TURN))
    assert replayed["run_id"] == LOOP and "workflow_id" not in replayed and replayed["schema_version"] == 2
    started = decode_event(b'{"type": "session:started", "workflow_id": "_", "occurred_at": "2026-11-25T05:00:00Z", '
                           b'"session_id": "s1", "role": "discussion", "model": "m", "root": "/r"}')
    assert isinstance(started, SessionStarted) and started.run_id == "_"


def test_todays_events_pass_through_current_shape_untouched():
    """The gateway sends every replayed event through ``current_shape``: one already in today's shape is the very
    same bytes (no parse, no re-encoding), a workflow's own ``workflow_id`` included."""
    for path in ALL_FIXTURES:
        data = path.read_bytes()
        if upcast(json.loads(data)) == json.loads(data):
            assert current_shape(data) is data, path.name
