"""The ``notifier`` service: follows the loop events on ``AUTARCH_EVENTS`` with a durable consumer and
delivers their notifications, never losing, doubling or slowing one; with a Telegram bot token and allowed chats it
also starts the loop sessions the bot's ``/pulse`` commands ask for (``telegram_poller.py``).

- **Never lost**: each message's deliveries are written to the outbox (SQLite) before the message is
  acknowledged; a notifier killed after the ack finds them pending when it starts again.
- **Never doubled**: a delivery id is deterministic from the event (its ``Nats-Msg-Id``, else its stream
  sequence) and the target; a redelivered message finds its deliveries recorded and adds none, and every
  request carries ``Idempotency-Key: <delivery id>`` so a receiver drops the resend of a delivery whose
  success was not recorded before a crash.
- **Never slowing**: the loop only publishes events; here each target has its own worker, so an endpoint
  that is slow or dead delays nobody else's notifications. Failed attempts are retried with exponential
  backoff (``notify_backoff_initial`` doubling up to ``notify_backoff_max``) up to ``notify_max_attempts``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import (
    AnyEvent,
    LoopBlocked,
    LoopEvent,
    WorkflowApprovalNeeded,
    WorkflowHalted,
    decode_event,
)
from autarch.contracts.notifications import DeliveryList, ListDeliveries
from autarch.contracts.workflows import GetWorkflow, WorkflowView
from autarch.runtime.action_links import key_of
from autarch.runtime.bus import ensure_event_stream
from autarch.runtime.cancel import cancel_and_wait
from autarch.runtime.errors import RemoteError
from autarch.runtime.micro import TypedService
from autarch.runtime.pulls import PullConsumer
from autarch.runtime.requests import request
from autarch.runtime.retry import Backoff
from autarch.runtime.settings import NotifierSettings, narrow

from .approvals import approval_intents, approval_targets, halt_intents, still_waiting, with_stop_links
from .channels import Request, redact, request_for
from .messages import intents_for, target_key
from .outbox import LinkRow, Outbox, Pending
from .telegram_poller import TelegramPoller

__all__ = ["CONSUMER", "NotifierService", "approvals_config", "consumer_config", "start"]

log = logging.getLogger("notifier")

CONSUMER = "notifier"
"""The durable consumer's name on ``AUTARCH_EVENTS``."""
_RETRYABLE_4XX = frozenset({408, 425, 429})
_ACK_WAIT = 5.0
"""A message handed to a notifier that died before acknowledging it comes again after this long. Handling one
is a single SQLite write and a second handling records nothing, so a short wait costs nothing."""


def approvals_config(name: str, event: str = "approval_needed") -> api.ConsumerConfig:
    """The durable consumer of cards awaiting approval (``event`` ``halted``: of halts). Created from the stream's
    *next* message: a notifier configured for approvals later does not announce every card the system ever had
    (their links would be for cards long answered); every later start resumes it."""
    return api.ConsumerConfig(durable_name=name, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=_ACK_WAIT,
                              max_ack_pending=64, deliver_policy=api.DeliverPolicy.NEW,
                              filter_subject=subjects.event("*", "workflow", "*", event))


def consumer_config(name: str = CONSUMER, **changes: object) -> api.ConsumerConfig:
    """The durable consumer of loop events (created by the first start; every later start resumes it)."""
    config = api.ConsumerConfig(durable_name=name, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=_ACK_WAIT,
                                max_ack_pending=256, deliver_policy=api.DeliverPolicy.ALL,
                                filter_subject=subjects.event("*", "loop", "*", "*"))
    for key, value in changes.items():
        setattr(config, key, value)
    return config



@dataclass(frozen=True)
class _Failed:
    """An attempt that did not deliver; ``final``: given up (no more attempts)."""

    final: bool

