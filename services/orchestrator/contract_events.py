"""Translation of the Workflow aggregate's stored events into the wire events of ``contracts.events``."""

from __future__ import annotations

from eventsourcing.domain import DomainEvent

from autarch.contracts.events import Event, WorkflowCreated, WorkflowError
from autarch.contracts.workflows import WorkflowView

from .domainmodel import Workflow

__all__ = ["to_contract", "view_of"]


def to_contract(domain_event: DomainEvent) -> Event | None:
    """The wire event for ``domain_event``; None for an event that is not distributed."""
    wf = str(domain_event.originator_id)
    if isinstance(domain_event, Workflow.Created):
        return WorkflowCreated(
            workflow_id=wf,
            occurred_at=domain_event.timestamp,
            title=domain_event.title,
            request=domain_event.request,
            repo=domain_event.repo,
            base_branch=domain_event.base_branch,
        )
    if isinstance(domain_event, Workflow.ErrorRecorded):
        return WorkflowError(
            workflow_id=wf, occurred_at=domain_event.timestamp, stage=domain_event.stage, message=domain_event.message
        )
    return None


def view_of(workflow: Workflow) -> WorkflowView:
    """The client-facing state of ``workflow``."""
    return WorkflowView(
        id=str(workflow.id),
        title=workflow.title,
        request=workflow.request,
        repo=workflow.repo,
        base_branch=workflow.base_branch,
        stage=workflow.stage,
        awaiting_approval=workflow.awaiting_approval,
        created_at=workflow.created_on,
        updated_at=workflow.modified_on,
        version=workflow.version,
        last_error=workflow.last_error,
    )
