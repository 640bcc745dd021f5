"""The gateway's client of the services: typed requests that ride out a restart when it is safe."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
from litestar.datastructures import State
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request as nats_request
from autarch.runtime.retry import GATEWAY_REQUEST, retry
from autarch.runtime.settings import GatewaySettings

__all__ = ["ask_orchestrator", "ask_service", "nc_of"]

_RETRYABLE = {ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT}


def nc_of(state: State) -> Client:
    """The gateway's NATS connection; ``unavailable`` while it is down."""
    nc: Client | None = state.get("nc")
    if nc is None or not nc.is_connected:
        raise RemoteError(ErrorReply(code=ErrorCode.UNAVAILABLE, message="not connected to NATS"), subject="-")
    return nc


async def ask_service(
    state: State, service: str, verb: str, payload: Any, reply_type: type, *, idempotent: bool
) -> Any:
    """Ask ``service``; idempotent requests ride out a restart (retried until the deadline).

    A request that is not idempotent is sent once: ``timeout`` then means "maybe done", and only the
    client can tell whether to try again.
    """
    return await _ask(state, subjects.request(service, verb), payload, reply_type, idempotent=idempotent)


async def ask_orchestrator(state: State, verb: str, payload: Any, reply_type: type, *, idempotent: bool) -> Any:
    """Ask the orchestrator partition that owns what ``payload`` names (see :func:`ask_service`); a list is asked
    of every partition and merged."""
    settings: GatewaySettings = state["settings"]
    count = settings.orchestrator_partitions
    if count > 1 and verb in subjects.SCATTERED_VERBS:
        return await _ask_every_partition(state, verb, payload, reply_type, count)
    return await _ask(state, subjects.orchestrator_request(verb, payload, count), payload, reply_type,
                      idempotent=idempotent)


async def _ask_every_partition(state: State, verb: str, query: Any, reply_type: type, count: int) -> Any:
    """One page of a list over every partition: each is asked for its first ``offset + limit`` items (as many as
    a query may ask for), and the pages are merged in creation order, as one orchestrator lists them."""
    wanted = min(query.offset + query.limit, _limit_bound(type(query)))
    each = msgspec.structs.replace(query, offset=0, limit=wanted)
    pages = await asyncio.gather(*(
        _ask(state, subjects.orchestrator_partition(verb, k, count), each, reply_type, idempotent=True)
        for k in range(count)
    ))
    items = sorted((item for page in pages for item in page.items), key=lambda item: (item.created_at, item.id))
    return reply_type(items=items[query.offset: query.offset + query.limit], total=sum(p.total for p in pages))


def _limit_bound(query_type: type) -> int:
    field = next(f for f in msgspec.structs.fields(query_type) if f.name == "limit")
    meta = next(m for m in getattr(field.type, "__metadata__", ()) if isinstance(m, msgspec.Meta))
    assert meta.le is not None
    return int(meta.le)


async def _ask(state: State, subject: str, payload: Any, reply_type: type, *, idempotent: bool) -> Any:
    settings: GatewaySettings = state["settings"]
    loop = asyncio.get_running_loop()
    return await retry(
        lambda: nats_request(
            nc_of(state), subject, payload, reply_type,
            timeout=settings.request_timeout, retry_unavailable=settings.request_timeout if idempotent else 0,
        ),
        policy=GATEWAY_REQUEST, name=subject,
        retry_on=lambda exc: idempotent and isinstance(exc, RemoteError) and exc.code in _RETRYABLE,
        deadline=loop.time() + 3 * settings.request_timeout, log_level=logging.DEBUG,
    )
