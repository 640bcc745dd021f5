"""Context compaction without a model call: older turns become a digest built from their own events.

Deterministic on purpose, so a replayed session builds byte-for-byte the same requests. The digest
keeps the original request, each compacted turn's user text, the assistant's text, and every tool
call as its name and ``reason`` (seed 004: the reason "may be the only surviving record of the
action after a yield"). Notes and the current turn are never compacted into the digest.

The digest has a budget (:data:`DIGEST_SHARE` of the context window, recorded with each ``Compacted``
event so a replay under other settings builds the same text). The original request is always kept;
the most recent compacted turns are kept in full (in up to half of the budget), older ones as one
line each, and the oldest of all,
once even their lines do not fit, as a single count line. Which form a turn gets depends only on the
recorded turns and the recorded budget, so the digest stays a pure function of the session's events.

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
    "DIGEST_SHARE",
    "ELIDE_MIN_CHARS",
    "KEEP_RECENT_STEPS",
    "build_digest",
    "compaction_point",
    "digest_budget",
    "elided_result",
    "elision_point",
    "estimate_tokens",
    "is_elidable",
    "session_digest",
]

_KICKOFF_CHARS = 8_000
_USER_CHARS = 1_500
_TEXT_CHARS = 2_000
_REASON_CHARS = 200
_LINE_USER_CHARS = 160
_LINE_TEXT_CHARS = 160
_COUNT_CHARS = 400

DIGEST_SHARE = 0.25
"""Share of the context window the digest may take: the rest is for the notes, the current turn and the reply."""
CHARS_PER_TOKEN = 4
"""The same rough estimate the loop driver uses for its context (``(len + 3) // 4``)."""

KEEP_RECENT_STEPS = 3
"""Replies of the running turn whose tool results are always sent whole: the agent is working with them."""
ELIDE_MIN_CHARS = 1_000
"""Shorter results are sent whole: a stub would save next to nothing."""


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " […]"


def _flat(text: str, limit: int) -> str:
    return _cut(" ".join(text.split()), limit)


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` is taken to cost, four characters a token (no tokenizer call: replay stays exact)."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def digest_budget(window_tokens: int) -> int:
    """The digest's budget in tokens for a model with a context window of ``window_tokens``."""
    return int(window_tokens * DIGEST_SHARE)


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


def _said(turn: Turn) -> str:
    texts = [b.get("text", "") for r in turn.replies for b in r.content if b.get("type") == "text"]
    return " ".join(t.strip() for t in texts if t.strip())


def _calls(turn: Turn) -> list[ToolCall]:
    return [call for reply in turn.replies for call in reply.tool_calls]


def _tally(names: list[str]) -> str:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(name if n == 1 else f"{name} ({n})" for name, n in counts.items())


def _turn_line(turn: Turn, *, first: bool) -> str:
    """The one-line form of a turn: the start of what was asked and said, the tools by name, how it ended."""
    parts = [f"Turn {turn.index + 1} (the original request)" if first else
             f"Turn {turn.index + 1}. User: {_flat(turn.text, _LINE_USER_CHARS)}"]
    said = _flat(_said(turn), _LINE_TEXT_CHARS)
    if said:
        parts.append(f"said: {said}")
    calls = _calls(turn)
    if calls:
        errors = sum(1 for call in calls if call.is_error)
        parts.append(f"tools: {_flat(_tally([c.name for c in calls]), _REASON_CHARS)}"
                     + (f" ({errors} failed)" if errors else ""))
    parts.append(_outcome_line(turn))
    return " | ".join(parts)


def _count_line(turns: list[Turn]) -> str:
    """The oldest turns, once not even their lines fit: how many, how they ended, which tools they used."""
    span = f"turn {turns[0].index + 1}" if len(turns) == 1 else f"turns {turns[0].index + 1}-{turns[-1].index + 1}"
    ended = _tally([_outcome_line(turn).removeprefix("ended: ").removeprefix("ended ") for turn in turns])
    tools = _tally([call.name for turn in turns for call in _calls(turn)])
    line = f"{len(turns)} earlier turns ({span}), too many to list: ended {ended}"
    return _flat(line + (f"; tools used: {tools}" if tools else ""), _COUNT_CHARS)


def _turn_block(turn: Turn, *, first: bool) -> str:
    lines = _turn_digest(turn)
    # The kickoff text is quoted in full as the original request; keep only what the agent did about it.
    return "\n".join(["Turn 1 (the original request):", *lines[1:]] if first else lines)


def build_digest(session: Session, *, through: int, budget_tokens: int | None = None) -> str:
    """The text that stands for turns ``0..through`` in model requests.

    With ``budget_tokens`` (what the ``Compacted`` event recorded) the text is kept within it, as
    estimated by :func:`estimate_tokens`; without (events recorded before the digest had a budget),
    every turn is listed in full, as those sessions' requests were built.
    """
    turns = session.turns[: through + 1]
    header = (f"[Conversation digest: turns 1-{through + 1} were compacted to fit the context window. Your notes "
              "and the current turn are complete; what follows is a summary of the earlier turns.]")
    if not turns:
        return header
    if budget_tokens is None:
        blocks = [_turn_block(turn, first=turn.index == 0) for turn in turns]
        return "\n".join([header, f"Original request: {_cut(turns[0].text, _KICKOFF_CHARS)}", *blocks])
    limit = budget_tokens * CHARS_PER_TOKEN
    # The original request always stays, but never takes more than a quarter of the budget.
    head = "\n".join([header, f"Original request: {_cut(turns[0].text, min(_KICKOFF_CHARS, limit // 4))}"])
    used = len(head) + 1 + _COUNT_CHARS + 1  # room for the count line, whether or not it is needed
    # The turns kept in full take at most half of what is left, so one-line forms reach further back.
    full_limit = used + (limit - used) // 2
    kept: list[str] = []
    full = True
    for turn in reversed(turns):
        first = turn.index == 0
        if full:
            block = _turn_block(turn, first=first)
            if used + len(block) + 1 <= full_limit:
                kept.append(block)
                used += len(block) + 1
                continue
            full = False  # from here back, every turn is shorter than the ones after it
        line = _turn_line(turn, first=first)
        if used + len(line) + 1 > limit:
            break
        kept.append(line)
        used += len(line) + 1
    rest = turns[: len(turns) - len(kept)]
    return "\n".join([head, *([_count_line(rest)] if rest else []), *reversed(kept)])


def session_digest(session: Session) -> str:
    """:func:`build_digest` of the turns ``session`` has compacted, within its recorded budget: made once per
    compaction and kept in ``session.digest_memo``, not made again for every request.

    Making it walks every compacted turn (the count line tallies all those too old to list), so a 2,000-turn
    discussion spent 2.4 ms of each request on a text that changes only when the session compacts again (some 40
    turns later in the growth benchmark). The memo's key is what the text is made from besides the turns (how far
    they are compacted, the budget); the compacted turns themselves do not change once compacted, and the session
    clears the memo if an event changes one all the same (``Session._turn``).
    """
    key = (session.compacted_through, session.digest_tokens)
    memo = session.digest_memo
    if memo.key != key:
        memo.value = build_digest(session, through=session.compacted_through, budget_tokens=session.digest_tokens)
        memo.key = key
    text: str = memo.value
    return text
