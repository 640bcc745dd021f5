"""The orchestrator's eventsourcing application: workflows and loop sessions, in one store."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application

from autarch.contracts.workflows import CreateWorkflow
from autarch.runtime.aggregates import created_ids, load, topic_of

from .domainmodel import Workflow
from .loop_model import LoopSession
from .mail_model import Mailbox, mailbox_id_for
from .swarm_model import Swarm, swarm_id_for

__all__ = ["WorkflowApplication"]


class WorkflowApplication(Application[UUID]):
    """Records workflows; every method is a pure function of the event store (no hidden state)."""

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
        workflow = load(self, UUID(workflow_id), version=version)
        if not isinstance(workflow, Workflow):  # a loop session's id: the same store holds both
            raise AggregateNotFoundError(workflow_id)
        return workflow

    def workflow_ids(self) -> Iterator[str]:
        """Every recorded workflow id, in creation order, read from the notification log."""
        return created_ids(self.recorder, _CREATED_TOPIC)

    def get_loop(self, session_id: str, *, version: int | None = None) -> LoopSession:
        """Rebuild one loop session from its events (only its first ``version`` events when given)."""
        session = load(self, UUID(session_id), version=version)
        if not isinstance(session, LoopSession):
            raise AggregateNotFoundError(session_id)
        return session

    def loop_ids(self) -> Iterator[str]:
        """Every recorded loop session id, in creation order."""
        return created_ids(self.recorder, _LOOP_CREATED_TOPIC)

    def get_swarm(self, workflow_id: str, *, version: int | None = None) -> Swarm:
        """The epic of one workflow rebuilt from its events; ``AggregateNotFoundError`` when it has none."""
        swarm = load(self, swarm_id_for(workflow_id), version=version)
        if not isinstance(swarm, Swarm):
            raise AggregateNotFoundError(workflow_id)
        return swarm

    def swarm_at(self, swarm_id: UUID, version: int) -> Swarm:
        swarm = load(self, swarm_id, version=version)
        assert isinstance(swarm, Swarm)
        return swarm

    def swarm_workflow_ids(self) -> Iterator[str]:
        """The workflow of every recorded epic, in creation order."""
        for swarm_id in created_ids(self.recorder, _SWARM_CREATED_TOPIC):
            yield self.get_swarm_by_id(swarm_id).workflow_id

    def get_mailbox(self, epic_id: str, *, version: int | None = None) -> Mailbox:
        """The coordination mail of one epic rebuilt from its events; ``AggregateNotFoundError`` when it has none."""
        mailbox = load(self, mailbox_id_for(epic_id), version=version)
        if not isinstance(mailbox, Mailbox):
            raise AggregateNotFoundError(epic_id)
        return mailbox

    def get_swarm_by_id(self, swarm_id: str) -> Swarm:
        swarm = load(self, UUID(swarm_id))
        assert isinstance(swarm, Swarm)
        return swarm


_CREATED_TOPIC = topic_of(Workflow.Created)
_LOOP_CREATED_TOPIC = topic_of(LoopSession.Started)
_SWARM_CREATED_TOPIC = topic_of(Swarm.Started)
