"""``/healthz``: NATS and each expected service, by ``$SRV.PING``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from nats.aio.client import Client

from autarch.contracts.http import Health, ServiceHealth

__all__ = ["check_health", "ping_service"]


async def ping_service(nc: Client, name: str, *, wait: float = 0.25, expect: int = 1) -> int:
    """How many instances of ``name`` answer a ``$SRV.PING`` within ``wait`` seconds (counting stops a moment after
    the ``expect``-th answer)."""
    inbox = nc.new_inbox()
    answers = 0
    got_one = asyncio.Event()

    async def on_reply(_msg: object) -> None:
        nonlocal answers
        answers += 1
        if answers >= expect:
            got_one.set()

    sub = await nc.subscribe(inbox, cb=on_reply)
    try:
        await nc.publish(f"$SRV.PING.{name}", b"", reply=inbox)
        try:
            await asyncio.wait_for(got_one.wait(), wait)
            await asyncio.sleep(0.02)  # let other instances' answers arrive
        except TimeoutError:
            pass
    finally:
        await sub.unsubscribe()
    return answers


async def check_health(nc: Client | None, services: list[str], *, needed: Mapping[str, int] | None = None) -> Health:
    """``needed``: instances a service must have answering to be ok (default 1): the orchestrator, one per
    partition (each partition is served by one instance at a time, so a partition between two holders is down)."""
    needed = needed or {}
    if nc is None or not nc.is_connected:
        return Health(
            status="degraded",
            nats=False,
            services={name: ServiceHealth(ok=False, instances=0) for name in services},
        )
    counts = await asyncio.gather(*(ping_service(nc, name, expect=needed.get(name, 1)) for name in services))
    result = {name: ServiceHealth(ok=count >= needed.get(name, 1), instances=count)
              for name, count in zip(services, counts, strict=True)}
    status = "ok" if all(s.ok for s in result.values()) else "degraded"
    return Health(status=status, nats=True, services=result)
