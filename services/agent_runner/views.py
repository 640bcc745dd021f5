"""Read models: a session as clients see it (``get_session``, ``list_sessions``)."""

from __future__ import annotations

from typing import Literal

import msgspec

from autarch.contracts.agents import (
    ReplyView,
    SessionSummary,
    SessionView,
    ThoughtView,
    ToolCallView,
    TurnUsage,
    TurnView,
)

from .domainmodel import Session, Turn

__all__ = ["status_of", "summary_of", "view_of"]


def status_of(session: Session) -> Literal["idle", "running", "closed"]:
    if session.closed:
        return "closed"
    return "running" if session.current_turn is not None else "idle"


def _copy(usage: TurnUsage) -> TurnUsage:
    return TurnUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                     cache_read_input_tokens=usage.cache_read_input_tokens,
                     cache_creation_input_tokens=usage.cache_creation_input_tokens)


def _turn_view(turn: Turn, *, replies: bool) -> TurnView:
    messages, thoughts = [], []
    for step, reply in enumerate(turn.replies):
        for block in reply.content:
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                messages.append(block["text"])
            elif kind == "thinking" and block.get("thinking"):
                thoughts.append(ThoughtView(step=step, text=block["thinking"]))
    calls = [
        ToolCallView(tool_use_id=c.tool_use_id, name=c.name, input=c.input if isinstance(c.input, dict) else {},
                     step=c.step, output=c.output, is_error=c.is_error, duration_ms=c.duration_ms, replayed=c.replayed)
        for c in turn.calls.values()
    ]
    # A copy: the reply must not share state with the session.
    outcome = msgspec.structs.replace(turn.outcome) if turn.outcome is not None else None
    return TurnView(
        turn_id=turn.turn_id, index=turn.index, user_text=turn.text, started_at=turn.started_at, messages=messages,
        tool_calls=calls, thoughts=thoughts, usage=_copy(turn.usage), cost_usd=round(turn.cost_usd, 8),
        model_calls=len(turn.replies), completed_at=turn.completed_at, outcome=outcome,
        violations=list(turn.violations),
        # Copies of the recorded blocks, whole: a recording replays them to the model client byte for byte.
        replies=[ReplyView(content=[dict(b) for b in r.content], stop_reason=r.stop_reason, usage=_copy(r.usage))
                 for r in turn.replies]
        if replies else None,
    )


def view_of(session: Session, *, replies: bool = False) -> SessionView:
    """The client-facing state of ``session``: every turn with its messages, tool calls, thoughts and costs
    (and with ``replies``, every model reply's content blocks)."""
    return SessionView(
        session_id=str(session.id), role=session.role, root=session.root, model=session.model,
        status=status_of(session),
        turns=[_turn_view(t, replies=replies) for t in session.turns], usage=_copy(session.usage),
        cost_usd=round(session.cost_usd, 8), notes=[*session.stage_notes, *session.session_notes()],
        created_at=session.created_on, run_id=session.run_id, channel_id=session.channel_id,
        compacted_through=session.compacted_through, script=session.script,
    )


def summary_of(session: Session) -> SessionSummary:
    return SessionSummary(session_id=str(session.id), role=session.role, status=status_of(session),
                          turns=len(session.turns), run_id=session.run_id,
                          cost_usd=round(session.cost_usd, 8))
