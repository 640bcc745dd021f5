"""The Mailbox aggregate: an epic's coordination mail (seed 002 ``send_message``/``reply_message``).

Read this file and you know every event a mailbox records: ``Opened``, ``MessagePosted`` and
``MessagesDelivered``. Commands check their rules and raise ``MailError`` before anything is recorded; the
``@event`` methods only apply state, so a replay rebuilds the messages and who was given each exactly.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate, event

from autarch.contracts.mail import MailErrorCode, epic_topic
from autarch.runtime.aggregates import recorded_as

from ..refusal import Refusal

__all__ = ["MailError", "Mailbox", "Message", "mailbox_id_for"]

_MAILBOXES = uuid.UUID("6f1d2c4e-8a3b-4c5d-9e7f-1a2b3c4d5e6f")


def _now() -> str:
    return datetime.now(UTC).isoformat()


def mailbox_id_for(epic_id: str) -> UUID:
    """The mailbox of one epic: deterministic, so an epic's mail is found without an index."""
    return uuid.uuid5(_MAILBOXES, str(uuid.UUID(epic_id)))


class MailError(Refusal):
    """A mailbox command refused in its current state (nothing is recorded)."""


class Message(msgspec.Struct, kw_only=True):
    message_id: str
    thread_id: str
    topic: str
    sender: str
    to: list[str]
    subject: str
    body_md: str
    reply_to: str | None = None
    created_at: str
    delivered_to: list[str] = []


class Mailbox(Aggregate):
    """Every message of one epic, in the order posted, and which recipients have been given each."""

    if TYPE_CHECKING:
        # The event classes the @event decorators below create when the class is built (mypy cannot see them).
        MessagePosted: ClassVar[type[Any]]

    @staticmethod
    def create_id(epic_id: str, **_: object) -> UUID:
        return mailbox_id_for(epic_id)

    @event("Opened")
    def __init__(self, *, epic_id: str) -> None:
        self.epic_id = str(uuid.UUID(epic_id))
        self.messages: dict[str, Message] = {}
        self.keys: dict[str, str] = {}
        """Idempotency key → the message it posted (a repeated send answers that message)."""

    # --- commands ----------------------------------------------------------------------------------------

    def post(self, *, sender: str, to: list[str], subject: str, body_md: str, topic: str | None = None,
             thread_id: str | None = None, reply_to: str | None = None, key: str | None = None,
             at: str | None = None) -> Message:
        """Record a message (or, for a key seen before, answer the message it recorded)."""
        if key is not None and key in self.keys:
            return self.messages[self.keys[key]]
        if reply_to is not None and reply_to not in self.messages:
            raise MailError(MailErrorCode.NO_MESSAGE, f"no message {reply_to} in epic {self.epic_id}",
                            message_id=reply_to)
        recipients = list(dict.fromkeys(to))  # each once, in the order given
        message_id = f"m{len(self.messages) + 1}"
        self._posted(epic_id=self.epic_id, message_id=message_id, thread_id=thread_id or self.epic_id,
                     topic=topic or epic_topic(self.epic_id), sender=sender, to=recipients, subject=subject,
                     body_md=body_md, reply_to=reply_to, key=key, at=at or _now())
        return self.messages[message_id]

    def reply(self, *, message_id: str, sender: str, body_md: str, key: str | None = None) -> Message:
        """Answer ``message_id`` in its thread and topic, to its sender (or, from its sender, to its recipients)."""
        original = self.message(message_id)
        to = [original.sender] if sender != original.sender else list(original.to)
        subject = original.subject if original.subject.startswith("Re: ") else f"Re: {original.subject}"
        return self.post(sender=sender, to=to, subject=subject, body_md=body_md, topic=original.topic,
                         thread_id=original.thread_id, reply_to=message_id, key=key)

    def deliver(self, *, agent: str, message_ids: list[str], session_id: str | None = None) -> list[str]:
        """Mark messages addressed to ``agent`` as given to it; the ids newly marked."""
        fresh = [m for m in dict.fromkeys(message_ids)
                 if m in self.messages and agent in self.messages[m].to and agent not in self.messages[m].delivered_to]
        if fresh:
            self._delivered(agent=agent, message_ids=fresh, session_id=session_id, at=_now())
        return fresh

    # --- events ------------------------------------------------------------------------------------------

    @event("MessagePosted")
    def _posted(self, *, epic_id: str, message_id: str, thread_id: str, topic: str, sender: str, to: list[str],
                subject: str, body_md: str, reply_to: str | None, key: str | None, at: str) -> None:
        self.messages[message_id] = Message(message_id=message_id, thread_id=thread_id, topic=topic, sender=sender,
                                            to=list(to), subject=subject, body_md=body_md, reply_to=reply_to,
                                            created_at=at)
        if key is not None:
            self.keys[key] = message_id

    @event("MessagesDelivered")
    def _delivered(self, *, agent: str, message_ids: list[str], session_id: str | None, at: str) -> None:
        for message_id in message_ids:
            # Replaced, not changed in place: a kept mailbox shares its messages with the copies commands change.
            message = self.messages[message_id]
            self.messages[message_id] = msgspec.structs.replace(message, delivered_to=[*message.delivered_to, agent])

    def copy_for_change(self) -> Mailbox:
        """A copy a command may change while this one stays as it is (``latest.py``): its dicts, not the messages,
        which the events replace rather than change. A pickled copy of every message, per post, grew with the epic
        (the swarm driver posts a report per bead)."""
        twin = object.__new__(type(self))
        twin.__dict__.update({name: value.copy() if type(value) in (list, dict) else value
                              for name, value in self.__dict__.items()})
        return twin

    # --- queries -----------------------------------------------------------------------------------------

    def message(self, message_id: str) -> Message:
        found = self.messages.get(message_id)
        if found is None:
            raise MailError(MailErrorCode.NO_MESSAGE, f"no message {message_id} in epic {self.epic_id}",
                            message_id=message_id)
        return found

    def inbox(self, agent: str, topic: str | None = None) -> list[Message]:
        return [m for m in self.messages.values() if agent in m.to and (topic is None or m.topic == topic)]

    def on_topic(self, topic: str) -> list[Message]:
        return [m for m in self.messages.values() if m.topic == topic]

    def pending(self, agent: str) -> list[Message]:
        return [m for m in self.messages.values() if agent in m.to and agent not in m.delivered_to]


# Until this module moved here, its events were stored as events of ``mail_model`` (their topics say so).
recorded_as(__name__, "autarch.services.orchestrator.mail_model")