class NotifierService:
    """The durable consumer, the outbox and one delivery worker per target."""

    def __init__(self, nc: Client, settings: NotifierSettings, *, consumer: str = CONSUMER) -> None:
        self.nc, self.settings, self.consumer_name = nc, settings, consumer
        self.outbox = Outbox(settings.data_path / "notifier" / "outbox.sqlite")
        self.backoff = Backoff(initial=settings.notify_backoff_initial,
                               max_delay=max(settings.notify_backoff_max, settings.notify_backoff_initial))
        self.micro = TypedService(nc, name="notifier", description="loop-session notifications and their record")
        self.micro.endpoint("list_deliveries", ListDeliveries, self._list_deliveries)
        self._http: httpx.AsyncClient | None = None
        self._pulls: PullConsumer | None = None
        self._approval_pulls: PullConsumer | None = None
        self._approvals_task: asyncio.Task[None] | None = None
        self._halt_pulls: PullConsumer | None = None
        self._halts_task: asyncio.Task[None] | None = None
        self.link_key = key_of(settings.data_path) if settings.notify_approvals or settings.notify_blocked_links \
            else b""
        self._consumer_task: asyncio.Task[None] | None = None
        self._telegram_task: asyncio.Task[None] | None = None
        self._queues: dict[str, asyncio.Queue[Pending]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._decode: Callable[[bytes], AnyEvent] = decode_event  # any shape the stream holds

    async def start(self) -> None:
        """Resume the pending deliveries, serve the record, and follow the loop events."""
        # httpx logs each request's URL at INFO; a Telegram URL holds the bot token.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self._http = httpx.AsyncClient(timeout=self.settings.notify_timeout)
        pending = await asyncio.to_thread(self.outbox.pending)
        for delivery in pending:
            self._enqueue(delivery)
        await self.micro.start()
        await ensure_event_stream(self.nc)
        self._pulls = PullConsumer(self.nc, stream=subjects.EVENTS_STREAM, config=consumer_config(self.consumer_name),
                                   handle=self._on_message)
        await self._pulls.start()
        self._consumer_task = asyncio.create_task(self._pulls.run(), name="notifier-consumer")
        if self.settings.notify_approvals:
            self._approval_pulls = PullConsumer(self.nc, stream=subjects.EVENTS_STREAM,
                                                config=approvals_config(f"{self.consumer_name}-approvals"),
                                                handle=self._on_approval)
            await self._approval_pulls.start()
            self._approvals_task = asyncio.create_task(self._approval_pulls.run(), name="notifier-approvals")
            # Its own consumer: the approvals consumer's filter stays as notifiers already created it.
            self._halt_pulls = PullConsumer(self.nc, stream=subjects.EVENTS_STREAM,
                                            config=approvals_config(f"{self.consumer_name}-halts", "halted"),
                                            handle=self._on_approval)
            await self._halt_pulls.start()
            self._halts_task = asyncio.create_task(self._halt_pulls.run(), name="notifier-halts")
        telegram_approvals = any(t.kind == "telegram" for t in approval_targets(self.settings))
        # A Stop button may go to any session's chat: its presses are read whenever blocked links are on.
        presses = telegram_approvals or self.settings.notify_blocked_links
        if self.settings.notify_telegram_token and (self.settings.notify_telegram_allowed_chats or presses):
            poller = TelegramPoller(self.nc, self.settings, self.outbox, self._http, self._enqueue,
                                    link_key=self.link_key)
            self._telegram_task = asyncio.create_task(poller.run(), name="notifier-telegram")
        log.info("notifier following %s with durable consumer %s; %d deliveries pending", subjects.EVENTS_STREAM,
                 self.consumer_name, len(pending))

    async def stop(self) -> None:
        """Stop following and delivering; pending deliveries stay in the outbox for the next start."""
        await cancel_and_wait([self._consumer_task, self._approvals_task, self._halts_task, self._telegram_task,
                               *self._workers.values()])
        self._workers.clear()
        self._queues.clear()
        for pulls in (self._pulls, self._approval_pulls, self._halt_pulls):
            if pulls is not None:
                await pulls.stop()
        self._pulls = self._approval_pulls = self._halt_pulls = None
        await self.micro.stop()
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        await asyncio.to_thread(self.outbox.close)

    # --- the stream ----------------------------------------------------------------------------------

    async def _on_message(self, msg: Msg) -> None:
        try:
            event = self._decode(msg.data)
        except Exception as exc:  # a newer writer's event: nothing to say about it
            log.warning("notifier: undecodable event on %s skipped (%s)", msg.subject, exc)
            await msg.ack()
            return
        if isinstance(event, LoopEvent):
            key = (msg.headers or {}).get("Nats-Msg-Id") or f"seq:{msg.metadata.sequence.stream}"
            intents = intents_for(event, event_key=key, default_webhooks=tuple(self.settings.notify_webhooks))
            links: list[LinkRow] = []
            if isinstance(event, LoopBlocked) and self.settings.notify_blocked_links and intents:
                intents, links = with_stop_links(intents, event, settings=self.settings, key=self.link_key)
            if intents:
                try:
                    new = await asyncio.to_thread(self.outbox.record, intents, links)  # before the ack: never lost
                except Exception:
                    log.exception("notifier: deliveries of %s not recorded; the event will come again", msg.subject)
                    await msg.nak(delay=1.0)
                    return
                if new:
                    for delivery in await asyncio.to_thread(self.outbox.pending, new):
                        self._enqueue(delivery)
        await msg.ack()

    async def _on_approval(self, msg: Msg) -> None:
        try:
            event = self._decode(msg.data)
        except Exception as exc:
            log.warning("notifier: undecodable event on %s skipped (%s)", msg.subject, exc)
            await msg.ack()
            return
        if isinstance(event, WorkflowApprovalNeeded | WorkflowHalted):
            query = GetWorkflow(workflow_id=event.workflow_id)
            try:
                view = await request(self.nc, subjects.orchestrator_request("get_workflow", query,
                                                                            self.settings.orchestrator_partitions),
                                     query, WorkflowView, timeout=self.settings.request_timeout)
            except RemoteError as exc:
                if exc.code != ErrorCode.NOT_FOUND:
                    log.warning("notifier: %s not announced yet: the orchestrator answered %s", msg.subject, exc.code)
                    await msg.nak(delay=1.0)
                    return
                view = None
            if view is None or not still_waiting(event, view):
                log.info("notifier: %s not announced: workflow %s no longer waits there", msg.subject,
                         event.workflow_id)
                await msg.ack()
                return
            key = (msg.headers or {}).get("Nats-Msg-Id") or f"seq:{msg.metadata.sequence.stream}"
            if isinstance(event, WorkflowApprovalNeeded):
                intents, links = approval_intents(event, event_key=key, settings=self.settings, key=self.link_key)
            else:
                intents, links = halt_intents(event, event_key=key, settings=self.settings, key=self.link_key)
            try:
                new = await asyncio.to_thread(self.outbox.record, intents, links)  # before the ack: never lost
            except Exception:
                log.exception("notifier: announcements of %s not recorded; the event will come again",
                              msg.subject)
                await msg.nak(delay=1.0)
                return
            for delivery in await asyncio.to_thread(self.outbox.pending, new) if new else []:
                self._enqueue(delivery)
        await msg.ack()

    # --- delivering ----------------------------------------------------------------------------------

    def _enqueue(self, delivery: Pending) -> None:
        target = target_key(delivery.target)
        queue = self._queues.get(target)
        if queue is None:
            queue = self._queues[target] = asyncio.Queue()
            self._workers[target] = asyncio.create_task(self._work(target, queue),
                                                        name=f"notifier-{delivery.target.kind}")
        queue.put_nowait(delivery)

    async def _work(self, target: str, queue: asyncio.Queue[Pending]) -> None:
        """Deliver one target's notifications in order, each until delivered or given up; end when none is left
        (the next one starts a new worker)."""
        while not queue.empty():
            delivery = queue.get_nowait()
            try:
                await self._deliver(delivery)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("notifier: delivery %s broke; it stays pending until a restart", delivery.delivery_id)
        # No await since the check above: nothing was queued meanwhile.
        del self._queues[target]
        del self._workers[target]

    async def _deliver(self, delivery: Pending) -> None:
        request = request_for(delivery, self.settings)
        if isinstance(request, str):
            await asyncio.to_thread(self.outbox.give_up, delivery.delivery_id, request)
            log.warning("notifier: %s not delivered: %s", delivery.delivery_id, request)
            return
        attempts = delivery.attempts
        while True:
            # Once a request is on its way the receiver may have it: its outcome is recorded even when the
            # service is stopping (a stop mid-attempt would otherwise leave it pending, and send it again).
            attempt = asyncio.ensure_future(self._attempt(delivery, request, attempts))
            try:
                error = await asyncio.shield(attempt)
            except asyncio.CancelledError:
                await asyncio.wait([attempt])
                raise
            attempts += 1
            if error is None or error.final:
                return
            await asyncio.sleep(self.backoff.delay(attempts))

    async def _attempt(self, delivery: Pending, request: Request, attempts: int) -> _Failed | None:
        """Send ``request`` once and record the outcome; None when delivered."""
        assert self._http is not None
        status: int | None = None
        error: str | None = None
        try:
            response = await self._http.post(request.url, json=request.json, data=request.form,
                                             headers=request.headers, auth=request.auth)  # type: ignore[arg-type]  # None: no auth
            status = response.status_code
            if not 200 <= status < 300:
                error = f"HTTP {status}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500] or type(exc).__name__
        if error is not None:
            error = redact(error, self.settings)
        attempts += 1
        delivered = error is None
        # A 4xx other than 408/425/429 will not change by asking again (a revoked webhook, a bad chat id).
        refused = status is not None and 400 <= status < 500 and status not in _RETRYABLE_4XX
        final = not delivered and (refused or attempts >= self.settings.notify_max_attempts)
        await asyncio.to_thread(self.outbox.attempted, delivery.delivery_id, status=status, error=error,
                                delivered=delivered, final=final)
        if delivered:
            return None
        if final:
            log.warning("notifier: %s to %s given up after %d attempts: %s", delivery.delivery_id,
                        delivery.target.kind, attempts, error)
        return _Failed(final)

    # --- the record ----------------------------------------------------------------------------------

    async def _list_deliveries(self, query: ListDeliveries) -> DeliveryList:
        deliveries = await asyncio.to_thread(self.outbox.list, session_id=query.session_id, state=query.state,
                                             limit=query.limit)
        return DeliveryList(deliveries=deliveries)


async def start(nc: Client, settings: NotifierSettings) -> Callable[[], Awaitable[None]]:
    """The ``run_service`` starter."""
    service = NotifierService(nc, narrow(settings, NotifierSettings))
    await service.start()
    return service.stop


