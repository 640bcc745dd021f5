"""The refused ``complete_pulse`` calls of a pulse's agent session (seed 000, "Completion Validation").

The agent runner validates ``complete_pulse`` inside the turn: while a tool call failed and no later
call put it right (baselines from preflight aside), the call is refused and the model is given the
tool result ``{"error": <why>, "rule": "completion_rejected"}``; from the second refusal on, that
text also reveals the ``unresolvedIssues`` escape hatch (progressive rejection). The orchestrator
reads those results from the session and records each as ``pulse:completion_rejected``; before it
commits an accepted completion it checks the summary against the git service's subject rule.
"""

from __future__ import annotations

import json
import re

from autarch.contracts.agents import COMPLETION_REJECTED, ESCAPE_HATCH_FIELD, SessionView
from autarch.contracts.git import CONVENTIONAL_SUBJECT

__all__ = ["CONVENTIONAL_COMMIT", "Rejection", "completion_rejections"]

CONVENTIONAL_COMMIT = re.compile(CONVENTIONAL_SUBJECT)
"""The git service's rule for a checkpoint summary (its first line)."""

Rejection = tuple[str, str, bool]
"""(tool_use_id, the refusal the model was given, whether it revealed ``unresolvedIssues``)."""



def _refusal(output: str | None) -> str | None:
    """The refusal text of a ``completion_rejected`` tool result; None for any other result."""
    try:
        result = json.loads(output or "")
    except ValueError:
        return None
    if not isinstance(result, dict) or result.get("rule") != COMPLETION_REJECTED:
        return None
    return str(result.get("error", ""))


def completion_rejections(session: SessionView) -> list[Rejection]:
    """Every refused ``complete_pulse`` of ``session``, in order."""
    found = []
    for turn in session.turns:
        for call in turn.tool_calls:
            if call.name != "complete_pulse" or not call.is_error:
                continue
            refusal = _refusal(call.output)
            if refusal is not None:
                found.append((call.tool_use_id, refusal, ESCAPE_HATCH_FIELD in refusal))
    return found
