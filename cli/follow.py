"""Following one workflow's events over SSE, across dropped connections, resuming after the last one seen.

``autarch watch`` and ``autarch demo`` both read ``GET /api/events?workflow=ID`` this way and differ only in
what they do with each event. A dropped connection is resumed from the last recorded event seen (``since``:
the SSE ``id:``, the JetStream sequence; live deltas carry no id and never move it), so nothing is missed or
seen twice. A connection is dropped when the gateway ends it (it is stopping), when its process dies (the
kernel closes the socket), or when nothing, not even a keep-alive, came for a while (its host is gone).
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from .gateway_client import CliError, GatewayClient, GatewayError, GatewayUnreachable
from .render import SseComment, parse_sse

__all__ = ["StreamLost", "WorkflowEvents"]

RETRIED_STATUSES = frozenset({502, 503, 504})
"""A gateway restarting (or not yet connected to NATS) answers these for a moment."""


@dataclass(frozen=True)
class StreamLost:
    """The stream broke; the follower waits a little, then reconnects after the last recorded event."""

    problem: str
    """What happened, for a message (``connection lost (ReadTimeout)``, ``the gateway closed the stream``)."""
    first: bool
    """Whether the outage just began (the previous attempt had a stream)."""
    remaining: float
    """Seconds of reconnecting left; at 0 or less the follower raises once the caller has seen this."""


class WorkflowEvents:
    """The events of one workflow from ``GET /api/events``, over as many connections as it takes.

    Iterating yields each recorded (or live) event as a dict, its ``type`` set from the SSE event name when
    the payload has none; every SSE comment (:class:`~.render.SseComment`: ``connected`` opens each
    connection, ``keep-alive`` comes while nothing else does); and a :class:`StreamLost` each time the
    stream broke, before the wait to reconnect. Stop by leaving the loop; :meth:`close` (or ``with``) ends
    the connection at once.

    Raises:
        GatewayUnreachable: nothing answered the first connection.
        GatewayError: the gateway refused the stream (a 502/503/504 after a first connection is retried).
        CliError: no stream again within ``reconnect_for`` seconds of losing one.
    """

    def __init__(self, client: GatewayClient, workflow_id: str, *, since: int | None = None, deltas: bool = False,
                 reconnect_for: float = 60.0, read_timeout: float | None = None) -> None:
        """
        Args:
            client: the gateway.
            workflow_id: the workflow to follow.
            since: resume after this event id (``0``: from the workflow's first event); ``None``: new events
                only, until an event is seen.
            deltas: also the live text and thinking deltas (unrecorded, without an id).
            reconnect_for: seconds to keep reconnecting after the stream broke before giving up.
            read_timeout: seconds of silence after which a stream counts as dead (default: the client's
                :attr:`~.gateway_client.GatewayClient.sse_read_timeout`).
        """
        self.client = client
        self.workflow_id = workflow_id
        self.since = since
        """The id of the last recorded event seen: where the next connection resumes."""
        self.deltas = deltas
        self.reconnect_for = reconnect_for
        self.read_timeout = read_timeout
        self.connected = False
        """Whether a stream was ever open (before that, failures are not retried)."""
        self._items = self._follow()

    def __iter__(self) -> WorkflowEvents:
        return self

    def __next__(self) -> dict[str, Any] | SseComment | StreamLost:
        return next(self._items)

    def close(self) -> None:
        self._items.close()

    def __enter__(self) -> WorkflowEvents:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _follow(self) -> Generator[dict[str, Any] | SseComment | StreamLost]:
        import httpx

        lost_at: float | None = None  # when the current outage began
        while True:
            try:
                with self.client.events(workflow=self.workflow_id, since=self.since, deltas=self.deltas,
                                        read_timeout=self.read_timeout) as lines:
                    for message in parse_sse(lines):
                        if isinstance(message, SseComment):
                            if message.text == "connected":
                                self.connected, lost_at = True, None
                            yield message
                            continue
                        if message.id and message.id.isdigit():
                            self.since = int(message.id)
                        try:
                            event = json.loads(message.data)
                        except ValueError:
                            continue
                        if not isinstance(event, dict):
                            continue
                        event.setdefault("type", message.event)
                        yield event
                problem = "the gateway closed the stream"
            except GatewayUnreachable as exc:
                if not self.connected:
                    raise
                problem = exc.message
            except GatewayError as exc:
                if not self.connected or exc.status not in RETRIED_STATUSES:
                    raise
                problem = exc.message
            except httpx.HTTPError as exc:
                problem = f"connection lost ({type(exc).__name__})"
            now = time.monotonic()
            first = lost_at is None
            if lost_at is None:
                lost_at = now
            remaining = self.reconnect_for - (now - lost_at)
            yield StreamLost(problem, first=first, remaining=remaining)
            if remaining <= 0:
                raise CliError(f"{problem}; gave up after {self.reconnect_for:g}s of reconnecting")
            # Never past the deadline: the last attempt is made at it, so giving up is not late.
            time.sleep(min(2.0, 0.25 + (now - lost_at) / 4, remaining))
