"""Research's mandatory yield (seed 004, ``request_extension``: "Research: after 8 research actions per turn").

Once a research turn has run :data:`RESEARCH_ACTIONS_PER_TURN` actions, a further tool call is not run: it is
answered with an error telling the model to yield. Counted from recorded events only: an action is a call
of the turn that was started (``ToolStarted``), so a call refused here, or refused for bad input, does not
count, and a turn replayed after a crash counts the same.

``take_note`` is not an action and is never refused: the research prompt asks the agent to write down what
it learned before it yields, and refusing the note would lose exactly what the yield is meant to keep
(compaction may replace the turn by a digest). A stage-completion tool is the yield itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from autarch.contracts.agents import TURN_ENDING_TOOLS

from .domainmodel import ToolCall, Turn

__all__ = ["RESEARCH_ACTIONS_PER_TURN", "RESEARCH_YIELD_ERROR", "over_the_limit"]

RESEARCH_ACTIONS_PER_TURN = 8

RESEARCH_YIELD_ERROR = json.dumps({
    "error": (f"Not run: this turn has already made {RESEARCH_ACTIONS_PER_TURN} research actions, the most a "
              "research turn may make. Yield now: note what you learned with take_note if you have not, then call "
              "request_extension (why more exploration is needed, what you completed, what remains), or "
              "submit_research if you already know enough, or ask_questions if only the person can decide."),
    "rule": "research_yield",
})
"""The result a refused call gets."""


def _is_action(name: str) -> bool:
    return name != "take_note" and name not in TURN_ENDING_TOOLS


def over_the_limit(turn: Turn, runnable: Iterable[ToolCall]) -> list[ToolCall]:
    """The calls among ``runnable`` (the newest reply's calls that would run, in order) that the limit refuses."""
    made = sum(1 for call in turn.calls.values() if call.started and _is_action(call.name))
    refused = []
    for call in runnable:
        if not _is_action(call.name):
            continue
        if made >= RESEARCH_ACTIONS_PER_TURN:
            refused.append(call)
        else:
            made += 1
    return refused
