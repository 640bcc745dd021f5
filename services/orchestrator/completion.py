"""Completion validation of a pulse (seed 000): recent tool failures block ``complete_pulse``.

A failed call counts until a later call with the same target succeeds (the agent re-ran the test,
re-applied the edit); failures whose output matches a preflight baseline are known issues and ignored.
"""

from __future__ import annotations

import re
from typing import Any

from autarch.contracts.agents import TURN_ENDING_TOOLS, SessionView, ToolCallView

__all__ = ["CONVENTIONAL_COMMIT", "unresolved_failures"]

CONVENTIONAL_COMMIT = re.compile(r"^[A-Za-z][A-Za-z0-9-]*(\([^()\r\n]+\))?!?: [^\r\n]*\S[^\r\n]*$")
"""The git service's rule for a checkpoint summary (its first line)."""

_TARGET_FIELDS = ("command", "path", "file_path", "pattern")


def _target(call: ToolCallView) -> tuple[str, str]:
    for field in _TARGET_FIELDS:
        value = call.input.get(field)
        if isinstance(value, str):
            return call.name, value
    return call.name, ""


def _known(call: ToolCallView, baselines: list[dict[str, Any]]) -> bool:
    output = call.output or ""
    for baseline in baselines:
        if baseline["pattern"] and baseline["pattern"] in output:
            path = baseline.get("file_path")
            if not path or path in output or path == call.input.get("path"):
                return True
    return False


def _describe(call: ToolCallView) -> str:
    _, target = _target(call)
    detail = " ".join((call.output or "error").split())[:240]
    return f"{call.name}{f' `{target[:120]}`' if target else ''}: {detail}"


def unresolved_failures(session: SessionView, baselines: list[dict[str, Any]]) -> list[str]:
    """The failed tool calls of ``session`` that no later call fixed and no baseline explains, described."""
    calls = [c for turn in session.turns for c in turn.tool_calls if c.name not in TURN_ENDING_TOOLS]
    failing: dict[tuple[str, str], ToolCallView] = {}
    for call in calls:
        key = _target(call)
        if call.is_error and not _known(call, baselines):
            failing[key] = call
        elif not call.is_error:
            failing.pop(key, None)
    return [_describe(c) for c in failing.values()]
