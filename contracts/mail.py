"""Coordination mail between a swarm's workers and its coordinator (seed 002 ``send_message`` … ``fetch_topic``).

Every epic (epic id = workflow id) has one mailbox; a message belongs to a thread (normally the epic id) and
carries a topic (recommended ``epic-<EPIC_ID>``). The requests keep the seed's parameter names. The seed's
``project_key`` names the epic: the tools service fills it from the calling session's workflow, and a
``project_key`` that names another epic is refused. Messages are stored as events in the orchestrator;
after each one a :class:`MailNotice` goes out on core NATS (``subjects.mail(epic, recipient)``) so the agent
runner holding a recipient's session pushes it into that worker's next model call.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from .base import Command, Query, Reply
from .http import TEXT, TITLE

__all__ = [
    "COORDINATOR",
    "FETCH_INBOX_VERB",
    "FETCH_TOPIC_VERB",
    "GET_MAIL_VERB",
    "LIST_MAIL_VERB",
    "MAIL_VERBS",
    "MARK_DELIVERED_VERB",
    "PENDING_MAIL_VERB",
    "REPLY_MAIL_VERB",
    "SEND_MAIL_VERB",
    "AgentName",
    "FetchInbox",
    "FetchTopic",
    "GetMail",
    "ListMail",
    "MailDelivered",
    "MailErrorCode",
    "MailList",
    "MailMessage",
    "MailNotice",
    "MarkDelivered",
    "PendingMail",
    "ReplyMail",
    "SendMail",
    "epic_topic",
]

COORDINATOR = "coordinator"
"""The registered name of a swarm's coordinator (the orchestrator itself)."""

SEND_MAIL_VERB = "send_mail"
REPLY_MAIL_VERB = "reply_mail"
FETCH_INBOX_VERB = "fetch_inbox"
FETCH_TOPIC_VERB = "fetch_topic"
LIST_MAIL_VERB = "list_mail"
GET_MAIL_VERB = "get_mail"
PENDING_MAIL_VERB = "pending_mail"
MARK_DELIVERED_VERB = "mark_delivered"
MAIL_VERBS = (SEND_MAIL_VERB, REPLY_MAIL_VERB, FETCH_INBOX_VERB, FETCH_TOPIC_VERB, LIST_MAIL_VERB, GET_MAIL_VERB,
              PENDING_MAIL_VERB, MARK_DELIVERED_VERB)
"""Orchestrator verbs (``autarch.svc.orchestrator.<verb>``)."""

AgentName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$(?!\n)",
                                        description="A registered agent name (a NATS subject token)")]
"""A worker's registered name (``AmberFalcon``) or ``coordinator``: it is a token of the notice subject."""
# Mail is shown to agents and people (terminals): the HTTP API's text rules (contracts/http.py).
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=200_000, pattern=TEXT)]
Subject = Annotated[str, msgspec.Meta(min_length=1, max_length=500, pattern=TITLE)]
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


def epic_topic(epic_id: str) -> str:
    """The recommended topic of an epic's thread (seed 002: ``epic-<EPIC_ID>``)."""
    return f"epic-{epic_id}"


class MailErrorCode:
    """Domain error codes of the mail verbs (with ``not_found``/``bad_request`` of ``ErrorCode``)."""

    NO_MESSAGE = "not_found"
    """``message_id`` names no message of this epic (the common ``not_found``: a 404 over HTTP)."""
    WRONG_EPIC = "wrong_epic"
    """``project_key`` names another epic than the caller's."""


class MailMessage(Reply, kw_only=True):
    """One message of an epic's mailbox, as every reader sees it."""

    message_id: str
    epic_id: str
    thread_id: str
    """The thread (seed 002: normally the epic id); a reply keeps its original's thread."""
    topic: str
    sender: str
    to: list[str]
    subject: str
    body_md: str
    reply_to: str | None = None
    """The message this one answers (``reply_message``)."""
    created_at: datetime
    delivered_to: list[str] = []
    """Recipients whose session has been given the message (pushed into a model call or fetched)."""


class SendMail(Command, kw_only=True):
    """``send_message``: post a message to some agents of the epic."""

    project_key: str
    """The epic id (the tools service fills it from the session's workflow)."""
    sender_name: AgentName
    to: Annotated[list[AgentName], msgspec.Meta(min_length=1, max_length=64)]
    thread_id: str | None = None
    """Default: the epic id."""
    topic: str | None = None
    """Default: ``epic-<EPIC_ID>``."""
    subject: Subject
    body_md: Text
    idempotency_key: Key | None = None
    """A repeat with the same key answers the message recorded the first time."""


class ReplyMail(Command, kw_only=True):
    """``reply_message``: answer a message in its thread, to its sender."""

    project_key: str
    message_id: str
    sender_name: AgentName
    body_md: Text
    idempotency_key: Key | None = None


class FetchInbox(Query, kw_only=True):
    """``fetch_inbox``: the messages addressed to ``agent_name`` (on ``topic`` when given), oldest first."""

    project_key: str
    agent_name: AgentName
    topic: str | None = None
    session_id: str | None = None
    """The fetching agent's session: the messages returned count as delivered to ``agent_name`` (so the
    runner does not push them again). None (a person looking) marks nothing."""


class FetchTopic(Query, kw_only=True):
    """``fetch_topic``: the epic's timeline on one topic, oldest first."""

    project_key: str
    topic_name: str


class ListMail(Query, kw_only=True):
    """An epic's messages for people (HTTP, CLI): optionally one topic, optionally one agent's (sent or received)."""

    epic_id: str
    topic: str | None = None
    agent: str | None = None


class GetMail(Query, kw_only=True):
    epic_id: str
    message_id: str


class MailList(Reply, kw_only=True):
    epic_id: str
    messages: list[MailMessage]


class PendingMail(Query, kw_only=True):
    """For the agent runner: the messages to ``agent_name`` not yet delivered to it, oldest first."""

    epic_id: str
    agent_name: AgentName


class MarkDelivered(Command, kw_only=True):
    """For the agent runner: ``agent_name``'s session ``session_id`` has been given these messages."""

    epic_id: str
    agent_name: AgentName
    message_ids: list[str]
    session_id: str | None = None


class MailDelivered(Reply, kw_only=True):
    marked: list[str]
    """The ids that were not marked delivered before (a repeat marks nothing)."""


class MailNotice(msgspec.Struct, kw_only=True):
    """The core-NATS notice to one recipient after a post (``subjects.mail(epic, recipient)``); the message
    itself stays in the mailbox until it is delivered."""

    epic_id: str
    message_id: str
    recipient: str
    sender: str
    subject: str
