"""What a pulse's agent session says about its completion (seed 000, "Completion Validation").

The agent runner validates ``complete_pulse`` inside the turn: while tool calls failed and nothing put
them right, the call is refused with an error the model reads (progressive rejection; the
``unresolvedIssues`` escape hatch is revealed only after the threshold). The orchestrator records each
such refusal as ``pulse:completion_rejected`` and checks the commit message before it commits.
"""

from __future__ import annotations

import re

from autarch.contracts.agents import SessionView

__all__ = ["CONVENTIONAL_COMMIT", "Rejection", "completion_rejections"]

CONVENTIONAL_COMMIT = re.compile(r"^[A-Za-z][A-Za-z0-9-]*(\([^()\r\n]+\))?!?: [^\r\n]*\S[^\r\n]*$")
"""The git service's rule for a checkpoint summary (its first line)."""

Rejection = tuple[str, str, bool]
"""(tool_use_id, the refusal the model was given, whether it revealed ``unresolvedIssues``)."""


def completion_rejections(session: SessionView) -> list[Rejection]:
    """Every refused ``complete_pulse`` of ``session``, in order."""
    found = []
    for turn in session.turns:
        for call in turn.tool_calls:
            if call.name == "complete_pulse" and call.is_error and "completion_rejected" in (call.output or ""):
                output = call.output or ""
                found.append((call.tool_use_id, output, "unresolvedIssues" in output))
    return found
