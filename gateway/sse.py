"""``/api/events``: the JetStream stream as Server-Sent Events.

Each event is sent with ``event:`` = its seed-003 name and ``id:`` = its stream sequence, so a
client reconnecting with ``Last-Event-ID`` resumes exactly after the last event it saw.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from litestar.response import ServerSentEventMessage
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import ConsumerConfig, DeliverPolicy

from autarch.contracts import subjects

__all__ = ["event_stream"]

log = logging.getLogger(__name__)


async def event_stream(
    nc: Client, *, workflow: str | None, after: int | None, keepalive: float
) -> AsyncIterator[ServerSentEventMessage]:
    """Yield stream events (after sequence ``after`` when given, else only new ones) and keep-alives."""
    subject = subjects.workflow_events(workflow) if workflow else subjects.EVENTS_ALL
    if after is None:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
    else:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1)
    js = nc.jetstream()
    sub = await js.subscribe(
        subject, stream=subjects.EVENTS_STREAM, ordered_consumer=True, config=config, idle_heartbeat=5.0
    )
    try:
        # A comment first: the client knows the subscription is live before any event flows.
        yield ServerSentEventMessage(data=None, comment="connected")
        while True:
            try:
                msg = await sub.next_msg(timeout=keepalive)
            except NatsTimeout:
                yield ServerSentEventMessage(data=None, comment="keep-alive")
                continue
            event_type = (msg.headers or {}).get("Autarch-Event") or subjects.event_type_from_subject(msg.subject)
            yield ServerSentEventMessage(data=msg.data.decode(), event=event_type, id=msg.metadata.sequence.stream)
    finally:
        try:
            await sub.unsubscribe()
        except Exception:  # the connection may already be closing
            log.debug("unsubscribe failed", exc_info=True)
