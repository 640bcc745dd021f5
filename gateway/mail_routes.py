"""Coordination mail over HTTP (``/api/mail``): an epic's messages and one message, read-only.

The epic id is the workflow id of a swarm's workflow; its mailbox holds what the workers and the coordinator
posted (seed 002's ``send_message`` … and the swarm driver's system mail). Replies are the orchestrator's
``MailList`` and ``MailMessage``. Reading here marks nothing delivered: a person looking never keeps mail from
a worker. Posting stays with the agents (their tools) and the swarm driver.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from litestar import Response, get
from litestar.datastructures import State
from litestar.params import FromPath, QueryParameter

from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.contracts.mail import GET_MAIL_VERB, LIST_MAIL_VERB, GetMail, ListMail, MailList, MailMessage
from autarch.runtime.errors import RemoteError

from .errors import STATUS_OF, error_response
from .orchestrator_client import ask_orchestrator
from .params import canonical_uuid, error_responses

__all__ = ["MAIL_ROUTES"]

_MESSAGE_ID = re.compile(r"^m[0-9]{1,12}\Z")
"""What a mailbox names its messages (``m1``, ``m2``, … in posting order); anything else names nothing."""

_QUERY = error_responses(400, 404)
_ONE = error_responses(404)


async def _ask(state: State, verb: str, payload: Any, reply_type: type) -> Any:
    try:
        return await ask_orchestrator(state, verb, payload, reply_type, idempotent=True)
    except RemoteError as exc:
        return error_response(exc.reply, STATUS_OF.get(exc.code, 500))


def _no_epic(given: str) -> Response[ErrorReply]:
    return error_response(ErrorReply(code=ErrorCode.NOT_FOUND, message=f"no epic {given}: an epic id is a "
                                     "workflow id"))


EpicParam = Annotated[str, QueryParameter(description="The epic: the workflow id of a swarm's workflow")]


@get("/api/mail", summary="An epic's coordination mail", tags=["mail"], responses=_QUERY)
async def list_mail(
    state: State,
    epic_id: EpicParam,
    topic: Annotated[str | None, QueryParameter(description="Only messages on this topic (`epic-<EPIC_ID>` "
                                                            "is the epic's own)")] = None,
    agent: Annotated[str | None, QueryParameter(description="Only messages this agent sent or was sent "
                                                            "(a worker's name, or `coordinator`)")] = None,
) -> MailList | Response[ErrorReply]:
    """Every message of the epic's mailbox, oldest first: sender, recipients, thread, topic, subject, body,
    the message it answers and who has been given it. An epic nobody has written to yet has none. Reading
    marks nothing delivered. 404 for a malformed epic id."""
    epic = canonical_uuid(epic_id)
    if epic is None:
        return _no_epic(epic_id)
    return await _ask(state, LIST_MAIL_VERB, ListMail(epic_id=epic, topic=topic, agent=agent), MailList)


@get("/api/mail/{epic_id:str}/{message_id:str}", summary="One message", tags=["mail"], responses=_ONE)
async def get_mail(epic_id: FromPath[str], message_id: FromPath[str],
                   state: State) -> MailMessage | Response[ErrorReply]:
    """The message ``message_id`` (``m1``, ``m2``, … in posting order) of the epic's mailbox, with its body
    and headers. 404 for an unknown or malformed epic or message id."""
    epic = canonical_uuid(epic_id)
    if epic is None:
        return _no_epic(epic_id)
    if not _MESSAGE_ID.match(message_id):
        return error_response(ErrorReply(code=ErrorCode.NOT_FOUND, message=f"no message {message_id}"))
    return await _ask(state, GET_MAIL_VERB, GetMail(epic_id=epic, message_id=message_id), MailMessage)


MAIL_ROUTES = [list_mail, get_mail]
