"""Coordination mail pushed into a swarm worker's next model call, without the worker polling.

While a worker's session (one with a ``lease_holder`` and a ``run_id``, its workflow) is open in this runner, the
runner listens on ``subjects.mail(epic, holder)``. A notice there only marks the holder's mail as waiting;
before the session's next model call, :meth:`MailPush.deliver` asks the orchestrator for the messages not
yet delivered (``pending_mail``), records them in the session (``Session.receive_mail``: a user-turn text
block, so a restarted runner rebuilds the same request) and then marks them delivered. The first delivery
after a (re)start asks once whatever was heard, so mail posted while nobody listened is not lost; a message
the session already recorded (the runner died before ``mark_delivered``) is only marked, never given twice.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from autarch.contracts import subjects
from autarch.contracts.mail import (
    MARK_DELIVERED_VERB,
    PENDING_MAIL_VERB,
    MailDelivered,
    MailList,
    MailMessage,
    MarkDelivered,
    PendingMail,
)
from autarch.runtime.requests import request

from .domainmodel import Session, Turn

__all__ = ["MailPush", "mail_block"]

log = logging.getLogger("agent_runner.mail")

Key = tuple[str, str]


def mail_block(messages: list[MailMessage]) -> dict[str, Any]:
    """The user-turn text block that hands ``messages`` to the model."""
    parts = ["<coordination-mail>",
             f"You have {len(messages)} new coordination message{'s' if len(messages) != 1 else ''} "
             "(agent mail from your swarm; answer with send_message or reply_message when it asks for it):"]
    for m in messages:
        answers = f", in reply to {m.reply_to}" if m.reply_to else ""
        parts.append(f"\n--- message {m.message_id} (thread {m.thread_id}, topic {m.topic}{answers})\n"
                     f"From: {m.sender}\nTo: {', '.join(m.to)}\nSubject: {m.subject}\n\n{m.body_md}")
    parts.append("</coordination-mail>")
    return {"type": "text", "text": "\n".join(parts)}


def _key(session: Session) -> Key | None:
    if not session.lease_holder or not session.run_id:
        return None
    try:
        return str(uuid.UUID(session.run_id)), session.lease_holder
    except ValueError:
        return None


@dataclass
class MailPush:
    """The runner's mail listeners (one per worker name) and the delivery before each model call."""

    nc: Any
    save: Callable[[Session], Awaitable[None]]
    timeout: float = 5.0
    orchestrator_partitions: int = 1
    """The orchestrator's partitions (the epic's owns its mailbox)."""
    _subs: dict[Key, Any] = field(default_factory=dict)
    _sessions: dict[Key, set[str]] = field(default_factory=dict)
    _waiting: dict[Key, bool] = field(default_factory=dict)
    """True: the mailbox may hold mail for this worker (a notice came, or nobody asked since the start)."""
    noticed_at: dict[Key, float] = field(default_factory=dict)
    """When the last notice for each worker arrived (``perf_counter``): for measuring the push's delay."""

    async def watch(self, session: Session) -> None:
        """Listen for ``session``'s worker while it is open (idempotent)."""
        key = _key(session)
        if key is None or session.closed:
            return
        self._sessions.setdefault(key, set()).add(str(session.id))
        if key in self._subs:
            return
        self._waiting[key] = True  # ask pending_mail once: mail may have come while nobody listened

        async def heard(_msg: Any) -> None:
            self._waiting[key] = True
            self.noticed_at[key] = time.perf_counter()

        self._subs[key] = await self.nc.subscribe(subjects.mail(*key), cb=heard)

    async def unwatch(self, session: Session) -> None:
        """Stop listening once no open session of the worker is left."""
        key = _key(session)
        if key is None:
            return
        open_ones = self._sessions.get(key, set())
        open_ones.discard(str(session.id))
        if not open_ones and key in self._subs:
            sub = self._subs.pop(key)
            self._waiting.pop(key, None)
            await sub.unsubscribe()

    async def close(self) -> None:
        for sub in self._subs.values():
            await sub.unsubscribe()
        self._subs.clear()

    def _subject(self, verb: str, payload: Any) -> str:
        return subjects.orchestrator_request(verb, payload, self.orchestrator_partitions)

    async def deliver(self, session: Session, turn: Turn) -> None:
        """Before a model call: record the worker's waiting mail in the session, then mark it delivered."""
        key = _key(session)
        if key is None or not self._waiting.get(key):
            return
        self._waiting[key] = False  # a notice arriving from here on is asked about at the next call
        epic, holder = key
        try:
            query = PendingMail(epic_id=epic, agent_name=holder)
            pending = await request(self.nc, self._subject(PENDING_MAIL_VERB, query), query, MailList,
                                    timeout=self.timeout)
        except Exception as exc:  # the orchestrator away for a moment: the mail waits for the next call
            log.warning("pending mail of %s in %s not read: %s", holder, epic, exc)
            self._waiting[key] = True
            return
        if not pending.messages:
            return
        fresh = [m for m in pending.messages if m.message_id not in session.mail_received]
        if fresh:
            session.receive_mail(turn_id=turn.turn_id, step=len(turn.replies),
                                 message_ids=[m.message_id for m in fresh], block=mail_block(fresh))
            await self.save(session)
        try:
            mark = MarkDelivered(epic_id=epic, agent_name=holder, session_id=str(session.id),
                                 message_ids=[m.message_id for m in pending.messages])
            await request(self.nc, self._subject(MARK_DELIVERED_VERB, mark), mark, MailDelivered,
                          timeout=self.timeout)
        except Exception as exc:  # recorded in the session: a later ask finds them again and only marks them
            log.warning("mail of %s in %s recorded but not marked delivered: %s", holder, epic, exc)
            self._waiting[key] = True
