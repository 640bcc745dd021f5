"""The orchestrator service: its books, drivers and endpoints on NATS, and the event relay, wired once at start."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.aio.client import Client

from autarch.contracts.beads import REQUEST_SCOPE_VERB, RequestScope
from autarch.contracts.subjects import PARTITION_METADATA
from autarch.contracts.workflows import (
    CreateWorkflow,
    GetWorkflow,
    ListWorkflows,
    ReplayWorkflow,
)
from autarch.runtime import sqlite_store
from autarch.runtime.bus import ensure_event_stream
from autarch.runtime.eventstore import describe_store, event_store_env, store_path
from autarch.runtime.leases import LeaseTable
from autarch.runtime.micro import TypedService
from autarch.runtime.relay import EventRelay
from autarch.runtime.relay_leader import LeadingRelay, store_key
from autarch.runtime.service_gate import gate_for
from autarch.runtime.settings import OrchestratorSettings, narrow
from autarch.runtime.storage import Reserve, embedded_stream_dir

from .application import WorkflowApplication
from .book import ignore
from .kept_views import kept_views_for
from .loop.book import LoopBook, register_loops
from .loop.driver import LoopDriver
from .mail.book import MailBook, register_mail
from .partition import Partition
from .stepping import Stepper
from .swarm.book import SwarmBook, register_beads
from .swarm.driver import SwarmDriver
from .wire import WireEvents
from .workflow.book import WorkflowBook
from .workflow.driver import WorkflowDriver
from .workflow.space import SpaceHalts
from .workflow.verbs import register_lifecycle
from .writer import BatchedWriter

__all__ = ["start"]

log = logging.getLogger("orchestrator")


async def open_leases(nc: Client, settings: OrchestratorSettings) -> LeaseTable | None:
    """The file-lease table (JetStream key-value); None, with a warning, when JetStream refuses it."""
    try:
        return await LeaseTable.open(nc, replicas=settings.stream_replicas)
    except Exception as exc:
        log.warning("file leases unavailable (%s): swarm workers run without enforced reservations", exc)
        return None


async def start(nc: Client, settings: OrchestratorSettings, partition: int = 0) -> Callable[[], Awaitable[None]]:
    """Open the store, rebuild the read model, start the relay and serve the endpoints (of one partition: see
    ``partition.py``; partition 0 of 1 is the whole orchestrator)."""
    settings = narrow(settings, OrchestratorSettings)
    part = Partition(partition, settings.orchestrator_partitions)
    env = event_store_env(settings, "orchestrator")
    app = WorkflowApplication(env=env, snapshot_every=settings.snapshot_every)
    log.info("event store: %s%s", describe_store(env),
             f" (partition {part.index} of {part.count})" if part.split else "")
    await ensure_event_stream(nc, duplicate_window=settings.duplicate_window, replicas=settings.stream_replicas)
    relay = EventRelay(app=app, nc=nc, to_contract=WireEvents(app), store_path=store_path(env),
                       stream_path=embedded_stream_dir(settings.data_path))
    # Partitions share the store, so one relay runs between all of them (whoever holds its lease).
    leading = (await LeadingRelay.open(relay, nc, store=store_key(env), replicas=settings.stream_replicas,
                                       holder=f"{settings.instance or 'orchestrator'}{part.suffix}",
                                       ttl=settings.leader_ttl)
               if part.split else None)
    # An embedded store keeps room aside beside its file, to record a workflow's halt on a full disk (space.py).
    reserve = (Reserve(Path(env["SQLITE_DBNAME"]).parent / "space-reserve") if env.get("SQLITE_DBNAME") else None)
    writer = BatchedWriter(app=app, after_save=relay.wake if leading is None else leading.wake,
                           inline=sqlite_store.commits_inline(env), store_path=store_path(env), reserve=reserve)
    leases = await open_leases(nc, settings)
    drive = settings.drive_workflows
    # Each driver's stepper comes first: the books kick it when something changed, the driver starts it.
    workflow_steps = Stepper(kind="workflow", log=logging.getLogger("orchestrator.driver"), gate=gate_for(nc))
    loop_steps = Stepper(kind="loop", log=logging.getLogger("orchestrator.loops"), gate=gate_for(nc))
    kept = kept_views_for(env)
    workflows = WorkflowBook(app=app, writer=writer, kick=workflow_steps.kick if drive else ignore,
                             review_fix_rounds=settings.review_fix_rounds, kept=kept)
    loops = LoopBook(app=app, writer=writer, nc=nc, settings=settings, kick=loop_steps.kick if drive else ignore,
                     kept=kept)
    epics = SwarmBook(app=app, writer=writer, kick=workflow_steps.kick if drive else ignore,
                      live_leases=leases.leases if leases is not None else None)
    mail = MailBook(app=app, writer=writer, nc=nc)
    await asyncio.to_thread(workflows.load_views, part.owns)
    await asyncio.to_thread(loops.load_views, part.owns)
    unfinished_epics = await asyncio.to_thread(epics.load, part.owns)
    log.info("read %d workflows and %d loop sessions from the event store (%d and %d settled ones from their kept "
             "views, the others replayed)", len(workflows.views), len(loops.views), workflows.from_kept,
             loops.from_kept)
    swarm_driver = SwarmDriver(nc=nc, book=epics, settings=settings, leases=leases, steps=workflow_steps,
                               finish_workflow=workflows.finish_execution, halt_workflow=workflows.halt_execution,
                               post_mail=mail.post)
    space = SpaceHalts(nc=nc, book=workflows, partition=part, reserve=reserve)
    workflow_driver = WorkflowDriver(nc=nc, book=workflows, settings=settings, partition=part, steps=workflow_steps,
                                     swarm=swarm_driver, no_space=space.halt)
    loop_driver = LoopDriver(nc=nc, book=loops, settings=settings, partition=part, steps=loop_steps)
    writer.start()
    if leading is None:
        relay.start()
    else:
        leading.start()
    service = TypedService(nc, name="orchestrator", description="Workflows, pulses and their state machines",
                           subject_of=part.subject, metadata={PARTITION_METADATA: f"{part.index}/{part.count}"})
    service.endpoint("create_workflow", CreateWorkflow, workflows.create_workflow)
    service.endpoint("get_workflow", GetWorkflow, workflows.get_workflow)
    service.endpoint("list_workflows", ListWorkflows, workflows.list_workflows)
    service.endpoint("replay_workflow", ReplayWorkflow, workflows.replay_workflow)
    register_lifecycle(service, workflows, controls=workflow_driver if drive else None, loops=loops)
    register_loops(service, loops, abort=loop_driver.abort if drive else None)
    register_beads(service, epics)
    register_mail(service, mail)
    service.endpoint(REQUEST_SCOPE_VERB, RequestScope, swarm_driver.request_scope)
    await service.start()
    if drive:
        await space.start()
        await workflow_driver.start(workflows.unsettled)
        await loop_driver.start(loops.unsettled)
        await swarm_driver.start(unfinished_epics)

    async def stop() -> None:
        await service.stop()
        await space.stop()
        await swarm_driver.stop()
        await workflow_driver.stop()
        await loop_driver.stop()
        await writer.stop()
        if leading is not None:
            await leading.stop()  # publishes what is saved when it leads, and hands the relay over
        else:
            await relay.stop()
            # Publish what is already saved before leaving (what is left waits for the next start: nothing is lost).
            try:
                await asyncio.wait_for(relay.publish_pending(), timeout=5)
            except Exception as exc:
                log.warning("relay did not finish on stop: %s", exc)
        kept.close()
        app.close()

    return stop
