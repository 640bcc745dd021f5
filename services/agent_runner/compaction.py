"""Context compaction without a model call: older turns become a digest built from their own events.

Deterministic on purpose, so a replayed session builds byte-for-byte the same requests. The digest
keeps the original request, each compacted turn's user text, the assistant's text, and every tool
call as its name and ``reason`` (seed 004: the reason "may be the only surviving record of the
action after a yield"). Notes and the current turn are never compacted into the digest.

One turn alone can outgrow the window (a pulse of up to ``agent_max_steps`` model calls reading
files). When there is no older turn left to compact, the current turn's long tool results, except
those of its last :data:`KEEP_RECENT_STEPS` replies, are sent as a stub saying the output was elided
and how to get it again (:func:`elided_result`). The tool calls themselves, the assistant's text and
thinking, and the turn's opening message (the task and the notes) stay whole. Which results are
elided is recorded (``ResultsElided``), not recomputed, so a replay under other settings sends the
same requests.
"""

from __future__ import annotations

import json

from .domainmodel import Session, ToolCall, Turn

__all__ = [
    "ELIDE_MIN_CHARS",
    "KEEP_RECENT_STEPS",
    "build_digest",
    "compaction_point",
    "elided_result",
    "elision_point",
    "is_elidable",
]

_KICKOFF_CHARS = 8_000
_USER_CHARS = 1_500
_TEXT_CHARS = 2_000
_REASON_CHARS = 200

KEEP_RECENT_STEPS = 3
"""Replies of the running turn whose tool results are always sent whole: the agent is working with them."""
ELIDE_MIN_CHARS = 1_000
"""Shorter results are sent whole: a stub would save next to nothing."""


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


def is_elidable(call: ToolCall) -> bool:
    """Whether ``call``'s result is long enough to be replaced by a stub once its reply is elided."""
    return call.output is not None and len(call.output) >= ELIDE_MIN_CHARS


def elision_point(session: Session, *, current: Turn, threshold_tokens: int) -> int | None:
    """The reply of ``current`` through which to elide tool results now, or None.

    Called when :func:`compaction_point` found no older turn to compact: elides when the most recent
    request carried more than ``threshold_tokens`` and a reply before the last :data:`KEEP_RECENT_STEPS`
    has a long result that is still sent whole. Everything up to there goes at once, so the requests'
    cached prefix changes once rather than at every step.
    """
    if session.last_context_tokens() <= threshold_tokens:
        return None
    through = len(current.replies) - 1 - KEEP_RECENT_STEPS
    start = current.elided_through + 1
    if through < start:
        return None
    candidates = (call for reply in current.replies[start : through + 1] for call in reply.tool_calls)
    return through if any(is_elidable(call) for call in candidates) else None


def elided_result(call: ToolCall) -> str:
    """The stub sent in place of an elided tool result (the model still sees its call and arguments)."""
    again = (
        "run the command again (mind its side effects)" if call.name == "shell"
        else f"call {call.name} again with the same arguments (a narrower range or pattern if you can)"
    )
    kind = "error" if call.is_error else "output"
    return json.dumps({"elided": (
        f"The {kind} of this {call.name} call ({len(call.output or '')} characters) was removed from the "
        f"conversation to keep it within the context window. If you still need it, {again}."
    )})


def _outcome_line(turn: Turn) -> str:
    outcome = turn.outcome
    if outcome is None:
        return "ended: running"
    if outcome.kind == "block":
        return f"ended with {outcome.tool}"
    return f"ended: {outcome.kind}" + (f" ({outcome.detail})" if outcome.detail else "")


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
