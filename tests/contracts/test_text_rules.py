"""The visible-text rule of the HTTP API holds wherever people's or agents' text enters: decoding refuses it.

Resume, extension and answer messages, a loop session's start fields, bead titles and reasons, mail subjects
and bodies: blank values and control characters (but tab and newlines in free text) are refused by the
decoder itself, so the gateway answers 400 and the orchestrator never records them.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from autarch.contracts.beads import CloseBeadBody, CreateBeadBody, EditBeadBody
from autarch.contracts.execution import AnswerQuestionsBody, ApproveExtensionBody, ResumeBody, StopBody
from autarch.contracts.http import CLEAN_TEXT, TEXT, TITLE
from autarch.contracts.loops import AbortLoopBody, ResumeLoopBody, StartLoopBody
from autarch.contracts.mail import ReplyMail, SendMail

EPIC = "7b000000-0000-4000-8000-000000000001"
START = {"projectName": "shop", "projectPath": "/r/shop", "goal": "Write a and b"}
MAIL = {"project_key": EPIC, "sender_name": "AmberFalcon", "to": ["coordinator"], "subject": "Lease", "body_md": "ok"}

CASES: list[tuple[type, dict[str, Any], str]] = [
    (ResumeBody, {}, "message"),
    (ApproveExtensionBody, {}, "message"),
    (StopBody, {}, "reason"),
    (ResumeLoopBody, {}, "message"),
    (AbortLoopBody, {}, "reason"),
    (StartLoopBody, START, "projectName"),
    (StartLoopBody, START, "goal"),
    (CreateBeadBody, {"epic_id": EPIC}, "title"),
    (EditBeadBody, {}, "title"),
    (CloseBeadBody, {}, "reason"),
    (SendMail, MAIL, "subject"),
    (SendMail, MAIL, "body_md"),
    (ReplyMail, {"project_key": EPIC, "sender_name": "coordinator", "message_id": "m1"}, "body_md"),
]
REFUSED = ["", " ", "\t\n ", "red \x1b[31m", "nul \x00", "csi \x9b1m", "bell \x07", "del \x7f"]


def _decode(kind: type, base: dict[str, Any], field: str, value: Any) -> Any:
    return msgspec.json.decode(msgspec.json.encode({**base, field: value}), type=kind)


@pytest.mark.parametrize(("kind", "base", "field"), CASES, ids=lambda c: getattr(c, "__name__", None))
def test_blank_and_control_characters_are_refused(kind: type, base: dict[str, Any], field: str):
    for value in REFUSED:
        with pytest.raises(msgspec.ValidationError):
            _decode(kind, base, field, value)
    assert _decode(kind, base, field, "Fine, visible: ünïcode ✓")


def test_answers_are_each_visible_text():
    for value in REFUSED:
        with pytest.raises(msgspec.ValidationError):
            _decode(AnswerQuestionsBody, {}, "answers", ["fine", value])
    assert _decode(AnswerQuestionsBody, {}, "answers", ["one\nper line\tok"]).answers == ["one\nper line\tok"]


def test_free_text_keeps_tabs_and_newlines_and_titles_stay_one_line():
    assert _decode(StartLoopBody, START, "goal", "Write a\n\tand b\r\n").goal
    with pytest.raises(msgspec.ValidationError):
        _decode(StartLoopBody, START, "projectName", "two\nlines")
    # A description may be empty, never hold a control character.
    assert _decode(CreateBeadBody, {"epic_id": EPIC, "title": "t"}, "description", "").description == ""
    with pytest.raises(msgspec.ValidationError):
        _decode(CreateBeadBody, {"epic_id": EPIC, "title": "t"}, "description", "esc \x1b")


def test_the_published_schemas_state_the_rule_as_a_pattern():
    for kind, _, field in CASES:
        _, components = msgspec.json.schema_components([kind])
        schema = components[kind.__name__]["properties"][field]
        options = [schema, *schema.get("anyOf", [])]
        assert any(o.get("pattern") in (TITLE, TEXT, CLEAN_TEXT) for o in options), (kind.__name__, field, schema)


@pytest.mark.parametrize(("kind", "base", "field"), [
    (StartLoopBody, START, "projectName"),
    (CreateBeadBody, {"epic_id": EPIC}, "title"),
    (EditBeadBody, {}, "title"),
    (SendMail, MAIL, "subject"),
    (SendMail, MAIL, "sender_name"),
], ids=lambda c: getattr(c, "__name__", None))
def test_a_one_line_field_refuses_a_final_newline(kind: type, base: dict[str, Any], field: str):
    # Python's ``$`` also matches just before a final newline; a title ending in one would reach terminals.
    assert _decode(kind, base, field, "Amber")
    with pytest.raises(msgspec.ValidationError):
        _decode(kind, base, field, "Amber\n")


def _patterns(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return found + [p for value in node.values() for p in _patterns(value)]
    if isinstance(node, list):
        return [p for value in node for p in _patterns(value)]
    return []


def test_every_published_anchored_pattern_means_the_same_in_python_and_ecmascript():
    """An anchored pattern ends ``$(?!\\n)``, so a validator with either regex dialect refuses a final newline."""
    from pathlib import Path

    schemas = Path(__file__).parents[2] / "docs" / "contracts" / "schemas"
    loose = sorted({p for path in schemas.glob("*.json") for p in _patterns(msgspec.json.decode(path.read_bytes()))
                    if p.endswith("$")})
    assert loose == []
