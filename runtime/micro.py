"""Declaring a service with ``nats.micro`` and typed endpoints.

A handler is ``async def handler(request: SomeStruct) -> SomeReply``. The payload is decoded
with a cached msgspec decoder; a payload that does not decode is answered with a
``bad_request`` :class:`ErrorReply` and never reaches the handler. A handler raising
:class:`ServiceFailure` answers with that typed error; any other exception is logged and
answered with ``internal``. The service keeps running in every case.

Each instance also tells a waiting caller that it still holds its request (see ``liveness.py``):
a request whose instance died is then noticed in seconds, not at its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client
from nats.errors import ConnectionClosedError
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointConfig, Service, ServiceConfig

from autarch.contracts import subjects
from autarch.contracts.base import decoder_for, encode
from autarch.contracts.errors import ErrorCode, ErrorReply

from .errors import ServiceFailure
from .liveness import REQUEST_ID_HEADER, HeldRequests

__all__ = ["TypedService", "error_headers"]

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")

ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"

_HTTP_LIKE = {
    ErrorCode.BAD_REQUEST: "400",
    ErrorCode.NOT_FOUND: "404",
    ErrorCode.CONFLICT: "409",
    ErrorCode.TIMEOUT: "504",
    ErrorCode.UNAVAILABLE: "503",
}


def error_headers(reply: ErrorReply) -> dict[str, str]:
    """The micro-protocol error headers for ``reply`` (so ``nats micro`` tools see the error too)."""
    return {
        ERROR_HEADER: reply.message[:1000].replace("\r", " ").replace("\n", " "),
        ERROR_CODE_HEADER: _HTTP_LIKE.get(reply.code, "500"),
        "Autarch-Error": reply.code,
    }


@dataclass
class _Endpoint:
    verb: str
    request_type: Any
    handler: Callable[[Any], Awaitable[Any]]
    subject: str
    concurrency: int


@dataclass
class TypedService:
    """A ``nats.micro`` service whose endpoints take and return msgspec Structs.

    Requests are handled concurrently (up to ``concurrency`` per endpoint): a subscription
    callback in nats.py runs one message at a time, so each request gets its own task.
    """

    nc: Client
    """The connection the service answers on."""
    name: str
    """Service name (one of ``subjects.SERVICES``), shared by every instance."""
    version: str = "0.1.0"
    """Semantic version reported by ``$SRV.INFO``."""
    description: str = ""
    """One line for ``$SRV.INFO``."""
    queue_group: str | None = None
    """Queue group shared by the instances; defaults to the service name."""
    _endpoints: list[_Endpoint] = field(default_factory=list)
    _service: Service | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _held: HeldRequests | None = None

    def endpoint(
        self,
        verb: str,
        request_type: type[Req],
        handler: Callable[[Req], Awaitable[Any]],
        *,
        subject: str | None = None,
        concurrency: int = 64,
    ) -> None:
        """Register ``handler`` for ``verb``; call before :meth:`start`."""
        if self._service is not None:
            raise RuntimeError("endpoints must be registered before start()")
        self._endpoints.append(
            _Endpoint(verb, request_type, handler, subject or subjects.request(self.name, verb), concurrency)
        )

    async def start(self) -> None:
        self._service = await add_service(
            self.nc,
            ServiceConfig(
                name=self.name,
                version=self.version,
                description=self.description or None,
                queue_group=self.queue_group or self.name,
            ),
        )
        # Answering "which requests do you hold?" from the start: a request taken before the first question
        # must be claimed by it.
        self._held = HeldRequests(self._service.id)
        await self._held.start(self.nc, self.name)
        for ep in self._endpoints:
            await self._service.add_endpoint(
                EndpointConfig(name=ep.verb, subject=ep.subject, handler=self._dispatcher(ep))
            )

    @property
    def instance_id(self) -> str | None:
        """This instance's ``nats.micro`` id (as ``$SRV.PING`` reports it); None before :meth:`start`."""
        return self._service.id if self._service is not None else None

    async def stop(self) -> None:
        if self._held is not None:
            # First: requests cancelled below are answered by nobody, so their callers must stop seeing
            # them claimed and send them again (to another instance, or to this service once restarted).
            await self._held.stop()
        if self._service is not None:
            # A connection that is already closed has no subscriptions left; the handlers still need stopping.
            with contextlib.suppress(ConnectionClosedError):
                await self._service.stop()
            self._service = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _dispatcher(self, ep: _Endpoint) -> Callable[[Request], Awaitable[None]]:
        decoder = decoder_for(ep.request_type)
        limit = asyncio.Semaphore(ep.concurrency)

        async def serve(request: Request, request_id: str | None) -> None:
            try:
                async with limit:
                    await _answer(request, decoder, ep)
            finally:
                if request_id is not None and held is not None:
                    held.release(request_id)

        held = self._held

        async def dispatch(request: Request) -> None:
            # Held from receipt (a request queued behind ``limit`` is held too) until it is answered.
            request_id = (request.headers or {}).get(REQUEST_ID_HEADER)
            if request_id is not None and held is not None:
                held.hold(request_id)
            task = asyncio.create_task(serve(request, request_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return dispatch


async def _answer(request: Request, decoder: msgspec.json.Decoder[Any], ep: _Endpoint) -> None:
    try:
        try:
            payload = decoder.decode(request.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ServiceFailure.bad_request(f"invalid {ep.verb} payload: {exc}") from None
        result = await ep.handler(payload)
        body = encode(result)
        headers = None
    except ServiceFailure as failure:
        reply = failure.to_reply()
        body, headers = encode(reply), error_headers(reply)
    except Exception as exc:
        log.exception("%s failed", ep.subject)
        reply = ErrorReply(code=ErrorCode.INTERNAL, message=f"{type(exc).__name__}: {exc}")
        body, headers = encode(reply), error_headers(reply)
    if request._msg.reply:
        try:
            await request.respond(body, headers=headers)
        except Exception:  # the connection is gone; an idempotent request is sent again once no one holds it
            log.warning("could not answer %s", ep.subject, exc_info=True)
