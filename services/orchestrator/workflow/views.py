"""Translation of the Workflow aggregate's stored events into the wire events of ``contracts.events``."""

from __future__ import annotations

from typing import Any

import msgspec
from eventsourcing.domain import DomainEvent

from autarch.contracts.events import (
    Event,
    PreflightCompleted,
    PreflightStarted,
    PulseCompleted,
    PulseCompletionRejected,
    PulseStarted,
    WorkflowAbandoned,
    WorkflowApprovalNeeded,
    WorkflowBaselineRecorded,
    WorkflowChangesRequested,
    WorkflowCompleted,
    WorkflowCreated,
    WorkflowError,
    WorkflowFixRoundOpened,
    WorkflowHalted,
    WorkflowNoteTaken,
    WorkflowResumed,
    WorkflowReviewCommentAdded,
    WorkflowSessionAssigned,
    WorkflowStageChanged,
)
from autarch.contracts.execution import HaltView
from autarch.contracts.workflows import FixPulseView, WorkflowView

from .model import Workflow
from .state import Halt

__all__ = ["to_contract", "view_of"]


def to_contract(domain_event: DomainEvent) -> Event | None:
    """The wire event for ``domain_event``; None for an event that is not distributed."""
    base: dict[str, Any] = {"workflow_id": str(domain_event.originator_id), "occurred_at": domain_event.timestamp}
    e = domain_event
    if isinstance(e, Workflow.Created):
        return WorkflowCreated(**base, title=e.title, request=e.request, repo=e.repo, base_branch=e.base_branch)
    if isinstance(e, Workflow.ErrorRecorded):
        return WorkflowError(**base, stage=e.stage, message=e.message)
    if isinstance(e, Workflow.ArtifactSubmitted):
        return WorkflowApprovalNeeded(**base, stage=e.stage, artifact=e.artifact, version=e.originator_version)
    if isinstance(e, Workflow.StageChanged):
        return WorkflowStageChanged(**base, from_stage=e.from_stage, to_stage=e.to_stage, path=e.path,
                                    source=getattr(e, "source", None))
    if isinstance(e, Workflow.Completed):
        return WorkflowCompleted(**base, recommendation=e.recommendation)
    if isinstance(e, Workflow.ChangesRequested):
        return WorkflowChangesRequested(**base, stage=e.stage, feedback=e.feedback, fix=getattr(e, "fix", False),
                                        source=getattr(e, "source", None))
    if isinstance(e, Workflow.FixRoundOpened):
        return WorkflowFixRoundOpened(**base, round=e.number, feedback=e.feedback, comment_ids=e.comment_ids,
                                      pulses=msgspec.convert(e.pulses, list[FixPulseView]))
    if isinstance(e, Workflow.PlanBounced):
        # The check, not the user, sent the plan back: its feedback names each bounced bead and its gaps.
        return WorkflowChangesRequested(**base, stage="planning", feedback=e.feedback)
    if isinstance(e, Workflow.NoteTaken):
        return WorkflowNoteTaken(**base, note_id=e.note_id, stage=e.stage, session_id=e.session_id, note=e.note)
    if isinstance(e, Workflow.BaselineRecorded):
        return WorkflowBaselineRecorded(**base, **e.baseline)
    if isinstance(e, Workflow.ReviewCommentAdded):
        return WorkflowReviewCommentAdded(**base, **e.comment)
    return _execution_contract(e, base)


def _execution_contract(e: DomainEvent, base: dict[str, Any]) -> Event | None:
    if isinstance(e, Workflow.SessionAssigned):
        return WorkflowSessionAssigned(**base, step=e.step, session_id=e.session_id, role=e.role)
    if isinstance(e, Workflow.Halted):
        return WorkflowHalted(**base, stage=e.stage, reason=e.reason, message=e.message, pulse_id=e.pulse_id,
                              details=e.details, version=e.originator_version)
    if isinstance(e, Workflow.Resumed):
        return WorkflowResumed(**base, stage=e.stage, reason=e.reason, message=e.message,
                               source=getattr(e, "source", None))
    if isinstance(e, Workflow.Abandoned):
        return WorkflowAbandoned(**base, stage=e.stage, reason=e.reason, source=getattr(e, "source", None))
    if isinstance(e, Workflow.ExecutionPrepared):
        return PreflightStarted(**base, branch=e.branch, worktree_path=e.worktree_path, base_commit=e.base_commit)
    if isinstance(e, Workflow.PreflightCompleted):
        return PreflightCompleted(**base, status=e.status, summary=e.summary, setup_commands=e.setup_commands,
                                  build_success=e.build_success, baselines_recorded=e.baselines_recorded,
                                  error=e.error)
    if isinstance(e, Workflow.PulseStarted):
        run = e.run
        return PulseStarted(**base, pulse_id=run["id"], planned_pulse_id=run["planned_pulse_id"],
                            attempt=run["attempt"], title=run["title"], pulse_branch=run["pulse_branch"],
                            base_commit=run["base_commit"], fix_round=run.get("fix_round"))
    if isinstance(e, Workflow.PulseCompletionRejected):
        return PulseCompletionRejected(**base, pulse_id=e.run_id, rejections=e.rejections, failures=e.failures,
                                       escape_hatch=e.escape_hatch)
    if isinstance(e, Workflow.PulseEnded):
        return PulseCompleted(**base, pulse_id=e.run_id, status=e.status, commit=e.commit,
                              diff_artifact_id=e.diff_artifact_id, description=e.description,
                              files_changed=e.files_changed, has_unresolved_issues=bool(e.unresolved_issues),
                              unresolved_issues=e.unresolved_issues, is_recovery_checkpoint=e.is_recovery_checkpoint,
                              failure_reason=e.failure_reason)
    return None


def _halt_view(halt: Halt, version: int | None) -> HaltView:
    return HaltView(reason=halt.reason, message=halt.message, pulse_id=halt.pulse_id,
                    details=msgspec.to_builtins(halt.details), version=version)


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
        path=workflow.path,
        artifact_stages=workflow.artifacts.stages(),
        notes_count=len(workflow.notes),
        baselines_count=len(workflow.baselines),
        review_comments_count=len(workflow.review.comments) if workflow.review else 0,
        pulses_count=len(workflow.pulses),
        last_feedback=workflow.last_feedback,
        status=workflow.status,
        halt=_halt_view(workflow.halt, workflow.halt_version) if workflow.halt else None,
        card_version=workflow.card_version if workflow.awaiting_approval else None,
        branch=workflow.execution.branch if workflow.execution else None,
        worktree_path=None if not workflow.execution or workflow.worktree_removed
        else workflow.execution.worktree_path,
        # The plan's pulses, as ``pulses_count`` counts them (a fix round's are in the artifacts' pulse runs).
        pulses_succeeded=sum(1 for r in workflow.runs if r.status == "succeeded" and r.fix_round is None),
        current_pulse=running.id if (running := workflow.running_run()) is not None else None,
        sessions={step: s.session_id for step, s in workflow.sessions.items()},
        fix_rounds=len(workflow.fix_rounds),
        forked_from=workflow.forked_from,
        forked_at=workflow.forked_at,
    )
