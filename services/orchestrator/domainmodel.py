"""The Workflow aggregate: read this file and you know every event a workflow can record.

Command methods (``submit_artifact``, ``approve``, …) check the rules of ``lifecycle`` first and
raise ``LifecycleError`` before anything is triggered, so a refused command records nothing.
The ``@event`` methods only apply state: replaying them rebuilds the workflow exactly.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from autarch.contracts.workflows import WorkflowErrorCode

from .lifecycle import ARTIFACT_STAGES, LifecycleError, next_stage, quick_pulse, validate_plan

__all__ = ["STAGES", "Workflow"]

STAGES = ("scoping", "research", "planning", "execution", "review", "done")
"""Seed 003's stages, in order."""


def _empty_review() -> dict[str, Any]:
    return {"comments": [], "recommendation": None, "summary": None}


class Workflow(Aggregate):
    """A user's request for a change, taken through the stages to a reviewed branch."""

    @staticmethod
    def create_id(workflow_id: str, **_: object) -> UUID:
        # The caller chooses the id (a UUID) so that a retried create is recognised, not doubled.
        return UUID(workflow_id)

    @event("Created")
    def __init__(self, *, workflow_id: str, title: str, request: str, repo: str, base_branch: str) -> None:
        self.title = title
        self.request = request
        self.repo = repo
        self.base_branch = base_branch
        self.stage = "scoping"
        self.awaiting_approval = False
        self.last_error: str | None = None
        self.error_count = 0
        self.path: str | None = None
        self.artifacts: dict[str, dict[str, Any]] = {}
        self.pulses: list[dict[str, Any]] = []
        self.review: dict[str, Any] | None = None
        self.notes: list[dict[str, Any]] = []
        self.baselines: list[dict[str, Any]] = []
        self.feedback: list[dict[str, str]] = []
        self.last_feedback: str | None = None
        self.seen: dict[str, Any] = {}
        """Idempotency key → what the first delivery answered (tool calls may be delivered twice)."""

    # --- events -------------------------------------------------------------------------------------

    @event("ErrorRecorded")
    def record_error(self, *, stage: str, message: str) -> None:
        """Something failed; the workflow stays in its stage (seed 003: workflow:error)."""
        self.last_error = message
        self.error_count += 1

    @event("ArtifactSubmitted")
    def _artifact_submitted(self, *, stage: str, artifact: dict[str, Any], key: str | None) -> None:
        self.awaiting_approval = True
        self.last_feedback = None
        if stage == "review":
            assert self.review is not None
            self.review.update(artifact)
            self.artifacts["review"] = self.review
        else:
            self.artifacts[stage] = artifact
        if key:
            self.seen[key] = stage

    @event("StageChanged")
    def _stage_changed(self, *, from_stage: str, to_stage: str, path: str | None) -> None:
        self.stage = to_stage
        self.awaiting_approval = False
        self.last_feedback = None
        if from_stage == "scoping":
            self.path = path
        if to_stage == "execution":
            plan = self.artifacts.get("planning")
            self.pulses = copy.deepcopy(plan["pulses"]) if plan else [quick_pulse(self.artifacts["scoping"])]
        if to_stage == "review":
            self.review = _empty_review()

    @event("Completed")
    def _completed(self, *, recommendation: str | None) -> None:
        pass  # the stage is already "done"; the event tells subscribers the workflow is finished

    @event("ChangesRequested")
    def _changes_requested(self, *, stage: str, feedback: str) -> None:
        self.awaiting_approval = False
        self.last_feedback = feedback
        self.feedback.append({"stage": stage, "feedback": feedback})

    @event("NoteTaken")
    def _note_taken(self, *, note_id: str, stage: str, session_id: str, note: str, taken_at: str, key: str) -> None:
        self.notes.append({"note_id": note_id, "stage": stage, "session_id": session_id, "note": note,
                           "taken_at": taken_at})
        self.seen[key] = note_id

    @event("BaselineRecorded")
    def _baseline_recorded(self, *, baseline: dict[str, Any], key: str) -> None:
        self.baselines.append(baseline)
        self.seen[key] = baseline["baseline_id"]

    @event("ReviewCommentAdded")
    def _review_comment_added(self, *, comment: dict[str, Any], key: str) -> None:
        assert self.review is not None
        self.review["comments"].append(comment)
        self.seen[key] = comment["comment_id"]

    # --- commands -----------------------------------------------------------------------------------

    def submit_artifact(self, stage: str, artifact: dict[str, Any], *, key: str | None = None) -> bool:
        """Record the card of ``stage`` and wait for the user; False when ``key`` was already seen."""
        if key and key in self.seen:
            return False
        if stage not in ARTIFACT_STAGES:
            raise LifecycleError.wrong_stage(self.stage, stage, "this artifact")
        if self.stage != stage:
            if stage == "review":
                raise LifecycleError.not_found("review card not found: the workflow is not in review",
                                               stage=self.stage)
            raise LifecycleError.wrong_stage(self.stage, stage, f"the {stage} artifact")
        if self.awaiting_approval:
            raise LifecycleError(WorkflowErrorCode.AWAITING_APPROVAL,
                                 f"the {stage} artifact already awaits approval; request changes before resubmitting",
                                 stage=stage)
        if stage == "planning":
            validate_plan(artifact["pulses"])
        self._artifact_submitted(stage=stage, artifact=artifact, key=key)
        return True

    def approve(self, path: str | None = None) -> None:
        """Approve the waiting card: move to the next stage (at scoping, on the chosen path)."""
        if not self.awaiting_approval:
            raise LifecycleError(WorkflowErrorCode.NOT_AWAITING_APPROVAL,
                                 f"nothing awaits approval in the {self.stage} stage", stage=self.stage)
        if path is not None and self.stage != "scoping":
            raise LifecycleError(WorkflowErrorCode.WRONG_STAGE,
                                 f"the path is chosen at scope approval; the workflow is in {self.stage}",
                                 stage=self.stage)
        if self.stage == "scoping":
            path = path or self.artifacts["scoping"].get("recommended_path") or "full"
        from_stage = self.stage
        to_stage = next_stage(from_stage, path)
        self._stage_changed(from_stage=from_stage, to_stage=to_stage, path=path)
        if to_stage == "done":
            self._completed(recommendation=(self.review or {}).get("recommendation"))

    def request_changes(self, feedback: str) -> None:
        """Send the waiting card back with ``feedback``; the agent revises and resubmits."""
        if not self.awaiting_approval:
            raise LifecycleError(WorkflowErrorCode.NOT_AWAITING_APPROVAL,
                                 f"nothing awaits approval in the {self.stage} stage", stage=self.stage)
        self._changes_requested(stage=self.stage, feedback=feedback)

    def finish_execution(self) -> bool:
        """Every pulse is done: go to review with no approval. False when already past execution (a retry)."""
        if self.stage in ("review", "done"):
            return False
        if self.stage != "execution":
            raise LifecycleError.wrong_stage(self.stage, "execution", "finishing execution")
        self._stage_changed(from_stage="execution", to_stage="review", path=self.path)
        return True

    def take_note(self, *, session_id: str, note: str, key: str) -> str:
        """Store a note for the current stage; the note id (the first one's, for a repeated ``key``)."""
        if key in self.seen:
            return str(self.seen[key])
        note_id = str(uuid.uuid4())
        self._note_taken(note_id=note_id, stage=self.stage, session_id=session_id, note=note,
                         taken_at=datetime.now(UTC).isoformat(), key=key)
        return note_id

    def record_baseline(self, baseline: dict[str, Any], *, key: str) -> str:
        """Record a pre-existing issue (preflight runs at the start of execution); the baseline id."""
        if key in self.seen:
            return str(self.seen[key])
        if self.stage != "execution":
            raise LifecycleError.wrong_stage(self.stage, "execution", "recording a baseline (preflight)")
        baseline = {**baseline, "baseline_id": str(uuid.uuid4())}
        self._baseline_recorded(baseline=baseline, key=key)
        return str(baseline["baseline_id"])

    def add_review_comment(self, comment: dict[str, Any], *, key: str) -> str:
        """Add a comment to the open review card; ``not_found`` when there is none."""
        if key in self.seen:
            return str(self.seen[key])
        if self.stage != "review" or self.review is None:
            raise LifecycleError.not_found("review card not found: the workflow is not in review", stage=self.stage)
        if self.awaiting_approval:
            raise LifecycleError(WorkflowErrorCode.AWAITING_APPROVAL,
                                 "the review is complete and awaits approval; request changes to reopen it")
        comment = {**comment, "comment_id": str(uuid.uuid4())}
        self._review_comment_added(comment=comment, key=key)
        return str(comment["comment_id"])

    # --- queries ------------------------------------------------------------------------------------

    def approved_scope(self) -> dict[str, Any] | None:
        """The scope card once the user approved it (the review agent checks the diff against it)."""
        if self.stage == "scoping":
            return None
        return self.artifacts.get("scoping")

    def same_request(self, *, title: str, request: str, repo: str, base_branch: str) -> bool:
        """True when a repeated create asks for exactly this workflow."""
        return (self.title, self.request, self.repo, self.base_branch) == (title, request, repo, base_branch)
