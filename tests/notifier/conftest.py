"""Fixtures of the notifier tests: the service in-process over the real nats-server, fed real loop events."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from nats.js import api

from autarch.contracts import subjects
from autarch.contracts.base import decoder_for, encode
from autarch.contracts.events import Event, event_subject
from autarch.contracts.notifications import DeliveryList, ListDeliveries
from autarch.runtime.settings import NotifierSettings
from autarch.services.notifier.service import NotifierService, consumer_config

_numbers = itertools.count()


async def publish(nc: Client, event: Event, msg_id: str | None = None) -> None:
    """Publish ``event`` to the stream as a relay does (with ``Nats-Msg-Id``)."""
    await nc.jetstream().publish(event_subject(event), encode(event),
                                 headers={"Nats-Msg-Id": msg_id or f"test:{uuid.uuid4()}"})


def now() -> datetime:
    return datetime.now(UTC)


async def deliveries(nc: Client, session_id: str | None = None) -> DeliveryList:
    """The notifier's record, asked over NATS like any client does."""
    reply = await nc.request(subjects.request("notifier", "list_deliveries"),
                             encode(ListDeliveries(session_id=session_id)), timeout=10)
    return decoder_for(DeliveryList).decode(reply.data)


async def fresh_consumer(nc: Client, name: str) -> None:
    """Create the durable consumer ``name`` from the stream's next message: this test's events only."""
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    try:
        await js.delete_consumer(subjects.EVENTS_STREAM, name)
    except Exception:
        pass
    await js.add_consumer(subjects.EVENTS_STREAM, config=consumer_config(
        name, deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=info.state.last_seq + 1))


@pytest.fixture
async def notifier_factory(nc: Client, nats_server: Any, data_dir: Path
                           ) -> AsyncIterator[Callable[..., Any]]:
    """``await make(**settings)`` starts a notifier on this test's own consumer and data dir (again with the
    same ones after a stop: a restart)."""
    name = f"notifier-test-{next(_numbers)}-{uuid.uuid4().hex[:6]}"
    await fresh_consumer(nc, name)
    running: list[NotifierService] = []

    async def make(**changes: Any) -> NotifierService:
        base = {"data_dir": str(data_dir), "nats_url": nats_server.url, "notify_backoff_initial": 0.05,
                "notify_backoff_max": 0.2, "notify_timeout": 5.0, "notify_max_attempts": 50}
        settings = NotifierSettings(**{**base, **changes})
        service = NotifierService(nc, settings, consumer=name)
        await service.start()
        running.append(service)
        return service

    make.consumer = name  # type: ignore[attr-defined]  # the consumer's name, for the test to find
    yield make
    for service in running:
        if service._http is not None:
            await service.stop()


def replace(struct: Any, **changes: Any) -> Any:
    return msgspec.structs.replace(struct, **changes)
