"""What a client stored never drives the terminal: control characters print as escapes."""

from __future__ import annotations

import argparse

import pytest

from autarch.cli.render import printable, render_event
from autarch.cli.workflow_cmd import cmd_list


def test_printable_escapes_every_control_character():
    assert printable("a\x1b[31mb\x00c\x07\x9b") == "a\\x1b[31mb\\x00c\\x07\\x9b"
    assert printable("ünïcode ✓") == "ünïcode ✓"


def test_a_created_event_with_an_ansi_title_renders_escaped():
    line = render_event({"type": "workflow:created", "title": "\x1b[2Jgone", "repo": "/r", "base_branch": "main",
                         "workflow_id": "w"})
    assert line is not None and "\x1b" not in line and "\\x1b[2Jgone" in line


class _Listed:
    def get(self, path: str, **params: object) -> dict[str, object]:
        return {"items": [{"id": "w1", "stage": "scoping", "status": "active", "updated_at": "2026-01-01T00:00:00",
                           "title": "evil\x1b]0;owned\x07\x00"}], "total": 1}


def test_workflow_list_escapes_titles(capsys: pytest.CaptureFixture[str]):
    assert cmd_list(_Listed(), argparse.Namespace(json=False)) == 0  # type: ignore[arg-type]  # a stand-in client with only get
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x00" not in out and "\x07" not in out
    assert "evil\\x1b]0;owned\\x07\\x00" in out
