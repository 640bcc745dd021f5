"""The orchestrator's eventsourcing application: workflow commands and queries."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application

from autarch.contracts.workflows import CreateWorkflow

from .domainmodel import Workflow

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
        )
        return workflow, True

    def get_workflow(self, workflow_id: str, *, version: int | None = None) -> Workflow:
        """Rebuild one workflow from its events (only its first ``version`` events when given)."""
        return self.repository.get(UUID(workflow_id), version=version, projector_func=_project)

    def workflow_ids(self) -> Iterator[str]:
        """Every recorded workflow id, in creation order, read from the notification log."""
        start = 1
        while True:
            batch = self.recorder.select_notifications(start=start, limit=1000, topics=[_CREATED_TOPIC])
            for notification in batch:
                yield str(notification.originator_id)
            if len(batch) < 1000:
                return
            start = batch[-1].id + 1


def _project(aggregate: Any, events: Iterable[Any]) -> Any:
    # eventsourcing's default projector asserts isinstance() against a runtime-checkable Protocol for
    # every event, which on Python 3.11 costs more than decoding and applying the event together.
    for domain_event in events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


_CREATED_TOPIC = f"{Workflow.Created.__module__}:{Workflow.Created.__qualname__}"
