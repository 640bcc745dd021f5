"""Scenarios for recovery and guard paths: a model error mid-pulse, a preflight that edits a tracked file,
questions whose answers are checked."""

from __future__ import annotations

import copy
from typing import Any

from .scenarios import base, tool


def pulse_model_error_mid_pulse() -> dict[str, Any]:
    """pulse-1 reads and edits, then the model API refuses its next request once (400: the SDK does not retry
    it), so the turn ends in error with the edit in the worktree; the same step answers on the next try."""
    s = base()
    steps = copy.deepcopy(s["scripts"]["pulsing"])
    steps[2]["fail_first"] = [400]
    s["scripts"]["pulsing:pulse-1"] = steps
    return s


def preflight_edits_a_tracked_file() -> dict[str, Any]:
    """Preflight appends to README.md (the shell tool reports the rule, the file stays changed) and then
    claims a successful build anyway."""
    s = base()
    s["scripts"]["preflight"][0] = tool("shell", reason="Prepare the environment", command="echo >> README.md")
    return s


def scoping_asks_two_questions() -> dict[str, Any]:
    s = base()
    questions = [{"type": "single_select", "prompt": "What should greet('') return?",
                  "options": ["Hello, world!", "Hello, stranger!"]},
                 {"type": "free_text", "prompt": "Anything else to change?"}]
    s["scripts"]["scoping"] = [tool("ask_questions", questions=questions), *s["scripts"]["scoping"]]
    return s
