"""Typed requests: send a Struct, get the typed reply or a :class:`RemoteError`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from autarch.contracts import subjects
from autarch.contracts.base import decoder_for, encode
from autarch.contracts.errors import ErrorCode, ErrorReply

from .errors import RemoteError
from .liveness import REQUEST_ID_HEADER, InstanceWatch, watch_for
from .retry import REQUEST_UNAVAILABLE, retry
from .service_gate import gate_for

__all__ = ["request"]

T = TypeVar("T")

log = logging.getLogger(__name__)

_error_decoder: msgspec.json.Decoder[ErrorReply] = decoder_for(ErrorReply)
MAX_LOST = 3
"""Times an idempotent request is sent again after its instance went away before it gives up: a request
that kills every instance it reaches (a poison request) must not crash-loop its service for ever."""


async def request(
    nc: Client,
    subject: str,
    payload: Any,
    reply_type: type[T],
    *,
    timeout: float = 10.0,
    retry_unavailable: float = 0.0,
    idempotent: bool = False,
    service: str | None = None,
) -> T:
    """Send ``payload`` to ``subject`` and decode the answer as ``reply_type``.

    Raises :class:`RemoteError` with the service's typed error, ``timeout`` when no answer
    came in time, or ``unavailable`` when no service listens. With ``retry_unavailable`` > 0,
    "no responders" is retried for that many seconds (a service restarting after a crash).
    Only use that for idempotent requests.

    ``idempotent=True`` says the service recognises a repeat of this payload (an idempotency key, a
    deterministic id, a query): a request that no live instance holds any more — its instance was
    killed or restarted — is then noticed within a few seconds and sent again, up to :data:`MAX_LOST`
    times, each time waiting up to ``retry_unavailable`` for the service to come back. A live instance
    still holding it is waited for: ``timeout`` applies to each sending. ``service`` names the service
    when ``subject`` does not (``autarch.svc.<service>.<verb>`` does).
    """
    data = encode(payload)
    watch: InstanceWatch | None = None
    name = service or subjects.service_of(subject)
    if idempotent:
        watch = watch_for(nc, name) if name else None
    loop = asyncio.get_running_loop()
    gate = gate_for(nc)
    if name and retry_unavailable > 0 and gate.is_down(name):
        # Known to have no instance: wait on the shared probe rather than send into the void ourselves.
        await gate.until_up(name, timeout=retry_unavailable)
    lost = 0
    while True:
        try:
            msg = await retry(
                lambda: _send(nc, subject, data, timeout, watch), policy=REQUEST_UNAVAILABLE, name=subject,
                retry_on=lambda exc: isinstance(exc, NoRespondersError), deadline=loop.time() + retry_unavailable,
                log_level=logging.DEBUG,
            )
        except NoRespondersError:
            if name:
                gate.mark_down(name)
            raise RemoteError(
                ErrorReply(code=ErrorCode.UNAVAILABLE, message=f"no service answers on {subject}"), subject=subject
            ) from None
        except NatsTimeoutError:
            raise RemoteError(
                ErrorReply(code=ErrorCode.TIMEOUT, message=f"no answer on {subject} within {timeout:g}s"),
                subject=subject,
            ) from None
        if msg is not None:
            break
        lost += 1
        if lost > MAX_LOST:
            raise RemoteError(
                ErrorReply(code=ErrorCode.UNAVAILABLE,
                           message=f"the service instance handling {subject} went away {lost} times"),
                subject=subject,
            )
        log.warning("no instance holds the request on %s any more; sending it again (%d of %d)", subject, lost,
                    MAX_LOST)
        # The service may be restarting: it gets the same grace as a first sending would (a new deadline).
    return _decode(msg, subject, reply_type)


async def _send(nc: Client, subject: str, data: bytes, timeout: float, watch: InstanceWatch | None) -> Msg | None:
    """One sending: the reply, or None when the request was lost (no live instance holds it)."""
    if watch is None:
        return await nc.request(subject, data, timeout=timeout)
    request_id = secrets.token_hex(12)
    async with watch.waiting(request_id) as lost:
        headers = {REQUEST_ID_HEADER: request_id}
        reply = asyncio.ensure_future(nc.request(subject, data, timeout=timeout, headers=headers))
        gone = asyncio.ensure_future(lost.wait())
        try:
            await asyncio.wait({reply, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not reply.done():
                reply.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reply
        if reply.cancelled():
            return None
        return reply.result()  # the reply, or the sending's NoRespondersError / TimeoutError


def _decode(msg: Msg, subject: str, reply_type: type[T]) -> T:


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
