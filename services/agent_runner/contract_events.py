"""Translation of the Session aggregate's stored events into the wire events of ``contracts.events``."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from eventsourcing.domain import DomainEvent

from autarch.contracts import subjects
from autarch.contracts.beads import VerificationEvidence
from autarch.contracts.events import (
    Event,
    SessionCompleted,
    SessionError,
    SessionStarted,
    TurnCompleted,
    TurnStarted,
    TurnToolCompleted,
    TurnToolStarted,
)

from .domainmodel import Session, run_started

__all__ = ["ContractMapper"]


class ContractMapper:
    """Maps stored session events to wire events; ``run_of`` names each session's run (a workflow or a loop session)."""

    def __init__(self, *, run_of: Callable[[str], str | None]) -> None:
        self._run_of = run_of

    def __call__(self, e: DomainEvent) -> Event | None:
        sid = str(e.originator_id)
        at = e.timestamp
        if isinstance(e, Session.Started):
            return SessionStarted(run_id=run_started(e) or subjects.NO_WORKFLOW, occurred_at=at, session_id=sid,
                                  role=e.role, model=e.model, root=e.root, channel_id=e.channel_id)
        run = self._run_of(sid) or subjects.NO_WORKFLOW
        if isinstance(e, Session.TurnStarted):
            return TurnStarted(run_id=run, occurred_at=at, session_id=sid, turn_id=e.turn_id, index=e.index,
                               text=e.text)
        if isinstance(e, Session.ToolStarted):
            tool_input = e.input if isinstance(e.input, dict) else {}
            return TurnToolStarted(run_id=run, occurred_at=at, session_id=sid, turn_id=e.turn_id,
                                   tool_use_id=e.tool_use_id, tool=e.name, input=tool_input)
        if isinstance(e, Session.ToolCompleted):
            return TurnToolCompleted(run_id=run, occurred_at=at, session_id=sid, turn_id=e.turn_id,
                                     tool_use_id=e.tool_use_id, tool=e.name, output=e.output, is_error=e.is_error,
                                     duration_ms=e.duration_ms)
        if isinstance(e, Session.BlockRejected):
            return TurnToolCompleted(run_id=run, occurred_at=at, session_id=sid, turn_id=e.turn_id,
                                     tool_use_id=e.tool_use_id, tool=e.name, output=e.message, is_error=True,
                                     duration_ms=0.0)
        if isinstance(e, Session.TurnCompleted):
            outcome = e.outcome
            return TurnCompleted(
                run_id=run, occurred_at=at, session_id=sid, turn_id=e.turn_id, text=e.text, thoughts=e.thoughts,
                outcome=outcome["kind"], tool=outcome.get("tool"), arguments=outcome.get("arguments"),
                detail=outcome.get("detail", ""), cost_usd=e.cost_usd, tool_calls=e.tool_calls,
                model_calls=e.model_calls, **e.usage,
                evidence=(msgspec.convert(outcome["evidence"], VerificationEvidence) if outcome.get("evidence")
                          else None),
                tokens_used_pct=outcome.get("tokens_used_pct"),
            )
        if isinstance(e, Session.ErrorRecorded):
            return SessionError(run_id=run, occurred_at=at, session_id=sid, message=e.message, turn_id=e.turn_id)
        if isinstance(e, Session.Closed):
            return SessionCompleted(run_id=run, occurred_at=at, session_id=sid, reason=e.reason)
        return None  # ModelReplied, Compacted: internal to the runner
