"""Waiting for a service that nobody answers: one probe per service instead of one retry loop per caller.

When a service has no instance (stopped, restarting, not started), every caller that needs it used to retry on
its own: a thousand workflows waiting for the agent runner meant a thousand request loops, each re-reading its
workflow, and that load slowed everything else in the process. A :class:`ServiceGate` (one per connection)
remembers which services answered "no responders"; callers then wait on the gate, costing nothing, while a
single probe pings the service (``$SRV.PING.<service>``, which every instance answers) until one answers,
and then all of them go on at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref

from nats.aio.client import Client
from nats.errors import Error as NatsError

from .retry import REQUEST_UNAVAILABLE

__all__ = ["ServiceGate", "gate_for"]

_PING_TIMEOUT = 0.5


class ServiceGate:
    """Which services are known to have no instance, and the wait until one appears."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._up: dict[str, asyncio.Event] = {}
        self._probes: set[asyncio.Task[None]] = set()

    def is_down(self, service: str) -> bool:
        return service in self._up

    def mark_down(self, service: str) -> None:
        """``service`` answered no request: probe it until an instance answers (one probe however many call)."""
        if service in self._up:
            return
        up = self._up[service] = asyncio.Event()
        task = asyncio.create_task(self._probe(service, up), name=f"probe-{service}")
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def until_up(self, service: str, timeout: float | None = None) -> bool:
        """Wait until ``service`` is not known to be down (at most ``timeout`` s); True if it is up."""
        up = self._up.get(service)
        if up is None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(up.wait(), timeout)
        return up.is_set()

    async def _probe(self, service: str, up: asyncio.Event) -> None:
        try:
            for delay in REQUEST_UNAVAILABLE.delays():
                try:
                    await self._nc.request(f"$SRV.PING.{service}", b"", timeout=_PING_TIMEOUT)
                    return
                except (NatsError, TimeoutError):
                    # No responders, a timeout, or the connection reconnecting: ask again after the pause.
                    await asyncio.sleep(delay)
        finally:
            # Released whatever happened (an instance answered, or the probe was cancelled at shutdown):
            # callers then try for themselves, as they would without a gate.
            self._up.pop(service, None)
            up.set()


_GATES: weakref.WeakKeyDictionary[Client, ServiceGate] = weakref.WeakKeyDictionary()


def gate_for(nc: Client) -> ServiceGate:
    """The connection's gate (shared by every caller on it)."""
    gate = _GATES.get(nc)
    if gate is None:
        gate = _GATES[nc] = ServiceGate(nc)
    return gate
