"""Declaring a service with ``nats.micro`` and typed endpoints.

A handler is ``async def handler(request: SomeStruct) -> SomeReply``. The payload is decoded
with a cached msgspec decoder; a payload that does not decode is answered with a
``bad_request`` :class:`ErrorReply` and never reaches the handler. A handler raising
:class:`ServiceFailure` answers with that typed error; any other exception is logged and
answered with ``internal``. The service keeps running in every case.

Each request runs in its own task (a nats.py subscription callback handles one message at a time),
so nats.micro's own endpoint statistics, which time the callback, would see every request succeed in
microseconds. The service keeps its own per endpoint instead (requests, error replies, time from
receipt to answer, last error) and serves them on ``$SRV.STATS`` through nats.micro's public
``ServiceConfig.stats_handler``, which is handed each endpoint's stats before they are sent.

Each instance also tells a waiting caller that it still holds its request (see ``liveness.py``):
a request whose instance died is then noticed in seconds, not at its timeout.

A service whose state takes a while to load (the agent runner's 80,000 session summaries, the indexer's model) can
start answering first (:meth:`TypedService.hold_until_loaded`): its requests then wait, held, until the state is
loaded, and are answered from all of it, never from part; a load that fails answers them with its error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client
from nats.errors import ConnectionClosedError, MaxPayloadError
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointConfig, EndpointStats, Service, ServiceConfig

from autarch.contracts import subjects
from autarch.contracts.base import decoder_for, encode
from autarch.contracts.errors import ErrorCode, ErrorReply

from .errors import ServiceFailure
from .liveness import REQUEST_ID_HEADER, HeldRequests
from .storage import STORAGE, STORAGE_METADATA, StorageFull, StorageState, storage_full

__all__ = ["TypedService"]

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")

_HTTP_LIKE = {
    ErrorCode.BAD_REQUEST: "400",
    ErrorCode.NOT_FOUND: "404",
    ErrorCode.CONFLICT: "409",
    ErrorCode.TIMEOUT: "504",
    ErrorCode.UNAVAILABLE: "503",
    ErrorCode.STORAGE_FULL: "503",
}


@dataclass
class _Endpoint:
    verb: str
    request_type: Any
    handler: Callable[[Any], Awaitable[Any]]
    subject: str
    concurrency: int
    # What ``$SRV.STATS`` reports for this endpoint (see the module docstring).
    num_requests: int = 0
    """Requests received, answered or not yet."""
    num_answered: int = 0
    """Requests whose handling ended (answered, or the answer could not be sent)."""
    num_errors: int = 0
    """Requests answered with an error reply, or whose answer could not be sent."""
    processing_time: int = 0
    """Nanoseconds from receipt to answer, summed over the answered requests (time queued included)."""
    last_error: str = ""


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
    subject_of: Callable[[str], str] | None = None
    """A verb's subject (default ``autarch.svc.<name>.<verb>``); an orchestrator partition serves its own."""
    metadata: dict[str, str] = field(default_factory=dict)
    """More ``$SRV.PING``/``$SRV.INFO`` metadata of this instance (an orchestrator's ``partition``)."""
    _endpoints: list[_Endpoint] = field(default_factory=list)
    _service: Service | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _held: HeldRequests | None = None
    storage: StorageState = STORAGE
    """The process's register of paths it cannot write for lack of space, shown in ``$SRV.PING`` metadata."""
    _live_metadata: dict[str, str] = field(default_factory=dict)
    _unlisten: Any = None
    _watch: asyncio.Task[None] | None = None
    _loaded: asyncio.Future[None] | None = None

    def hold_until_loaded(self) -> Callable[[BaseException | None], None]:
        """Have every request wait until the callable returned is called (with None: the state the handlers serve
        from is loaded; with an exception: it could not be, and each request is answered with that error).

        For a service that starts (:meth:`start`) before it loads that state: ``$SRV.PING`` answers at once, so a
        caller sends its request and waits in it, held, instead of retrying on "no responders" until the load is
        done. Call before :meth:`start`.
        """
        loaded = self._loaded = asyncio.get_running_loop().create_future()

        def done(error: BaseException | None = None) -> None:
            if loaded.done():
                return
            if error is None:
                loaded.set_result(None)
            else:
                loaded.set_exception(error)
                loaded.exception()  # retrieved here: waiting requests each answer with it, none need be waiting

        return done

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
            _Endpoint(verb, request_type, handler, subject or self._subject(verb), concurrency)
        )

    def _subject(self, verb: str) -> str:
        return self.subject_of(verb) if self.subject_of is not None else subjects.request(self.name, verb)

    async def start(self) -> None:
        # nats.micro builds every $SRV.PING/INFO answer from the metadata dict it was given, so the storage
        # problems written into this same dict later show in the next answer (tests/runtime/test_storage.py
        # proves it against nats.micro).
        self._live_metadata = {"host": socket.gethostname(), **self.metadata}
        self._service = await add_service(
            self.nc,
            ServiceConfig(
                name=self.name,
                version=self.version,
                description=self.description or None,
                queue_group=self.queue_group or self.name,
                stats_handler=self._stats,
                # The host lets a readiness probe in this container tell its own instance from the others
                # (runtime/probe.py): every instance answers the same $SRV.PING.<name>.
                metadata=self._live_metadata,
            ),
        )
        self._unlisten = self.storage.listen(self._show_storage)
        self._watch = asyncio.create_task(self.storage.watch(), name=f"{self.name}-storage-watch")
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

    def _show_storage(self, _problems: object) -> None:
        value = self.storage.metadata()
        if value:
            self._live_metadata[STORAGE_METADATA] = value
        else:
            self._live_metadata.pop(STORAGE_METADATA, None)

    async def stop(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._held is not None:
            # First: requests cancelled below are answered by nobody, so their callers must stop seeing
            # them claimed and send them again (to another instance, or to this service once restarted).
            await self._held.stop()
        if self._service is not None:
            # A connection that is already closed has no subscriptions left; the handlers still need stopping.
            with contextlib.suppress(ConnectionClosedError):
                await self._service.stop()
            self._service = None
        # Cancelled once: a handler ends by itself even if its cancellation is lost, and one that finishes a
        # shielded store write after it must not be cut off by a second one.
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _stats(self, stats: EndpointStats) -> Any:
        """Put this endpoint's own counts into the stats nats.micro is about to send (``stats_handler``)."""
        ep = next((e for e in self._endpoints if e.verb == stats.name and e.subject == stats.subject), None)
        if ep is None:
            return stats.data
        stats.num_requests = ep.num_requests
        stats.num_errors = ep.num_errors
        stats.processing_time = ep.processing_time
        stats.average_processing_time = ep.processing_time // ep.num_answered if ep.num_answered else 0
        stats.last_error = ep.last_error or None
        return {"in_flight": ep.num_requests - ep.num_answered}

    def _dispatcher(self, ep: _Endpoint) -> Callable[[Request], Awaitable[None]]:
        decoder = decoder_for(ep.request_type)
        limit = asyncio.Semaphore(ep.concurrency)

        async def serve(request: Request, request_id: str | None, received: int) -> None:
            try:
                async with limit:
                    error = await _answer(request, decoder, ep, self._loaded)
                ep.num_answered += 1
                ep.processing_time += time.perf_counter_ns() - received
                if error is not None:
                    ep.num_errors += 1
                    ep.last_error = error
            finally:
                if request_id is not None and held is not None:
                    held.release(request_id)

        held = self._held

        async def dispatch(request: Request) -> None:
            # Held from receipt (a request queued behind ``limit`` is held too) until it is answered.
            received = time.perf_counter_ns()
            ep.num_requests += 1
            request_id = (request.headers or {}).get(REQUEST_ID_HEADER)
            if request_id is not None and held is not None:
                held.hold(request_id)
            task = asyncio.create_task(serve(request, request_id, received))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return dispatch


def _unwritable_file(exc: Exception) -> StorageFull | None:
    """``exc`` as a lack of space at the file it names (an ``OSError`` with ``ENOSPC`` and a file name), or None."""
    for link in (exc, exc.__cause__, exc.__context__):
        if isinstance(link, OSError) and link.filename:
            return storage_full(link, str(link.filename))
    return None


async def _answer(request: Request, decoder: msgspec.json.Decoder[Any], ep: _Endpoint,
                  loaded: asyncio.Future[None] | None = None) -> str | None:
    """Handle and answer one request once ``loaded`` (if any) is done; the error it was answered with
    (``code: message``), if any."""
    reply: ErrorReply | None = None
    try:
        if loaded is not None:
            await asyncio.shield(loaded)  # one request cancelled while it waits must not cancel the others' wait
        try:
            payload = decoder.decode(request.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ServiceFailure.bad_request(f"invalid {ep.verb} payload: {exc}") from None
        body = encode(await ep.handler(payload))
    except ServiceFailure as failure:
        reply = failure.to_reply()
    except StorageFull as full:
        reply = ErrorReply(code=ErrorCode.STORAGE_FULL, message=str(full), details={"path": full.path})
    except Exception as exc:
        unwritable = _unwritable_file(exc)
        if unwritable is not None:
            # A handler that met a full disk where it writes a file (a worktree, a record): the service says so in
            # its health and its caller gets the typed error, whatever handler it was.
            STORAGE.report(unwritable)
            reply = ErrorReply(code=ErrorCode.STORAGE_FULL, message=str(unwritable),
                               details={"path": unwritable.path})
        else:
            log.exception("%s failed", ep.subject)
            reply = ErrorReply(code=ErrorCode.INTERNAL, message=f"{type(exc).__name__}: {exc}")
    try:
        if reply is None:
            try:
                await request.respond(body)
                return None
            except MaxPayloadError:
                # An answer the bus cannot carry (a list asked for whole, say): the caller gets a typed refusal now,
                # not a timeout later, and can ask for less.
                reply = ErrorReply(code=ErrorCode.BAD_REQUEST,
                                   message=f"the answer to this {ep.verb} request ({len(body):,} bytes) is over the "
                                           "message bus's size limit: ask for less (a smaller page: limit, offset)",
                                   details={"reply_bytes": len(body)})
                log.warning("%s: answer of %d bytes over the bus's limit; refused as bad_request", ep.subject,
                            len(body))
        # The micro-protocol error headers (so ``nats micro`` tools see the error too), and our code.
        await request.respond_error(
            _HTTP_LIKE.get(reply.code, "500"),
            reply.message[:1000].replace("\r", " ").replace("\n", " "),
            data=encode(reply),
            headers={"Autarch-Error": reply.code},
        )
        return f"{reply.code}: {reply.message[:1000]}"
    except ValueError:  # no reply subject (a publish, not a request): nobody to answer
        return None if reply is None else f"{reply.code}: {reply.message[:1000]}"
    except Exception as exc:  # the connection is gone; an idempotent request is sent again once no one holds it
        log.warning("could not answer %s", ep.subject, exc_info=True)
        return f"reply not sent: {type(exc).__name__}: {exc}"
