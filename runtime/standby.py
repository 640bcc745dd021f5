"""Hot standbys for stateful services: of several instances, only the holder of the service lease runs.

The orchestrator (its per-workflow locks and read model), the agent runner (its sessions and budget
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
from nats.js.kv import KeyValue

from .cancel import cancel_and_wait
from .leadership import LeaderLease, open_leaders
from .process import Starter, settle_heap

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
            kv = await _leaders(nc, settings)
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
            settle_heap(collect=False)  # what starting built: a standby's process froze only its imports
            await keeper

        task = asyncio.create_task(lead(), name=f"lead-{name}")

        async def stop() -> None:
            await cancel_and_wait([task, *keepers])
            if started:
                await started[0]()
                await leases[0].release()  # a graceful stop hands over at once

        return stop

    return guarded


async def _leaders(nc: Client, settings: Any) -> KeyValue:
    """The leader bucket, waited for: it may be electing its leader (a NATS node just died)."""
    while True:
        try:
            return await open_leaders(nc, replicas=settings.stream_replicas)
        except Exception as exc:
            log.warning("%s: leader bucket unavailable (%s); retrying", settings.instance, exc)
            await asyncio.sleep(settings.leader_ttl / 5)


async def _holder(lease: LeaderLease) -> str | None:
    try:
        return await lease.holder_now()
    except Exception:  # only for the log line
        return None


PartitionStarter = Callable[[Client, Any, int], Awaitable[Callable[[], Awaitable[None]]]]
"""``start(nc, settings, partition)``: start one partition of a service; returns its stop."""


def partitioned(name: str, start: PartitionStarter) -> Starter:
    """``start`` run once per partition this instance holds the lease of (``orchestrator_partitions`` of them).

    With one partition this is :func:`exclusive`. With several, each partition ``k`` has the lease
    ``service.<name>.p<k>``; an instance takes every free one, but waits ``leader_ttl / 2`` longer per partition it
    already holds before taking another, so instances started together share them out (two instances, two
    partitions: one each) and a survivor takes over a dead instance's partitions once their leases lapse. There is
    no rebalancing: a restarted instance stays a standby until a partition is free again (a graceful stop of its
    holder frees them at once). Without ``instance`` (one process) every partition runs here.
    """
    whole = exclusive(name, lambda nc, settings: start(nc, settings, 0))

    async def guarded(nc: Client, settings: Any) -> Callable[[], Awaitable[None]]:
        count = settings.orchestrator_partitions
        if count == 1:
            return await whole(nc, settings)
        if not settings.instance:
            stops = [await start(nc, settings, k) for k in range(count)]

            async def stop_all() -> None:
                for stop in stops:
                    await stop()

            return stop_all
        holding: dict[int, Callable[[], Awaitable[None]]] = {}
        leases: dict[int, LeaderLease] = {}
        runs: list[asyncio.Task[None]] = []

        def lost(k: int) -> None:
            log.error("%s lost the %s partition %d lease: exiting so that only the new holder acts",
                      settings.instance, name, k)
            os._exit(LOST_LEASE_EXIT)

        async def run(k: int) -> None:
            log.info("%s: holds %s partition %d of %d; starting it", settings.instance, name, k, count)
            keeper = asyncio.create_task(leases[k].keep(lambda: lost(k)), name=f"keep-{name}-p{k}")
            runs.append(keeper)
            try:
                holding[k] = await start(nc, settings, k)
            except Exception:
                log.exception("%s: %s partition %d did not start", settings.instance, name, k)
                os._exit(1)
            settle_heap(collect=False)  # what starting this partition built (see process.settle_heap)

        async def lead() -> None:
            kv = await _leaders(nc, settings)
            for k in range(count):
                leases[k] = LeaderLease(kv=kv, key=f"service.{name}.p{k}", holder=settings.instance,
                                        ttl=settings.leader_ttl)
            taken: set[int] = set()
            while len(taken) < count:
                # One partition at a time, so that the wait below counts every lease already taken.
                for k in range(count):
                    if k in taken or await _holder(leases[k]) not in (None, settings.instance):
                        continue
                    # The more this instance holds, the longer it leaves a free partition to the others.
                    await asyncio.sleep(len(taken) * settings.leader_ttl / 2)
                    try:
                        won = await leases[k].try_acquire()
                    except Exception as exc:  # a lost race, the bucket electing its leader: try again later
                        log.debug("%s: partition %d: %r", settings.instance, k, exc)
                        won = False
                    if won:
                        taken.add(k)
                        runs.append(asyncio.create_task(run(k), name=f"run-{name}-p{k}"))
                await asyncio.sleep(settings.leader_ttl / 5)

        task = asyncio.create_task(lead(), name=f"lead-{name}-partitions")

        async def stop() -> None:
            await cancel_and_wait([task, *runs])
            for k, stop_partition in list(holding.items()):
                await stop_partition()
                await leases[k].release()  # a graceful stop hands over at once

        return stop

    return guarded
