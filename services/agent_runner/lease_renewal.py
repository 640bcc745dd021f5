"""Keeping a swarm worker's file leases alive while one of its turns runs, and only then.

The renewal is a task bound to the turn's task: it starts with the turn, renews the holder's leases at once
and every ``lease_ttl / 3`` after, and is cancelled when the turn ends (completed, stopped, or the runner
shutting down). A runner that dies takes the task with it, so the worker's leases lapse ``lease_ttl`` later
and its files are free for others: that is the point of renewing here rather than granting long leases.
A renewal that fails (NATS away for a moment) is logged and tried again at the next tick; two missed ticks
still leave a third of the ttl.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from autarch.runtime.cancel import cancel_and_wait
from autarch.runtime.leases import LeaseTable

__all__ = ["renewing_leases"]

log = logging.getLogger("agent_runner")


async def _renew_forever(table: LeaseTable, *, scope: str, holder: str, ttl: float) -> None:
    while True:
        try:
            moved = await table.renew(scope, holder, ttl)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("renewing the file leases of %s in %s failed: %s", holder, scope, exc)
        else:
            if not moved:
                log.debug("%s holds no live file leases in %s to renew", holder, scope)
        await asyncio.sleep(ttl / 3)


@asynccontextmanager
async def renewing_leases(
    table: LeaseTable | None, *, scope: str | None, holder: str | None, ttl: float
) -> AsyncIterator[None]:
    """Renew ``holder``'s leases in ``scope`` for as long as the block runs (nothing when any is missing)."""
    if table is None or not scope or not holder:
        yield
        return
    task = asyncio.create_task(_renew_forever(table, scope=scope, holder=holder, ttl=ttl),
                               name=f"leases-{holder}")
    try:
        yield
    finally:
        await cancel_and_wait([task])
