"""Epics' coordination mail: one mailbox per epic, its verbs, and the notice to each recipient after a post.

The verbs keep seed 002's names (``send_mail`` is the tools service's ``send_message`` …). Every change goes
through :meth:`MailBook.change` (the generic ``Book``): read the mailbox, run the command, save what it recorded,
conditionally on the version read (another orchestrator instance may post to the same epic: the loser reads
again). After a post, a :class:`MailNotice` goes out on core NATS to each recipient (``subjects.mail``), so the
agent runner holding that worker's session pushes the message into its next model call; a notice nobody hears
loses nothing, the message waits in the mailbox until ``pending_mail`` is asked.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from autarch.contracts import subjects
from autarch.contracts.base import encode
from autarch.contracts.mail import (
    FETCH_INBOX_VERB,
    FETCH_TOPIC_VERB,
    GET_MAIL_VERB,
    LIST_MAIL_VERB,
    MARK_DELIVERED_VERB,
    PENDING_MAIL_VERB,
    REPLY_MAIL_VERB,
    SEND_MAIL_VERB,
    FetchInbox,
    FetchTopic,
    GetMail,
    ListMail,
    MailDelivered,
    MailList,
    MailMessage,
    MailNotice,
    MarkDelivered,
    PendingMail,
    ReplyMail,
    SendMail,
)
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.micro import TypedService

from ..application import WorkflowApplication
from ..book import Book
from ..writer import BatchedWriter
from .model import Mailbox, Message, mailbox_id_for
from .views import message_view

__all__ = ["MailBook", "register_mail"]

log = logging.getLogger("orchestrator.mail")

R = TypeVar("R")


def _epic(epic_id: str) -> str:
    try:
        return str(uuid.UUID(epic_id))
    except ValueError:
        raise ServiceFailure.bad_request(f"{epic_id!r} is not an epic id (the workflow id)",
                                         epic_id=epic_id) from None


@dataclass
class MailBook:
    """Handles each epic's mail one command at a time; tells recipients of new mail over core NATS."""

    app: WorkflowApplication
    writer: BatchedWriter
    nc: Any = None
    """The NATS client the notices go out on (None: no notices, as in unit tests)."""
    book: Book[Mailbox] = field(init=False)

    def __post_init__(self) -> None:
        # An epic's mailbox is opened by the first command that records something in it. Its latest state is kept
        # between commands (``latest.py``): the swarm driver posts a report per bead, and rebuilding the mailbox of
        # an epic of hundreds of beads for each (its snapshot and the events after it) grew with the epic.
        self.book = Book(app=self.app, writer=self.writer, kind=Mailbox, noun="mailbox of epic", id_field="epic_id",
                         aggregate_id=mailbox_id_for, canonical=_epic, absent=lambda e: Mailbox(epic_id=e),
                         keep=1024, inline_reads=self.writer.inline, log=log)

    async def find(self, epic_id: str) -> Mailbox | None:
        return await self.book.find(epic_id)

    async def change(self, epic_id: str, command: Callable[[Mailbox], R]) -> tuple[Mailbox, R]:
        """Run ``command`` on the epic's mailbox (opened on first use) and save what it recorded."""
        return await self.book.change(epic_id, command)

    async def post(self, epic: str, sender: str, to: list[str], subject: str, body: str, topic: str | None = None,
                   thread: str | None = None, *, key: str | None = None) -> MailMessage:
        """Post a message (the swarm driver's system mail: acknowledgments, reports, the coordinator's answers).

        ``topic`` defaults to ``epic-<epic>``, ``thread`` to the epic id. ``key`` makes a repeat (a driver
        step run again after a restart) answer the message recorded the first time, without a second post.
        """
        return await self._post(epic, lambda mb: mb.post(sender=sender, to=list(to), subject=subject, body_md=body,
                                                          topic=topic, thread_id=thread, key=key))

    async def _post(self, epic_id: str, command: Callable[[Mailbox], Message]) -> MailMessage:
        mailbox, message = await self.change(epic_id, command)
        view = message_view(message, mailbox.epic_id)
        await self._notify(view)
        return view

    async def _notify(self, message: MailMessage) -> None:
        if self.nc is None:
            return
        for recipient in message.to:
            notice = MailNotice(epic_id=message.epic_id, message_id=message.message_id, recipient=recipient,
                                sender=message.sender, subject=message.subject)
            try:
                await self.nc.publish(subjects.mail(message.epic_id, recipient), encode(notice))
            except Exception as exc:  # the message is stored: a lost notice only delays it to pending_mail
                log.warning("mail notice to %s in %s not sent: %s", recipient, message.epic_id, exc)

    async def read(self, epic_id: str) -> list[Message]:
        mailbox = await self.find(epic_id)
        return [] if mailbox is None else list(mailbox.messages.values())

    def _list(self, epic_id: str, messages: list[Message]) -> MailList:
        return MailList(epic_id=_epic(epic_id), messages=[message_view(m, _epic(epic_id)) for m in messages])

    # --- verbs -------------------------------------------------------------------------------------------

    async def send_mail(self, cmd: SendMail) -> MailMessage:
        return await self._post(cmd.project_key, lambda mb: mb.post(
            sender=cmd.sender_name, to=list(cmd.to), subject=cmd.subject, body_md=cmd.body_md, topic=cmd.topic,
            thread_id=cmd.thread_id, key=cmd.idempotency_key))

    async def reply_mail(self, cmd: ReplyMail) -> MailMessage:
        return await self._post(cmd.project_key, lambda mb: mb.reply(
            message_id=cmd.message_id, sender=cmd.sender_name, body_md=cmd.body_md, key=cmd.idempotency_key))

    async def fetch_inbox(self, query: FetchInbox) -> MailList:
        if query.session_id is None:
            mailbox = await self.find(query.project_key)
            return self._list(query.project_key, [] if mailbox is None else mailbox.inbox(query.agent_name,
                                                                                           query.topic))

        def fetch(mb: Mailbox) -> list[Message]:
            found = mb.inbox(query.agent_name, query.topic)
            # What the agent has read is delivered: the runner does not push it into its next call as well.
            mb.deliver(agent=query.agent_name, message_ids=[m.message_id for m in found], session_id=query.session_id)
            return found

        if await self.find(query.project_key) is None:
            return self._list(query.project_key, [])
        _, found = await self.change(query.project_key, fetch)
        return self._list(query.project_key, found)

    async def fetch_topic(self, query: FetchTopic) -> MailList:
        mailbox = await self.find(query.project_key)
        return self._list(query.project_key, [] if mailbox is None else mailbox.on_topic(query.topic_name))

    async def list_mail(self, query: ListMail) -> MailList:
        messages = [m for m in await self.read(query.epic_id)
                    if (query.topic is None or m.topic == query.topic)
                    and (query.agent is None or query.agent == m.sender or query.agent in m.to)]
        return self._list(query.epic_id, messages)

    async def get_mail(self, query: GetMail) -> MailMessage:
        mailbox = await self.find(query.epic_id)
        if mailbox is None or query.message_id not in mailbox.messages:
            raise ServiceFailure.not_found(f"no message {query.message_id} in epic {query.epic_id}",
                                           epic_id=query.epic_id, message_id=query.message_id)
        return message_view(mailbox.messages[query.message_id], mailbox.epic_id)

    async def pending_mail(self, query: PendingMail) -> MailList:
        mailbox = await self.find(query.epic_id)
        return self._list(query.epic_id, [] if mailbox is None else mailbox.pending(query.agent_name))

    async def mark_delivered(self, cmd: MarkDelivered) -> MailDelivered:
        if await self.find(cmd.epic_id) is None:
            return MailDelivered(marked=[])
        _, marked = await self.change(cmd.epic_id, lambda mb: mb.deliver(
            agent=cmd.agent_name, message_ids=list(cmd.message_ids), session_id=cmd.session_id))
        return MailDelivered(marked=marked)


def register_mail(service: TypedService, book: MailBook) -> None:
    """Add the mail verbs to the orchestrator's service."""
    service.endpoint(SEND_MAIL_VERB, SendMail, book.send_mail)
    service.endpoint(REPLY_MAIL_VERB, ReplyMail, book.reply_mail)
    service.endpoint(FETCH_INBOX_VERB, FetchInbox, book.fetch_inbox)
    service.endpoint(FETCH_TOPIC_VERB, FetchTopic, book.fetch_topic)
    service.endpoint(LIST_MAIL_VERB, ListMail, book.list_mail)
    service.endpoint(GET_MAIL_VERB, GetMail, book.get_mail)
    service.endpoint(PENDING_MAIL_VERB, PendingMail, book.pending_mail)
    service.endpoint(MARK_DELIVERED_VERB, MarkDelivered, book.mark_delivered)
