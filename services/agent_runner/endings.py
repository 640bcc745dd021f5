"""What a turn does with the way a model reply ended (its ``stop_reason``), and with a request too long to send.

- ``max_tokens`` inside a tool call: the call's arguments are incomplete, so it does not run; it is answered
  with an error saying so, and the turn's later requests allow twice the output (up to the model's most),
  or the error says the limit cannot be raised and the work must come in smaller calls.
- ``pause_turn``: the reply is sent back as the conversation's last assistant message, and the model
  carries on from it in the next reply of the same turn.
- ``refusal``: the turn ends (outcome ``refusal``) with the model's words and the API's explanation; the
  refused reply stays recorded but is left out of later requests, as the API asks (a conversation that
  keeps it is refused again).
- A request the API finds longer than the context window (400 ``prompt is too long``) is compacted at once
  and sent again, once; a second refusal, or nothing left to compact, ends the turn with outcome
  ``context_overflow``.

Each decision is a function of the turn's recorded replies, so a rebuilt session decides the same.
"""

from __future__ import annotations

import json
from typing import Any

from .agents import AgentConfig
from .domainmodel import Reply, Turn
from .pricing import model_info

__all__ = ["cut_error", "output_budget", "refusal_detail", "was_cut"]

_QUOTE_CHARS = 2_000


def was_cut(reply: Reply) -> bool:
    """Whether ``max_tokens`` stopped ``reply`` while it was writing a tool call (its last block)."""
    return reply.stop_reason == "max_tokens" and bool(reply.content) and reply.content[-1].get("type") == "tool_use"


def output_budget(turn: Turn, agent: AgentConfig) -> int:
    """``max_tokens`` for the turn's next request: doubled for each reply cut inside a tool call so far."""
    cuts = sum(1 for reply in turn.replies if was_cut(reply))
    most = max(agent.max_tokens, model_info(agent.model).max_output)
    return min(agent.max_tokens * 2**cuts, most)


def cut_error(name: str, *, limit: int, next_limit: int) -> str:
    """The result of a ``name`` call whose arguments ``max_tokens`` (``limit``) cut short."""
    text = (f"Your reply reached its max_tokens limit ({limit} tokens) while writing the arguments of this {name} "
            "call, so they are incomplete and the call did not run. ")
    if next_limit > limit:
        text += f"Your next reply may be up to {next_limit} tokens long: make the call again."
    else:
        text += (f"{limit} tokens is the most this model may write in one reply, so the limit cannot be raised: "
                 "do the work in smaller calls (several edits rather than one large write, a file in parts).")
    return json.dumps({"error": text})


def refusal_detail(content: list[dict[str, Any]], stop_details: dict[str, Any] | None) -> str:
    """What a refused reply says: the API's category and explanation (when given) and the model's own words."""
    why = 'the model refused to go on (stop_reason "refusal"'
    details = stop_details or {}
    if details.get("category"):
        why += f", category {details['category']}"
    if details.get("explanation"):
        why += f': "{details["explanation"]}"'
    why += ")"
    words = "".join(b.get("text", "") for b in content if b.get("type") == "text").strip()
    if not words:
        return f"{why}; it wrote nothing before it stopped"
    if len(words) > _QUOTE_CHARS:
        words = words[:_QUOTE_CHARS] + " […]"
    return f'{why}; its words: "{words}"'
