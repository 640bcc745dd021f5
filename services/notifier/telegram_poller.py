"""Reading the Telegram bot's messages (``getUpdates`` long polling) and starting the loop sessions they ask for.

Runs when the bot token and at least one allowed chat are set. Each message is handled once, in order:

- a ``/pulse`` from an allowed chat sends the orchestrator the ``start_loop`` command the gateway sends for
  ``POST /api/pulse/start`` (over NATS, ``created_by: telegram``, notifications to that chat). The session id
  is derived from the bot, the chat and the message, so handling a message again starts nothing new;
- a command from any other chat is answered with a refusal and starts nothing;
- a malformed command is answered with the usage.

The answer and the next offset are recorded in the outbox in one transaction (then the answer is delivered like
any notification), so a restart neither repeats a message nor loses one. While the orchestrator does not answer
the message is tried again, not skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import msgspec
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.loops import LoopView, NotifyTarget, StartLoop
from autarch.runtime.action_links import LinkRefused, UsedLinks, redeem
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.runtime.retry import Backoff
from autarch.runtime.settings import NotifierSettings

from .approvals import CALLBACK_PREFIX
from .channels import redact
from .messages import Intent, chat_body, delivery_id
from .outbox import Outbox, Pending
from .telegram_commands import (
    MAX_ITERATIONS,
    Start,
    Usage,
    parse,
    projects_of,
    refused_text,
    start_failed_text,
    started_text,
    usage_text,
)

__all__ = ["COMMAND_EVENT", "TelegramPoller", "bot_id_of"]

log = logging.getLogger("notifier")

COMMAND_EVENT = "telegram:command"
"""The ``event`` of an answer's delivery record."""
ACTION_EVENT = "telegram:action"
"""The ``event`` of the message saying what an approval button did."""
_SESSION_NAMESPACE = uuid.UUID("5d6f6c2e-8f3a-4c52-9a7e-2b1c0e7d4a90")
_RETRY_START = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT})


class _Chat(msgspec.Struct):
    id: int


class _Message(msgspec.Struct):
    message_id: int
    chat: _Chat
    text: str | None = None


class _Callback(msgspec.Struct):
    """A press of an inline keyboard's button: ``data`` is the button's ``callback_data``."""

    id: str
    data: str | None = None
    message: _Message | None = None


class _Update(msgspec.Struct):
    update_id: int
    message: _Message | None = None
    callback_query: _Callback | None = None


class _Answer(msgspec.Struct):
    ok: bool
    result: list[Any] = []
    description: str | None = None


def bot_id_of(token: str) -> str:
    """The bot's public id (a token is ``<bot id>:<secret>``); a hash for a token of another shape."""
    head, sep, _ = token.partition(":")
    return head if sep and head.isdigit() else hashlib.sha256(token.encode()).hexdigest()[:16]


