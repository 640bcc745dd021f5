"""The orchestrator's eventsourcing application: workflows, loop sessions, epics and mail, in one store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate

from autarch.contracts.workflows import CreateWorkflow
from autarch.runtime.aggregates import created_events, created_ids, topics_of
from autarch.runtime.snapshots import DEFAULT_EVERY, Snapshots

from .loop.model import LoopSession
from .mail.model import Mailbox, mailbox_id_for
from .swarm.model import Swarm, swarm_id_for
from .workflow.model import Workflow

__all__ = ["WorkflowApplication"]

A = TypeVar("A", bound=Aggregate)


class WorkflowApplication(Application[UUID]):
    """Records workflows, loop sessions, epics and their mail; every method is a pure function of the event store
    (no hidden state)."""

    name = "orchestrator"

    def __init__(self, env: dict[str, Any] | None = None, *, snapshot_every: int = DEFAULT_EVERY) -> None:
        """``snapshot_every``: events between two snapshots of an aggregate (0: none), the ``snapshot_every``
        setting."""
        super().__init__(env)
        self.snapshotter = Snapshots(self, snapshot_every)
        """Every rebuild of an aggregate goes through it (``Book.rebuild`` and the getters here)."""

    def load(self, kind: type[A], aggregate_id: UUID, *, version: int | None = None) -> A:
        """An aggregate of ``kind`` rebuilt from the store: its last snapshot and the events after it."""
        return self.snapshotter.load(kind, aggregate_id, version=version)

    def new_workflow(self, command: CreateWorkflow) -> tuple[Workflow, bool]:
        """The workflow ``command`` asks for and whether it is new (unsaved).

        A create repeated with the same id and fields returns the recorded workflow; the same id
        with other fields raises ValueError (the caller answers ``conflict``).
        """
        try:
            existing = self.get_workflow(command.workflow_id)
        except AggregateNotFoundError:
            pass
        else:
            fields = {"title": command.title, "request": command.request, "repo": command.repo,
                      "base_branch": command.base_branch}
            if not existing.same_request(**fields):
                raise ValueError(f"workflow {command.workflow_id} already exists with other fields")
            return existing, False
        workflow = Workflow(
            workflow_id=command.workflow_id,
            title=command.title,
            request=command.request,
            repo=command.repo,
            base_branch=command.base_branch,
            branch=command.branch,
            script=command.script,
        )
        return workflow, True

    def get_workflow(self, workflow_id: str, *, version: int | None = None) -> Workflow:
        """Rebuild one workflow from its events (only its first ``version`` events when given)."""
        return self.load(Workflow, UUID(workflow_id), version=version)

    def workflow_ids(self) -> Iterator[str]:
        """Every recorded workflow id, in creation order, read from the notification log."""
        return created_ids(self.recorder, _CREATED_TOPICS)

    def get_loop(self, session_id: str, *, version: int | None = None) -> LoopSession:
        """Rebuild one loop session from its events (only its first ``version`` events when given)."""
        return self.load(LoopSession, UUID(session_id), version=version)

    def loop_ids(self) -> Iterator[str]:
        """Every recorded loop session id, in creation order."""
        return created_ids(self.recorder, _LOOP_CREATED_TOPICS)

    def get_swarm(self, workflow_id: str, *, version: int | None = None) -> Swarm:
        """The epic of one workflow rebuilt from its events; ``AggregateNotFoundError`` when it has none."""
        return self.load(Swarm, swarm_id_for(workflow_id), version=version)

    def swarm_at(self, swarm_id: UUID, version: int) -> Swarm:
        return self.load(Swarm, swarm_id, version=version)

    def swarm_workflow_ids(self) -> Iterator[str]:
        """The workflow of every recorded epic, in creation order, read from each epic's first event (a start-up
        that keeps only its partition's epics does not rebuild everyone's)."""
        for notification in created_events(self.recorder, _SWARM_CREATED_TOPICS):
            yield self.mapper.to_domain_event(notification).workflow_id  # type: ignore[attr-defined]  # Started

    def get_mailbox(self, epic_id: str, *, version: int | None = None) -> Mailbox:
        """The coordination mail of one epic rebuilt from its events; ``AggregateNotFoundError`` when it has none."""
        return self.load(Mailbox, mailbox_id_for(epic_id), version=version)

    def get_swarm_by_id(self, swarm_id: str) -> Swarm:
        return self.load(Swarm, UUID(swarm_id))


# Each with the topics of earlier versions, stored before the aggregates moved (``recorded_as``).
_CREATED_TOPICS = topics_of(Workflow.Created)
_LOOP_CREATED_TOPICS = topics_of(LoopSession.Started)
_SWARM_CREATED_TOPICS = topics_of(Swarm.Started)
