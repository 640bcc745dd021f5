"""The workflows' book: each workflow's commands one at a time, and every workflow's view (the read model)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from autarch.contracts.workflows import (
    CreateWorkflow,
    ForkWorkflow,
    GetWorkflow,
    ListWorkflows,
    ReplayedWorkflow,
    ReplayWorkflow,
    WorkflowList,
    WorkflowView,
)
from autarch.runtime.errors import ServiceFailure

from ..application import WorkflowApplication
from ..book import Book, ignore
from ..kept_views import KeptViews, view_shape
from ..replay import replay
from ..writer import BatchedWriter
from .forks import fork_point, forked_history, record_fork
from .model import Workflow
from .state import HaltDetails
from .steps import needs_driving
from .views import view_of

__all__ = ["WorkflowBook"]

log = logging.getLogger("orchestrator")

R = TypeVar("R")


@dataclass
class WorkflowBook:
    """Handles the commands of each workflow one at a time (a lock per workflow) and keeps every workflow's view."""

    app: WorkflowApplication
    writer: BatchedWriter
    views: dict[str, WorkflowView] = field(default_factory=dict)
    """Read model: every workflow's current view, rebuilt from the store at start."""
    kick: Callable[[str], None] = ignore
    """Wakes the workflow driver for a workflow whose state changed (``ignore``: nobody drives them)."""
    review_fix_rounds: int = 3
    """Fix rounds a workflow's review may send back to execution (the ``review_fix_rounds`` setting)."""
    unsettled: list[str] = field(default_factory=list)
    """Workflows that, when the views were loaded, still had a step for the driver (see :func:`needs_driving`)."""
    from_kept: int = 0
    """How many views the last :meth:`load_views` took from the kept views (the others were replayed)."""
    kept: KeptViews = field(default_factory=lambda: KeptViews(None))
    """The views of settled workflows kept on disk, which a start-up reads instead of replaying them
    (``kept_views.py``; by default none)."""
    book: Book[Workflow] = field(init=False)
    """The workflows' store, each workflow's latest state kept between commands (``latest.py``)."""

    def __post_init__(self) -> None:
        # A workflow belongs to one partition: a save another writer won is a slip to surface, not to retry
        # (tests/orchestrator/test_latest_workflows.py holds it).
        self.book = Book(app=self.app, writer=self.writer, kind=Workflow, noun="workflow", id_field="workflow_id",
                         on_change=self._changed, conflict_retries=0, keep=1024, inline_reads=self.writer.inline,
                         log=log)

    def _changed(self, workflow: Workflow) -> None:
        view = self.views[str(workflow.id)] = view_of(workflow)
        if not needs_driving(workflow):
            self.kept.put("workflow", view.id, workflow.version, _SHAPE, view)
        self.kick(str(workflow.id))

    def load_views(self, owns: Callable[[str], bool] = lambda _: True) -> None:
        """Rebuild the views of the workflows ``owns`` (this partition's; by default all): a settled workflow's
        from its kept view when nothing was recorded since, any other from its events."""
        kept = self.kept.current("workflow", WorkflowView, _SHAPE)
        for workflow_id in filter(owns, self.app.workflow_ids()):
            view = kept.get(workflow_id)
            if view is not None:
                self.from_kept += 1
                self.views[workflow_id] = view
                continue
            workflow = self.book.rebuild(workflow_id)  # kept only once the driver or a command reads it
            view = self.views[workflow_id] = view_of(workflow)
            if needs_driving(workflow):
                self.unsettled.append(workflow_id)
            else:
                self.kept.put("workflow", workflow_id, workflow.version, _SHAPE, view)  # the next start reads it

    async def create_workflow(self, command: CreateWorkflow) -> WorkflowView:
        async with self.book.lock(command.workflow_id):
            try:
                # An embedded store answers this read faster than a worker thread could be reached.
                workflow, is_new = (self.app.new_workflow(command) if self.writer.inline
                                    else await asyncio.to_thread(self.app.new_workflow, command))
            except ValueError as exc:
                raise ServiceFailure.conflict(str(exc), workflow_id=command.workflow_id) from None
            if is_new:
                await self.book.save(command.workflow_id, workflow)  # its view, and the driver's kick
                return self.views[str(workflow.id)]
            view = self.views[str(workflow.id)] = view_of(workflow)
        self.kick(view.id)  # a repeated create makes sure the workflow is moving
        return view

    async def fork_workflow(self, command: ForkWorkflow) -> WorkflowView:
        """Make ``command.workflow_id`` a fork of ``command.forked_from`` at its event ``command.at`` (``forks.py``).

        The original is only read. A repeated fork answers the recorded one; the id of any other workflow is a
        ``conflict``. An unknown original is ``not_found``, ``at`` past its events ``event_out_of_range``.
        """
        key = self.book.key(command.workflow_id)
        command = msgspec.structs.replace(command, workflow_id=key, forked_from=self.book.key(command.forked_from))
        async with self.book.lock(key):
            existing = await self.book.find(key)
            if existing is None:
                fork = await asyncio.to_thread(_fork, self.app, command)
                await self.book.save(key, fork)  # its view, and the driver's kick
                return self.views[key]
            if (existing.forked_from, existing.forked_at) != (command.forked_from, command.at):
                raise ServiceFailure.conflict(f"workflow {key} already exists and is not this fork", workflow_id=key)
            view = self.views[key] = view_of(existing)
        self.kick(key)  # a repeated fork makes sure the fork is moving
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

    async def finish_execution(self, workflow_id: str) -> None:
        """Every pulse (or bead) is done: on to review, with no approval (a repeat changes nothing)."""
        await self.change(workflow_id, Workflow.finish_execution)

    async def halt_execution(self, workflow_id: str, message: str) -> None:
        """Halt the workflow's execution for a person (``error``, with ``message``), unless it is halted already."""

        def record(w: Workflow) -> None:
            if w.halt is None:
                w.halt_for("error", message, details=HaltDetails(step="execution"))

        await self.change(workflow_id, record)

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


def _fork(app: WorkflowApplication, command: ForkWorkflow) -> Workflow:
    # Blocking reads of the original, in a worker thread.
    point = fork_point(app, command)
    fork = forked_history(app, command.forked_from, command.workflow_id, command.at)
    record_fork(fork, command, point.start_commit)
    return fork


_SHAPE = view_shape(view_of, WorkflowView, Workflow)
"""The code a kept view of a workflow is made by (``kept_views.view_shape``)."""
