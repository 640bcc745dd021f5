"""Typed requests: send a Struct, get the typed reply or a :class:`RemoteError`."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from autarch.contracts.base import decoder_for, encode
from autarch.contracts.errors import ErrorCode, ErrorReply

from .errors import RemoteError

__all__ = ["request"]

T = TypeVar("T")

_error_decoder = decoder_for(ErrorReply)


async def request(
    nc: Client,
    subject: str,
    payload: Any,
    reply_type: type[T],
    *,
    timeout: float = 10.0,
    retry_unavailable: float = 0.0,
) -> T:
    """Send ``payload`` to ``subject`` and decode the answer as ``reply_type``.

    Raises :class:`RemoteError` with the service's typed error, ``timeout`` when no answer
    came in time, or ``unavailable`` when no service listens. With ``retry_unavailable`` > 0,
    "no responders" is retried for that many seconds (a service restarting after a crash).
    Only use that for idempotent requests.
    """
    data = encode(payload)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_unavailable
    delay = 0.05
    while True:
        try:
            msg = await nc.request(subject, data, timeout=timeout)
            break
        except NoRespondersError:
            if loop.time() + delay > deadline:
                raise RemoteError(
                    ErrorReply(code=ErrorCode.UNAVAILABLE, message=f"no service answers on {subject}"),
                    subject=subject,
                ) from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        except NatsTimeoutError:
            raise RemoteError(
                ErrorReply(code=ErrorCode.TIMEOUT, message=f"no answer on {subject} within {timeout:g}s"),
                subject=subject,
            ) from None
    headers = msg.headers or {}
    if "Nats-Service-Error-Code" in headers:
        try:
            reply = _error_decoder.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            # A foreign micro service (not ours) answered with a bare error header.
            reply = ErrorReply(
                code=ErrorCode.INTERNAL, message=headers.get("Nats-Service-Error", "unknown error")
            )
        raise RemoteError(reply, subject=subject)
    try:
        return decoder_for(reply_type).decode(msg.data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RemoteError(
            ErrorReply(code=ErrorCode.INTERNAL, message=f"malformed reply on {subject}: {exc}"),
            subject=subject,
        ) from None