class TelegramPoller:
    """One long-polling reader of the bot's messages; ``enqueue`` hands a recorded answer to delivery."""

    def __init__(self, nc: Client, settings: NotifierSettings, outbox: Outbox, http: httpx.AsyncClient,
                 enqueue: Callable[[Pending], None], *, link_key: bytes = b"") -> None:
        assert settings.notify_telegram_token
        self.nc, self.settings, self.outbox, self.http, self.enqueue = nc, settings, outbox, http, enqueue
        self.token = settings.notify_telegram_token
        self.bot_id = bot_id_of(self.token)
        self.allowed = frozenset(settings.notify_telegram_allowed_chats)
        self.projects = projects_of(settings.notify_telegram_projects)
        self.link_key = link_key
        self.used = UsedLinks(nc, replicas=settings.stream_replicas, timeout=settings.request_timeout)
        self.backoff = Backoff(initial=settings.notify_backoff_initial,
                               max_delay=max(settings.notify_backoff_max, settings.notify_backoff_initial))

    async def run(self) -> None:
        offset = await asyncio.to_thread(self.outbox.telegram_offset, self.bot_id)
        log.info("notifier: reading Telegram commands (allowed chats %s) from %s", ", ".join(sorted(self.allowed)),
                 "the first unread message" if offset is None else f"offset {offset}")
        failures = 0
        while True:
            try:
                updates = await self._get_updates(offset)
            except (httpx.HTTPError, _PollError, msgspec.ValidationError, msgspec.DecodeError) as exc:
                failures += 1
                log.warning("notifier: Telegram getUpdates failed (%s); asking again",
                            redact(f"{type(exc).__name__}: {exc}", self.settings)[:300])
                await asyncio.sleep(self.backoff.delay(failures))
                continue
            failures = 0
            for raw in updates:
                try:
                    offset = await self._handle(raw, offset)
                except Exception:  # the outbox unwritable, a bug: this update is asked for and handled again
                    log.exception("notifier: a Telegram update was not handled; asking again from offset %s", offset)
                    await asyncio.sleep(self.backoff.delay(1))
                    break

    async def _get_updates(self, offset: int | None) -> list[Any]:
        body: dict[str, Any] = {"timeout": self.settings.notify_telegram_poll_timeout,
                                "allowed_updates": ["message", "callback_query"]}
        if offset is not None:
            body["offset"] = offset
        url = f"{self.settings.notify_telegram_base_url.rstrip('/')}/bot{self.token}/getUpdates"
        response = await self.http.post(url, json=body, timeout=self.settings.notify_telegram_poll_timeout
                                        + self.settings.notify_timeout)
        if response.status_code != 200:
            raise _PollError(f"HTTP {response.status_code}: {response.text[:200]}")
        answer = msgspec.json.decode(response.content, type=_Answer)
        if not answer.ok:
            raise _PollError(answer.description or "ok: false")
        return answer.result

    async def _handle(self, raw: Any, offset: int | None) -> int | None:
        """Handle one update; returns the offset after it (``offset`` for an update before it or without an id)."""
        try:
            update = msgspec.convert(raw, _Update)
        except msgspec.ValidationError as exc:
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            if not isinstance(update_id, int) or isinstance(update_id, bool):
                log.warning("notifier: a Telegram update without an id skipped (%s)", exc)
                return offset
            log.warning("notifier: Telegram update %d not understood, skipped (%s)", update_id, exc)
            update = _Update(update_id=update_id)
        if offset is not None and update.update_id < offset:
            return offset  # handled already; a server should not send it again
        intent = await self._answer(update)
        new = await asyncio.to_thread(self.outbox.answer, intent, bot_id=self.bot_id,
                                      next_offset=update.update_id + 1)
        if new:
            for delivery in await asyncio.to_thread(self.outbox.pending, new):
                self.enqueue(delivery)
        return update.update_id + 1

    async def _answer(self, update: _Update) -> Intent | None:
        """What to answer ``update`` with (starting the session it asks for); None: nothing."""
        if update.callback_query is not None:
            return await self._act(update.callback_query)
        message = update.message
        if message is None or message.text is None:
            return None
        command = parse(message.text, self.projects)
        if command is None:
            return None
        chat_id = str(message.chat.id)
        key = f"telegram:{self.bot_id}:{chat_id}:{message.message_id}"
        session_id = ""
        if chat_id not in self.allowed:
            log.info("notifier: a Telegram command from chat %s, which is not allowed, refused", chat_id)
            text = refused_text(chat_id)
        elif isinstance(command, Usage):
            text = usage_text(command, self.projects)
        else:
            session_id = str(uuid.uuid5(_SESSION_NAMESPACE, key))
            text = await self._start(command, session_id, chat_id)
        target = NotifyTarget(kind="telegram", chat_id=chat_id)
        return Intent(delivery_id=delivery_id(key, target), session_id=session_id, event=COMMAND_EVENT,
                      target=target, text=text, body=chat_body(target, text), occurred_at=_now())

    async def _start(self, command: Start, session_id: str, chat_id: str) -> str:
        """Start the session (asking again while the orchestrator does not answer); the answer's text."""
        start = StartLoop(session_id=session_id, project_name=command.project_name,
                          project_path=command.project_path, goal=command.goal, max_iterations=MAX_ITERATIONS,
                          created_by="telegram", notify=[NotifyTarget(kind="telegram", chat_id=chat_id)])
        subject = subjects.orchestrator_request("start_loop", start, self.settings.orchestrator_partitions)
        attempts = 0
        while True:
            try:
                view = await request(self.nc, subject, start, LoopView, timeout=self.settings.request_timeout,
                                     retry_unavailable=self.settings.request_timeout, idempotent=True)
            except RemoteError as exc:
                if exc.code not in _RETRY_START:
                    log.info("notifier: Telegram start of %s refused: %s", session_id, exc.code)
                    return start_failed_text(command, exc.code, exc.message)
                attempts += 1
                log.warning("notifier: Telegram start of %s: the orchestrator answered %s; asking again",
                            session_id, exc.code)
                await asyncio.sleep(self.backoff.delay(attempts))
                continue
            log.info("notifier: loop session %s started from Telegram chat %s", view.id, chat_id)
            return started_text(view)


    async def _act(self, press: _Callback) -> Intent | None:
        """A press of an action button (approve, resume, stop): redeem its link (once), say what came of it."""
        data = press.data or ""
        if not data.startswith(CALLBACK_PREFIX) or press.message is None:
            return None  # not one of our buttons
        chat_id = str(press.message.chat.id)
        row = await asyncio.to_thread(self.outbox.link, data[len(CALLBACK_PREFIX):])
        if row is None or row.chat_id != chat_id:
            text = "⛔ This button is not an action link this notifier sent to this chat: nothing was done."
        else:
            try:
                outcome = await redeem(self.nc, self.link_key, row.token, self.used,
                                       partitions=self.settings.orchestrator_partitions,
                                       timeout=self.settings.request_timeout)
            except LinkRefused as exc:
                text = f"⛔ Not done: {exc.reply.code}: {exc.reply.message}"
            except RemoteError as exc:
                text = f"⛔ Not done: {exc.code}: {exc.message}"
            else:
                log.info("notifier: %s of %s (%s) from Telegram chat %s", outcome.action, outcome.run_id,
                         outcome.stage, chat_id)
                if outcome.workflow is not None and outcome.action == "resume":
                    text = f"▶️ Resumed workflow {outcome.workflow.title} ({outcome.run_id})."
                elif outcome.workflow is not None and outcome.action == "abandon":
                    text = (f"⏹️ Stopped workflow {outcome.workflow.title} ({outcome.run_id}): it is "
                            "abandoned, for good.")
                elif outcome.workflow is not None:
                    text = (f"✅ Approved the {outcome.stage} card of {outcome.workflow.title} "
                            f"({outcome.run_id}); the workflow is now in {outcome.workflow.stage}.")
                else:
                    text = f"⏹️ Stopped loop session {outcome.run_id}."
        await self._answer_press(press.id, text)
        target = NotifyTarget(kind="telegram", chat_id=chat_id)
        key = f"telegram-press:{self.bot_id}:{press.id}"
        return Intent(delivery_id=delivery_id(key, target), session_id=row.run_id if row is not None else "",
                      event=ACTION_EVENT, target=target, text=text, body=chat_body(target, text), occurred_at=_now())

    async def _answer_press(self, press_id: str, text: str) -> None:
        """Stop the button's spinner with a short note (best effort: the chat message says it in full)."""
        url = f"{self.settings.notify_telegram_base_url.rstrip('/')}/bot{self.token}/answerCallbackQuery"
        try:
            response = await self.http.post(url, json={"callback_query_id": press_id, "text": text[:200]},
                                            timeout=self.settings.notify_timeout)
            if response.status_code != 200:
                log.info("notifier: answerCallbackQuery answered HTTP %d", response.status_code)
        except httpx.HTTPError as exc:
            log.info("notifier: answerCallbackQuery failed (%s)", redact(str(exc), self.settings)[:200])


class _PollError(Exception):
    """``getUpdates`` answered something other than its updates."""


def _now() -> str:
    return datetime.now(UTC).isoformat()
