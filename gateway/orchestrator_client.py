"""The gateway's client of the services: typed requests that ride out a restart when it is safe."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

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
    settings: GatewaySettings = state["settings"]
    subject = subjects.request(service, verb)
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


async def ask_orchestrator(state: State, verb: str, payload: Any, reply_type: type, *, idempotent: bool) -> Any:
    """Ask the orchestrator (see :func:`ask_service`)."""
    return await ask_service(state, "orchestrator", verb, payload, reply_type, idempotent=idempotent)
