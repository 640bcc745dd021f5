"""Live deltas: a turn's text and thinking tokens over core NATS, as they stream, never persisted.

Subject ``autarch.deltas.<run or _>.<session>`` (the run: a workflow or a loop session); payload a
:class:`~autarch.contracts.agents.TurnDelta` as JSON. The ``turn:completed``
event carries the full text, so a client that missed deltas loses nothing. A delta with
``restart`` (the model call's stream broke and was retried from its start) tells a listener to drop
what it holds of that kind for the current reply before appending this delta's text.
"""

from __future__ import annotations

import logging
from typing import Literal

import msgspec
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.agents import TurnDelta

__all__ = ["DeltaPublisher"]

log = logging.getLogger(__name__)


_encode = msgspec.json.Encoder().encode


class DeltaPublisher:
    """Publishes one turn's deltas (fire and forget: a slow or absent listener never slows the turn)."""

    def __init__(self, *, nc: Client, run_id: str | None, session_id: str, turn_id: str) -> None:
        self._nc = nc
        self._subject = subjects.deltas(run_id or subjects.NO_WORKFLOW, session_id)
        self._session_id = session_id
        self._turn_id = turn_id
        self._run_id = run_id

    async def publish(self, is_thinking: bool, text: str, restart: bool = False, *, step: int = 0) -> None:
        """Publish a ``turn:thought_delta`` (``is_thinking``) or a ``turn:message_delta`` of reply ``step``.

        An empty delta is skipped unless it carries ``restart`` (then it clears what listeners hold).
        """
        if not text and not restart:
            return
        kind: Literal["turn:thought_delta", "turn:message_delta"] = ("turn:thought_delta" if is_thinking
                                                                     else "turn:message_delta")
        payload = _encode(TurnDelta(type=kind, session_id=self._session_id, turn_id=self._turn_id, text=text,
                                     run_id=self._run_id, step=step, restart=restart))
        try:
            # Only appends to nats.py's pending buffer (its flusher sends it): never waits on a listener.
            await self._nc.publish(self._subject, payload)
        except Exception:  # a closed or reconnecting connection must not break the turn
            log.debug("delta not published", exc_info=True)
