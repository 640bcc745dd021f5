"""The floor of SSE fan-out on this machine (a script, not a test): the least a Python server can do per event.

    python tests/benchmarks/sse_floor.py --nats nats://127.0.0.1:4222 --port 8123 [--loop auto|uvloop|asyncio]

A reference for the ``sse_fanout`` curve, not a gateway: it answers every connection at once (no authentication, no
routes, no catch-up, no back-pressure, no keep-alive), follows the whole event stream with one ordered consumer and
the live deltas with one subscription, and writes the messages to every connected socket in one tight loop of
``transport.write``, on one event loop. It gathers them over the gateway's window (the same constants of
:mod:`autarch.gateway.fanout`: 20 µs a connection, at least 1 ms, at most 20 ms) and joins and frames them once, as
the gateway does: written one by one as they come, a thousand clients of a busy workflow (125 messages a second) are
125,000 writes a second, more than two cores can make, and the floor falls seconds behind (p50 4.4 s at a thousand
clients). With no window but the loop's own turn, p50 fell to 11 ms and p99 rose to 138 ms, against 31 and 77 ms
with it (one run each, load ~2). Whatever it costs per event at N clients is the price of N socket writes (and of
the clients' kernel receiving them on the same cores), which no Python gateway built on asyncio can go below. The
bytes on the wire are the gateway's (``id:``, ``event:``, ``data:`` and the ``: connected`` comment), so the
benchmark's clients read both alike. :mod:`sse_fanout` runs it beside ``autarch up`` with ``--reference floor``.
It runs on the event loop the gateway's server picks (``--loop auto``: uvloop when it is installed, as uvicorn does),
so the two pay the same loop's price per write.

Below it, :func:`kernel_floor`: what the kernel alone asks of one burst, a plain Python loop of non-blocking
``socket.send`` of the same bytes to N connected loopback sockets, no event loop at all (the least any Python server
pays per window, whatever it is built on).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import time
from collections.abc import Callable

import nats
from nats.aio.msg import Msg

HEADERS = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
           b"transfer-encoding: chunked\r\n\r\n")


def chunk(body: bytes) -> bytes:
    """``body`` as one chunk of a chunked HTTP response."""
    return b"%x\r\n%s\r\n" % (len(body), body)


class Clients(asyncio.Protocol):
    """One connection: live once its request has come; forgotten when it closes."""

    live: dict[asyncio.Transport, None] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.request = b""

    def data_received(self, data: bytes) -> None:
        self.request += data
        if b"\r\n\r\n" in self.request and self.transport not in Clients.live:
            self.transport.write(HEADERS + chunk(b": connected\r\n\r\n"))  # type: ignore[attr-defined]  # a socket transport
            Clients.live[self.transport] = None  # type: ignore[index]  # a socket transport

    def connection_lost(self, exc: Exception | None) -> None:
        Clients.live.pop(self.transport, None)  # type: ignore[call-overload]  # a socket transport


class Window:
    """The messages gathered since the last write."""

    bodies: list[bytes] = []
    handle: asyncio.Handle | None = None


def send_all(body: bytes) -> None:
    from autarch.gateway.fanout import WAKE_WINDOW_MAX, WAKE_WINDOW_MIN, WAKE_WINDOW_PER_MEMBER

    Window.bodies.append(body)
    if Window.handle is None:
        loop = asyncio.get_running_loop()
        window = max(WAKE_WINDOW_MIN, min(WAKE_WINDOW_MAX, len(Clients.live) * WAKE_WINDOW_PER_MEMBER))
        Window.handle = loop.call_later(window, flush)


def flush() -> None:
    framed = chunk(b"".join(Window.bodies))
    Window.bodies, Window.handle = [], None
    for transport in Clients.live:
        transport.write(framed)


async def serve(nats_url: str, port: int) -> None:
    from autarch.contracts import subjects

    nc = await nats.connect(nats_url)
    js = nc.jetstream()

    async def on_event(msg: Msg) -> None:
        event_type = (msg.headers or {}).get("Autarch-Event") or subjects.event_type_from_subject(msg.subject)
        send_all(b"id: %d\r\nevent: %s\r\ndata: %s\r\n\r\n" % (msg.metadata.sequence.stream, event_type.encode(),
                                                                 msg.data))

    async def on_delta(msg: Msg) -> None:
        kind = b"turn:thought_delta" if b'"turn:thought_delta"' in msg.data else b"turn:message_delta"
        send_all(b"event: %s\r\ndata: %s\r\n\r\n" % (kind, msg.data))

    await js.subscribe(subjects.EVENTS_ALL, stream=subjects.EVENTS_STREAM, cb=on_event, ordered_consumer=True,
                       deliver_policy=nats.js.api.DeliverPolicy.NEW)
    await nc.subscribe(subjects.DELTAS_ALL, cb=on_delta, pending_msgs_limit=65536)
    await nc.flush()
    server = await asyncio.get_running_loop().create_server(Clients, "127.0.0.1", port, backlog=4096)
    print("serving", flush=True)
    async with server:
        await server.serve_forever()


def loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``loop`` names (``auto``: uvloop when installed, as uvicorn's ``loop="auto"``); None:
    asyncio's."""
    if loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if loop == "uvloop":
            raise
        return None
    return uvloop.new_event_loop


def kernel_floor(size: int, body: bytes, *, bursts: int = 100) -> dict[str, float]:
    """p50/p99 milliseconds of one burst: ``body`` (one window's chunk) sent once to each of ``size`` connected
    loopback sockets, non-blocking, in a plain loop; the receiving ends are drained between bursts, untimed."""
    with socket.create_server(("127.0.0.1", 0), backlog=4096) as server:
        port = server.getsockname()[1]
        clients, ends = [], []
        try:
            for _ in range(size):
                clients.append(socket.create_connection(("127.0.0.1", port)))
                end, _ = server.accept()
                end.setblocking(False)
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                ends.append(end)
            framed = chunk(body)
            times = []
            for _ in range(bursts):
                started = time.perf_counter()
                for end in ends:
                    end.send(framed)
                times.append((time.perf_counter() - started) * 1000)
                for client in clients:
                    client.recv(1 << 16)
        finally:
            for sock in clients + ends:
                sock.close()
    times.sort()
    return {"clients": size, "burst_p50_ms": round(statistics.median(times), 3),
            "burst_p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 3),
            "per_send_us": round(statistics.median(times) * 1000 / size, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nats", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    args = parser.parse_args()
    factory = loop_factory(args.loop)
    if factory is None:
        asyncio.run(serve(args.nats, args.port))
    else:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(args.nats, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
