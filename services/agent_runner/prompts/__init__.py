"""System prompts, one module per agent role, in our own words; each carries every behaviour rule of the seeds.

Each prompt ends with the line ``autarch-role: <role>``, which the scripted model falls back on when
a request carries no role header.
"""

from __future__ import annotations

from . import discussion, loop, plan, preflight, pulsing, research, review, scoping
from .common import compose

__all__ = ["PROMPTS", "system_prompt"]

PROMPTS: dict[str, str] = {
    "discussion": compose("discussion", discussion.PROMPT),
    "scoping": compose("scoping", scoping.PROMPT),
    "research": compose("research", research.PROMPT),
    "plan": compose("plan", plan.PROMPT),
    "preflight": compose("preflight", preflight.PROMPT),
    "pulsing": compose("pulsing", pulsing.PROMPT),
    "review": compose("review", review.PROMPT),
    "loop": compose("loop", loop.PROMPT),
}
"""The full system prompt of each role."""


def system_prompt(role: str) -> str:
    """The system prompt of ``role`` (KeyError for an unknown role)."""
    return PROMPTS[role]
