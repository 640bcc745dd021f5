"""The orchestrator's eventsourcing application: workflows, loop sessions, epics and mail, in one store."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application

from autarch.contracts.workflows import CreateWorkflow
from autarch.runtime.aggregates import created_ids, load_as, topics_of

from .loop.model import LoopSession
from .mail.model import Mailbox, mailbox_id_for
from .swarm.model import Swarm, swarm_id_for
from .workflow.model import Workflow

__all__ = ["WorkflowApplication"]


class WorkflowApplication(Application[UUID]):
    """Records workflows, loop sessions, epics and their mail; every method is a pure function of the event store
    (no hidden state)."""

    name = "orchestrator"

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
        return load_as(self, Workflow, UUID(workflow_id), version=version)

    def workflow_ids(self) -> Iterator[str]:
        """Every recorded workflow id, in creation order, read from the notification log."""
        return created_ids(self.recorder, _CREATED_TOPICS)

    def get_loop(self, session_id: str, *, version: int | None = None) -> LoopSession:
        """Rebuild one loop session from its events (only its first ``version`` events when given)."""
        return load_as(self, LoopSession, UUID(session_id), version=version)

    def loop_ids(self) -> Iterator[str]:
        """Every recorded loop session id, in creation order."""
        return created_ids(self.recorder, _LOOP_CREATED_TOPICS)

    def get_swarm(self, workflow_id: str, *, version: int | None = None) -> Swarm:
        """The epic of one workflow rebuilt from its events; ``AggregateNotFoundError`` when it has none."""
        return load_as(self, Swarm, swarm_id_for(workflow_id), version=version)

    def swarm_at(self, swarm_id: UUID, version: int) -> Swarm:
        return load_as(self, Swarm, swarm_id, version=version)

    def swarm_workflow_ids(self) -> Iterator[str]:
        """The workflow of every recorded epic, in creation order."""
        for swarm_id in created_ids(self.recorder, _SWARM_CREATED_TOPICS):
            yield self.get_swarm_by_id(swarm_id).workflow_id

    def get_mailbox(self, epic_id: str, *, version: int | None = None) -> Mailbox:
        """The coordination mail of one epic rebuilt from its events; ``AggregateNotFoundError`` when it has none."""
        return load_as(self, Mailbox, mailbox_id_for(epic_id), version=version)

    def get_swarm_by_id(self, swarm_id: str) -> Swarm:
        return load_as(self, Swarm, UUID(swarm_id))


# Each with the topics of earlier versions, stored before the aggregates moved (``recorded_as``).
_CREATED_TOPICS = topics_of(Workflow.Created)
_LOOP_CREATED_TOPICS = topics_of(LoopSession.Started)
_SWARM_CREATED_TOPICS = topics_of(Swarm.Started)
