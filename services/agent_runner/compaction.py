"""Context compaction without a model call: older turns become a digest built from their own events.

Deterministic on purpose, so a replayed session builds byte-for-byte the same requests. The digest
keeps the original request, each compacted turn's user text, the assistant's text, and every tool
call as its name and ``reason`` (seed 004: the reason "may be the only surviving record of the
action after a yield"). Notes and the current turn are never compacted.
"""

from __future__ import annotations

from .domainmodel import Session, Turn

__all__ = ["build_digest", "compaction_point"]

_KICKOFF_CHARS = 8_000
_USER_CHARS = 1_500
_TEXT_CHARS = 2_000
_REASON_CHARS = 200


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " […]"


def compaction_point(session: Session, *, current: Turn, threshold_tokens: int) -> int | None:
    """The index of the last turn to compact now, or None when the context is still small enough.

    Compaction happens when the most recent request carried more than ``threshold_tokens`` and at
    least one completed turn before ``current`` is still sent in full.
    """
    if session.last_context_tokens() <= threshold_tokens:
        return None
    through = current.index - 1
    return through if through > session.compacted_through else None


def _outcome_line(turn: Turn) -> str:
    outcome = turn.outcome or {}
    kind = outcome.get("kind", "running")
    if kind == "block":
        return f"ended with {outcome.get('tool')}"
    return f"ended: {kind}" + (f" ({outcome['detail']})" if outcome.get("detail") else "")


def _turn_digest(turn: Turn) -> list[str]:
    lines = [f"Turn {turn.index + 1}. User: {_cut(turn.text, _USER_CHARS)}"]
    texts = [b.get("text", "") for r in turn.replies for b in r.content if b.get("type") == "text"]
    said = _cut(" ".join(t.strip() for t in texts if t.strip()), _TEXT_CHARS)
    if said:
        lines.append(f"  Assistant said: {said}")
    for reply in turn.replies:
        for call in reply.tool_calls:
            reason = call.input.get("reason") if isinstance(call.input, dict) else None
            status = " [error]" if call.is_error else ""
            lines.append(f"  - {call.name}: {_cut(str(reason or '(no reason given)'), _REASON_CHARS)}{status}")
    lines.append(f"  {_outcome_line(turn)}")
    return lines


def build_digest(session: Session, *, through: int) -> str:
    """The text that stands for turns ``0..through`` in model requests."""
    turns = session.turns[: through + 1]
    lines = [
        f"[Conversation digest: turns 1-{through + 1} were compacted to fit the context window. Your notes "
        "and the current turn are complete; what follows is a summary of the earlier turns.]",
    ]
    if turns:
        lines.append(f"Original request: {_cut(turns[0].text, _KICKOFF_CHARS)}")
        # The kickoff text is quoted in full above; keep only what the agent did about it.
        lines.extend(["Turn 1 (the original request):", *_turn_digest(turns[0])[1:]])
        for turn in turns[1:]:
            lines.extend(_turn_digest(turn))
    return "\n".join(lines)
