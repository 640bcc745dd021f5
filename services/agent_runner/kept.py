"""What a start-up keeps of a session that has no turn running: its summary and its spend, not its turns.

A start-up used to rebuild every session ever recorded, to list it and to count its spend towards its workflow's
budget: with 60,000 sessions of finished workflows behind it, the runner spent minutes on sessions that nothing
will run again. A session with no turn running needs no live state until a command names it, so its summary is
kept (``runtime/kept_views.py``, kind ``session``) each time it settles, and a start-up reads those instead of
rebuilding; the session itself is read from its events when a command or ``get_session`` names it.
"""

from __future__ import annotations

import msgspec

from autarch.contracts.agents import SessionSummary
from autarch.runtime.kept_views import view_shape

from .domainmodel import Session
from .views import summary_of

__all__ = ["KIND", "SHAPE", "KeptSession", "kept_of", "settled"]

KIND = "session"


class KeptSession(msgspec.Struct, kw_only=True, frozen=True):
    """The kept view of a settled session: what ``list_sessions`` shows of it and what it spent."""

    summary: SessionSummary
    tokens: int
    """Its model replies' tokens (input, output, cache read and write), as ``WorkflowBudget.add`` counts them."""
    cost_usd: float
    """Its model replies' cost, unrounded, as ``WorkflowBudget.add`` counts it."""


def settled(session: Session) -> bool:
    """No turn is running: nothing for a start-up to resume, so its summary can stand for it."""
    return session.current_turn is None


def kept_of(session: Session) -> KeptSession:
    # The session's running totals, added reply by reply in the order the budget adds them: the same figures as a
    # sum over its turns, without a walk over every turn each time it settles.
    u = session.usage
    tokens = u.input_tokens + u.output_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
    return KeptSession(summary=summary_of(session), tokens=tokens, cost_usd=session.cost_usd)


SHAPE = view_shape(summary_of, KeptSession, Session)
"""The code a kept session is made by: one kept by other code is not taken, its session is rebuilt."""
