"""Translation of the Workflow aggregate's stored events into the wire events of ``contracts.events``."""

from __future__ import annotations

from eventsourcing.domain import DomainEvent

from autarch.contracts.events import (
    Event,
    WorkflowApprovalNeeded,
    WorkflowBaselineRecorded,
    WorkflowChangesRequested,
    WorkflowCompleted,
    WorkflowCreated,
    WorkflowError,
    WorkflowNoteTaken,
    WorkflowReviewCommentAdded,
    WorkflowStageChanged,
)
from autarch.contracts.workflows import WorkflowView

from .domainmodel import Workflow

__all__ = ["to_contract", "view_of"]


def to_contract(domain_event: DomainEvent) -> Event | None:
    """The wire event for ``domain_event``; None for an event that is not distributed."""
    base = {"workflow_id": str(domain_event.originator_id), "occurred_at": domain_event.timestamp}
    e = domain_event
    if isinstance(e, Workflow.Created):
        return WorkflowCreated(**base, title=e.title, request=e.request, repo=e.repo, base_branch=e.base_branch)
    if isinstance(e, Workflow.ErrorRecorded):
        return WorkflowError(**base, stage=e.stage, message=e.message)
    if isinstance(e, Workflow.ArtifactSubmitted):
        return WorkflowApprovalNeeded(**base, stage=e.stage, artifact=e.artifact)
    if isinstance(e, Workflow.StageChanged):
        return WorkflowStageChanged(**base, from_stage=e.from_stage, to_stage=e.to_stage, path=e.path)
    if isinstance(e, Workflow.Completed):
        return WorkflowCompleted(**base, recommendation=e.recommendation)
    if isinstance(e, Workflow.ChangesRequested):
        return WorkflowChangesRequested(**base, stage=e.stage, feedback=e.feedback)
    if isinstance(e, Workflow.NoteTaken):
        return WorkflowNoteTaken(**base, note_id=e.note_id, stage=e.stage, session_id=e.session_id, note=e.note)
    if isinstance(e, Workflow.BaselineRecorded):
        return WorkflowBaselineRecorded(**base, **e.baseline)
    if isinstance(e, Workflow.ReviewCommentAdded):
        return WorkflowReviewCommentAdded(**base, **e.comment)
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
        path=workflow.path,  # type: ignore[arg-type]
        artifact_stages=list(workflow.artifacts),
        notes_count=len(workflow.notes),
        baselines_count=len(workflow.baselines),
        review_comments_count=len(workflow.review["comments"]) if workflow.review else 0,
        pulses_count=len(workflow.pulses),
        last_feedback=workflow.last_feedback,
    )
