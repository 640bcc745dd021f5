"""The orchestrator service: workflow endpoints on NATS, the event relay, the in-memory read model."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from eventsourcing.domain import DomainEvent
from nats.aio.client import Client

from autarch.contracts.events import Event
from autarch.contracts.subjects import PARTITION_METADATA
from autarch.contracts.workflows import (
    CreateWorkflow,
    GetWorkflow,
    ListWorkflows,
    ReplayedWorkflow,
    ReplayWorkflow,
    WorkflowList,
    WorkflowView,
)
from autarch.runtime import sqlite_store
from autarch.runtime.bus import ensure_event_stream
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.eventstore import describe_store, event_store_env
from autarch.runtime.leases import LeaseTable
from autarch.runtime.micro import TypedService
from autarch.runtime.relay import EventRelay
from autarch.runtime.relay_leader import LeadingRelay, store_key
from autarch.runtime.settings import OrchestratorSettings, narrow

from .application import WorkflowApplication
from .book import Book
from .contract_events import to_contract, view_of
from .domainmodel import Workflow
from .driver import WorkflowDriver
from .loop_book import LoopBook, register_loops
from .loop_driver import LoopDriver
from .loop_model import LoopSession
from .loop_views import loop_to_contract
from .mail_book import MailBook, mail_to_contract, register_mail
from .mail_model import Mailbox
from .partition import Partition
from .replay import replay
from .steps import needs_driving
from .swarm_book import SwarmBook, register_beads
from .swarm_driver import SwarmDriver
from .swarm_model import Swarm
from .swarm_views import swarm_to_contract
from .verbs import register_lifecycle
from .writer import BatchedWriter

__all__ = ["Orchestrator", "start"]

log = logging.getLogger("orchestrator")

R = TypeVar("R")


@dataclass
class Orchestrator:
    """Handles the commands of each workflow one at a time (a lock per workflow) and keeps every workflow's view."""

    app: WorkflowApplication
    writer: BatchedWriter
    views: dict[str, WorkflowView] = field(default_factory=dict)
    """Read model: every workflow's current view, rebuilt from the store at start."""
    driver: WorkflowDriver | None = None
    """The ``WorkflowDriver`` that moves workflows along (None: record commands only, as in unit tests)."""

    unsettled: list[str] = field(default_factory=list)
    """Workflows that, when the views were loaded, still had a step for the driver (see :func:`needs_driving`)."""
    loops: LoopBook | None = None
    """Loop sessions (seed 001), kept in the same store; the agents' forwarded tools reach them through here."""
    book: Book[Workflow] = field(init=False)
    """The workflows' store, each workflow's latest state kept between commands (``latest.py``)."""

    def __post_init__(self) -> None:
        # A workflow belongs to one partition: a save another writer won is a slip to surface, not to retry
        # (tests/orchestrator/test_latest_workflows.py holds it).
        self.book = Book(app=self.app, writer=self.writer, kind=Workflow, noun="workflow", id_field="workflow_id",
                         on_change=self._changed, conflict_retries=0, keep=1024, inline_reads=self.writer.inline,
                         log=log)

    def _changed(self, workflow: Workflow) -> None:
        self.views[str(workflow.id)] = view_of(workflow)
        if self.driver is not None:
            self.driver.kick(str(workflow.id))

    def load_views(self, owns: Callable[[str], bool] = lambda _: True) -> None:
        """Rebuild the views of the workflows ``owns`` (this partition's; by default all)."""
        for workflow_id in filter(owns, self.app.workflow_ids()):
            workflow = self.book.load(workflow_id)
            self.views[workflow_id] = view_of(workflow)
            if needs_driving(workflow):
                self.unsettled.append(workflow_id)

    async def create_workflow(self, command: CreateWorkflow) -> WorkflowView:
        async with self.book.lock(command.workflow_id):
            existing = await self.book.find(command.workflow_id)
            if existing is None:
                workflow = Workflow(workflow_id=command.workflow_id, title=command.title, request=command.request,
                                    repo=command.repo, base_branch=command.base_branch, branch=command.branch,
                                    script=command.script)
                await self.book.save(command.workflow_id, workflow)
                return self.views[str(workflow.id)]
            # A create repeated with the same fields answers the recorded workflow; with others, a conflict.
            if not existing.same_request(title=command.title, request=command.request, repo=command.repo,
                                         base_branch=command.base_branch):
                raise ServiceFailure.conflict(f"workflow {command.workflow_id} already exists with other fields",
                                              workflow_id=command.workflow_id)
            view = self.views[str(existing.id)] = view_of(existing)
        if self.driver is not None:
            self.driver.kick(view.id)
        return view

    async def read(self, workflow_id: str) -> Workflow:
        """The workflow as the store holds it; ``not_found`` for an unknown (or malformed) id.

        The workflow returned is shared with every other reader: read it only (a change goes through
        :meth:`change`, which works on its own copy).
        """
        return await self.book.read(workflow_id)

    async def change(self, workflow_id: str, command: Callable[[Workflow], R]) -> tuple[Workflow, R]:
        """Run ``command`` on the workflow under its lock and save what it recorded; (workflow, its result).

        A ``LifecycleError`` becomes a typed error with nothing saved (the loaded copy is dropped).
        """
        return await self.book.change(workflow_id, command)

    async def get_workflow(self, query: GetWorkflow) -> WorkflowView:
        view = self.views.get(query.workflow_id)
        if view is None:
            raise ServiceFailure.not_found(f"no workflow {query.workflow_id}", workflow_id=query.workflow_id)
        return view

    async def list_workflows(self, query: ListWorkflows) -> WorkflowList:
        items = list(self.views.values())
        return WorkflowList(items=items[query.offset : query.offset + query.limit], total=len(items))

    async def replay_workflow(self, query: ReplayWorkflow) -> ReplayedWorkflow:
        try:
            return await asyncio.to_thread(replay, self.app, query.workflow_id, at=query.at)
        except LookupError:
            raise ServiceFailure.not_found(f"no workflow {query.workflow_id}", workflow_id=query.workflow_id) from None


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
    app = WorkflowApplication(env=env)
    log.info("event store: %s%s", describe_store(env),
             f" (partition {part.index} of {part.count})" if part.split else "")
    await ensure_event_stream(nc, duplicate_window=settings.duplicate_window, replicas=settings.stream_replicas)
    book: LoopBook | None = None
    beads: SwarmBook | None = None

    def wire(domain_event: DomainEvent) -> Event | None:
        if isinstance(domain_event, LoopSession.Event):
            assert book is not None
            return loop_to_contract(domain_event, book.settled_of)
        if isinstance(domain_event, Swarm.Event):
            assert beads is not None
            return swarm_to_contract(domain_event, beads.epic_of, beads.at_event)
        if isinstance(domain_event, Mailbox.Event):
            return mail_to_contract(domain_event)
        return to_contract(domain_event)

    relay = EventRelay(app=app, nc=nc, to_contract=wire)
    # Partitions share the store, so one relay runs between all of them (whoever holds its lease).
    leading = (await LeadingRelay.open(relay, nc, store=store_key(env), replicas=settings.stream_replicas,
                                       holder=f"{settings.instance or 'orchestrator'}{part.suffix}",
                                       ttl=settings.leader_ttl)
               if part.split else None)
    writer = BatchedWriter(app=app, after_save=relay.wake if leading is None else leading.wake,
                           inline=sqlite_store.commits_inline(env))
    orchestrator = Orchestrator(app=app, writer=writer)
    book = LoopBook(app=app, writer=writer, nc=nc, settings=settings)
    orchestrator.loops = book
    beads = SwarmBook(app=app, writer=writer)
    mail = MailBook(app=app, writer=writer, nc=nc)
    leases = await open_leases(nc, settings)
    if leases is not None:
        beads.live_leases = leases.leases
    await asyncio.to_thread(orchestrator.load_views, part.owns)
    await asyncio.to_thread(book.load_views, part.owns)
    unfinished_epics = await asyncio.to_thread(beads.load, part.owns)
    log.info("rebuilt %d workflows and %d loop sessions from the event store", len(orchestrator.views),
             len(book.views))
    writer.start()
    if leading is None:
        relay.start()
    else:
        leading.start()
    service = TypedService(nc, name="orchestrator", description="Workflows, pulses and their state machines",
                           subject_of=part.subject, metadata={PARTITION_METADATA: f"{part.index}/{part.count}"})
    service.endpoint("create_workflow", CreateWorkflow, orchestrator.create_workflow)
    service.endpoint("get_workflow", GetWorkflow, orchestrator.get_workflow)
    service.endpoint("list_workflows", ListWorkflows, orchestrator.list_workflows)
    service.endpoint("replay_workflow", ReplayWorkflow, orchestrator.replay_workflow)
    register_lifecycle(service, orchestrator)
    register_loops(service, book)
    register_beads(service, beads)
    register_mail(service, mail)
    driver = WorkflowDriver(nc=nc, orchestrator=orchestrator, settings=settings, partition=part)
    loops = LoopDriver(nc=nc, book=book, settings=settings, partition=part)
    swarms = SwarmDriver(nc=nc, book=beads, settings=settings, leases=leases)
    if settings.drive_workflows:
        orchestrator.driver = driver
        book.driver = loops
        driver.swarm = swarms
        swarms.workflows = driver
        swarms.mail = mail
        beads.driver = swarms
    await service.start()
    if settings.drive_workflows:
        await driver.start(orchestrator.unsettled)
        await loops.start(book.unsettled)
        await swarms.start(unfinished_epics)

    async def stop() -> None:
        await service.stop()
        await swarms.stop()
        await driver.stop()
        await loops.stop()
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
        app.close()

    return stop
