"""Hot standbys for stateful services: of several instances, only the holder of the service lease runs.

The orchestrator (its per-workflow mailboxes and read model), the agent runner (its sessions and budget
totals), the indexer (its jobs) and the notifier (its outbox workers) keep state in process memory that two
live instances would each get wrong. With ``instance`` set (``autarch up --cluster`` names them
``orchestrator-1``, ``orchestrator-2``, …), such a service first takes the lease ``service.<name>``
(:mod:`autarch.runtime.leadership`), then opens its store and serves; the other instances wait. When the
leader dies its lease lapses after ``leader_ttl`` and a standby starts, rebuilding everything from the shared
store exactly as a restarted process would (resumed turns, unsettled workflows). A leader that loses its lease
(another instance took it while this one could not renew) exits at once, so two never act together; its
supervisor starts it again as a standby. Without ``instance`` the service starts as before.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client

from .leadership import LeaderLease, open_leaders
from .process import Starter

__all__ = ["LOST_LEASE_EXIT", "exclusive"]

log = logging.getLogger(__name__)

LOST_LEASE_EXIT = 75
"""Exit status of a leader that lost its lease (the supervisor restarts it as a standby)."""


def exclusive(name: str, start: Starter) -> Starter:
    """``start`` run only while this instance holds the lease of service ``name`` (when ``instance`` is set)."""

    async def guarded(nc: Client, settings: Any) -> Callable[[], Awaitable[None]]:
        if not settings.instance:
            return await start(nc, settings)
        started: list[Callable[[], Awaitable[None]]] = []
        leases: list[LeaderLease] = []
        keepers: list[asyncio.Task[None]] = []

        def lost() -> None:
            log.error("%s lost the %s lease: exiting so that only the new leader acts", settings.instance, name)
            os._exit(LOST_LEASE_EXIT)

        async def lead() -> None:
            # In the background: a standby must still stop at once on SIGTERM while it waits.
            while True:  # the bucket may be electing its leader (a NATS node just died): wait for it
                try:
                    kv = await open_leaders(nc, replicas=settings.stream_replicas)
                    break
                except Exception as exc:
                    log.warning("%s: leader bucket unavailable (%s); retrying", settings.instance, exc)
                    await asyncio.sleep(settings.leader_ttl / 5)
            lease = LeaderLease(kv=kv, key=f"service.{name}", holder=settings.instance, ttl=settings.leader_ttl)
            leases.append(lease)
            if await _holder(lease) not in (None, settings.instance):
                log.info("%s: standby (another instance leads %s)", settings.instance, name)
            await lease.acquire()
            log.info("%s: leads %s; starting", settings.instance, name)
            # Renewing from now on, while the store is opened and rebuilt (which may take longer than the TTL).
            keeper = asyncio.create_task(lease.keep(lost), name=f"keep-{name}")
            keepers.append(keeper)
            try:
                started.append(await start(nc, settings))
            except Exception:
                # Nobody awaits this task: fail the process as a failed start would, and let it be restarted.
                log.exception("%s: %s did not start", settings.instance, name)
                os._exit(1)
            await keeper

        task = asyncio.create_task(lead(), name=f"lead-{name}")

        async def stop() -> None:
            for running in (task, *keepers):
                running.cancel()
            await asyncio.gather(task, *keepers, return_exceptions=True)
            if started:
                await started[0]()
                await leases[0].release()  # a graceful stop hands over at once

        return stop

    return guarded


async def _holder(lease: LeaderLease) -> str | None:
    try:
        return await lease.holder_now()
    except Exception:  # only for the log line
        return None
