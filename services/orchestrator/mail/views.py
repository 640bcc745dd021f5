"""Wire views of an epic's mail (``MailMessage``) and the ``mail:posted`` event a post becomes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from autarch.contracts.events import Event, MailPosted
from autarch.contracts.mail import MailMessage

from .model import Mailbox, Message

__all__ = ["mail_to_contract", "message_view"]


def message_view(m: Message, epic_id: str) -> MailMessage:
    return MailMessage(message_id=m.message_id, epic_id=epic_id, thread_id=m.thread_id, topic=m.topic,
                       sender=m.sender, to=list(m.to), subject=m.subject, body_md=m.body_md, reply_to=m.reply_to,
                       created_at=datetime.fromisoformat(m.created_at), delivered_to=list(m.delivered_to))


def mail_to_contract(e: Any) -> Event | None:
    """The wire event of a Mailbox event: ``mail:posted`` for a post; deliveries are not distributed."""
    if not isinstance(e, Mailbox.MessagePosted):
        return None
    message = MailMessage(message_id=e.message_id, epic_id=e.epic_id, thread_id=e.thread_id, topic=e.topic,
                          sender=e.sender, to=list(e.to), subject=e.subject, body_md=e.body_md, reply_to=e.reply_to,
                          created_at=datetime.fromisoformat(e.at))
    return MailPosted(workflow_id=e.epic_id, occurred_at=e.timestamp, message=message)
