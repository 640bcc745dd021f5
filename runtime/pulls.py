"""A pull consumer that hands out each message as it comes, whatever became of earlier pull requests.

nats-py's ``fetch`` sends every pull request with the same reply inbox and takes whatever comes there next as
the answer to its own request. A status left over from an earlier request (a ``408 Request Timeout`` that lands
just after the client's own timeout gave up: the server's ``expires`` is the client's timeout less 100 µs, so
any latency loses the race, as on a machine busy restarting a killed service) is then read as the end of the
new request. ``fetch`` answers with a second, lingering request and leaves the first one pending; from then on
an extra request is always outstanding on the server, and a message it captures (it is the oldest) is held by
``fetch`` while it waits for the rest of its batch, until the request expires or its own timeout passes: turn
events reached the driver 1-5 s late for the rest of the process's life.

Here each pull request has its own reply subject (``<inbox>.<n>``) under one wildcard subscription, so a status
is matched to the request it ends and a stale one is ignored; every message is handed out as soon as it comes,
never held back for a batch to fill; and an idle heartbeat tells a request the server has lost (a restarted
nats-server) within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api
from nats.js.errors import NotFoundError

from .retry import PULL_REQUEST, retry

__all__ = ["PullConsumer", "next_within"]

log = logging.getLogger(__name__)

_HEARTBEAT = "100"


class PullConsumer:
    """Follows the durable pull consumer ``config.durable_name`` of ``stream`` and awaits ``handle`` on each
    message, one at a time, in delivery order (``handle`` acknowledges it)."""

    def __init__(self, nc: Client, *, stream: str, config: api.ConsumerConfig, handle: Callable[[Msg], Awaitable[None]],
                 batch: int = 32, expires: float = 5.0, heartbeat: float = 1.0) -> None:
        self.nc, self.stream, self.config, self.handle = nc, stream, config, handle
        self.batch, self.expires, self.heartbeat = batch, expires, heartbeat
        self._queue: asyncio.Queue[Msg] = asyncio.Queue()
        self._sub: Subscription | None = None
        self._inbox = ""

    async def start(self) -> None:
        """Create the consumer if it is missing (as ``pull_subscribe`` does) and subscribe to its replies."""
        js = self.nc.jetstream()
        name = self.config.durable_name
        assert name is not None
        try:
            await js.consumer_info(self.stream, name)
        except NotFoundError:
            await js.add_consumer(self.stream, config=self.config)
        self._inbox = self.nc.new_inbox()

        async def put(msg: Msg) -> None:
            self._queue.put_nowait(msg)

        self._sub = await self.nc.subscribe(f"{self._inbox}.*", cb=put)

    async def stop(self) -> None:
        """Unsubscribe; messages received but not handled are not acknowledged, so JetStream hands them out again."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def run(self) -> None:
        """Pull and handle messages until cancelled."""
        subject = f"{api.DEFAULT_PREFIX}.CONSUMER.MSG.NEXT.{self.stream}.{self.config.durable_name}"
        loop = asyncio.get_running_loop()
        number = 0
        request = json.dumps({"batch": self.batch, "expires": int(self.expires * 1e9),
                              "idle_heartbeat": int(self.heartbeat * 1e9)}).encode()

        async def pull() -> str:
            nonlocal number
            number += 1
            reply = f"{self._inbox}.{number}"  # a new reply subject per sending
            await self.nc.publish(subject, request, reply=reply)
            return reply

        while True:
            # Disconnected: the client reconnects meanwhile.
            reply = await retry(pull, policy=PULL_REQUEST, name=f"pull consumer {self.config.durable_name}",
                                retry_on=lambda exc: True)
            # The request ends with its status (408 expired, 404/409 …), its batch delivered, or silence: no
            # heartbeat for two intervals means the server lost it (restarted), and a new one is sent.
            deadline = loop.time() + self.expires + self.heartbeat
            heard = loop.time()
            delivered = 0
            while delivered < self.batch:
                timeout = min(deadline, heard + 2 * self.heartbeat) - loop.time()
                msg = await self._next(timeout)
                if msg is None:
                    break
                status = _status(msg)
                if status is None:
                    # A stream message arrives under its own subject, not the request's reply subject, so which
                    # request it answers cannot be told: each one counts for the current request. (Counted only
                    # when it came on the reply subject, none ever was: past the first batch the consumer then
                    # waited out two heartbeats per batch, 16 messages a second.) Counting one of an earlier
                    # request only sends the next request sooner; every message is handled as it comes anyway.
                    delivered += 1
                    heard = loop.time()
                    await self.handle(msg)
                    continue
                if msg.subject != reply:
                    continue  # the end of an earlier request: stale
                heard = loop.time()
                if status != _HEARTBEAT:
                    break

    async def _next(self, timeout: float) -> Msg | None:
        return await next_within(self._queue, timeout)


async def next_within(queue: asyncio.Queue[Msg], timeout: float) -> Msg | None:
    """The next message of ``queue``: at once if one waits, else within ``timeout`` seconds (None: none came)."""
    if not queue.empty():
        return queue.get_nowait()
    if timeout <= 0:
        return None
    try:
        return await asyncio.wait_for(queue.get(), timeout)
    except TimeoutError:
        return None


def _status(msg: Msg) -> str | None:
    """The status code of a JetStream status message (heartbeat, request end); None for a stream message."""
    if msg.data or not msg.headers:
        return None
    return msg.headers.get("Status")
