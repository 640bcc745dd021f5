"""The Workflow aggregate: read this file and you know every event a workflow can record.

Command methods (``submit_artifact``, ``approve``, …) check the rules of ``lifecycle`` first and
raise ``LifecycleError`` before anything is triggered, so a refused command records nothing.
The ``@event`` methods only apply state: replaying them rebuilds the workflow exactly.
"""

from __future__ import annotations

import copy
import typing
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate, event
from msgspec.structs import replace

from autarch.contracts.agents import (
    PlannedPulse,
    SubmitPlanArgs,
    SubmitResearchArgs,
    SubmitScopeArgs,
    UnresolvedIssue,
)
from autarch.contracts.execution import HaltReason, PulseStatus
from autarch.contracts.tool_catalog import Role
from autarch.contracts.workflows import (
    FixPulseView,
    FixRoundView,
    ReviewCard,
    ReviewCommentView,
    StageNote,
    WorkflowBaseline,
    WorkflowErrorCode,
    WorkflowPath,
    WorkflowStatus,
)
from autarch.runtime.aggregates import recorded_as

from ..swarm.plan import bounce_feedback, bounced_pulses, is_bead_plan
from .fixes import fix_pulses, review_again
from .lifecycle import ARTIFACT_STAGES, LifecycleError, next_stage, quick_pulse, revision_request, validate_plan
from .state import (
    Cards,
    ChangeRequest,
    Execution,
    Halt,
    HaltDetails,
    Preflight,
    PreflightStatus,
    PulseEnding,
    PulseRun,
    QueuedMessage,
    Session,
    Stage,
    StageCard,
    SwarmAdvice,
    card_fits,
)

__all__ = ["STAGES", "Workflow"]

STAGES: tuple[Stage, ...] = typing.get_args(Stage)
"""Seed 003's stages, in order."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _seconds_between(start: str, end: str) -> float:
    return max(0.0, (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())


class Workflow(Aggregate):
    """A user's request for a change, taken through the stages to a reviewed branch."""

    card_version: int | None = None
    """The version the card awaiting approval was recorded at (what an action link names); a class default, so a
    workflow restored from a snapshot older than the field has it (None: answers naming a card are refused)."""
    forked_from: str | None = None
    """For a fork (``forks.py``): the workflow whose first ``forked_at`` events this one's history starts with."""
    forked_at: int | None = None
    fork_start_commit: str | None = None
    """For a fork made after its original's branch existed: the commit the fork's branch is cut at."""
    fork_base_commit: str | None = None

    if TYPE_CHECKING:
        # The event classes the @event decorators below create when the class is built (mypy cannot see them).
        Abandoned: ClassVar[type[Any]]
        ArtifactSubmitted: ClassVar[type[Any]]
        BaselineRecorded: ClassVar[type[Any]]
        ChangesRequested: ClassVar[type[Any]]
        Completed: ClassVar[type[Any]]
        Created: ClassVar[type[Any]]
        ErrorRecorded: ClassVar[type[Any]]
        ExecutionPrepared: ClassVar[type[Any]]
        FixRoundOpened: ClassVar[type[Any]]
        Forked: ClassVar[type[Any]]
        Halted: ClassVar[type[Any]]
        NoteTaken: ClassVar[type[Any]]
        PlanBounced: ClassVar[type[Any]]
        PreflightCompleted: ClassVar[type[Any]]
        PulseCompletionAccepted: ClassVar[type[Any]]
        PulseCompletionRejected: ClassVar[type[Any]]
        PulseEnded: ClassVar[type[Any]]
        PulseStarted: ClassVar[type[Any]]
        Resumed: ClassVar[type[Any]]
        ReviewCommentAdded: ClassVar[type[Any]]
        SessionAssigned: ClassVar[type[Any]]
        StageChanged: ClassVar[type[Any]]

    @staticmethod
    def create_id(workflow_id: str, **_: object) -> UUID:
        # The caller chooses the id (a UUID) so that a retried create is recognised, not doubled.
        return UUID(workflow_id)

    @event("Created")
    def __init__(self, *, workflow_id: str, title: str, request: str, repo: str, base_branch: str,
                 branch: str | None = None, script: str | None = None) -> None:
        self.branch = branch or f"autarch/{workflow_id[:8]}"
        self.script = script
        self.title = title
        self.request = request
        self.repo = repo
        self.base_branch = base_branch
        self.stage: Stage = "scoping"
        self.awaiting_approval = False
        self.last_error: str | None = None
        self.error_count = 0
        self.path: WorkflowPath | None = None
        """Chosen at scope approval (None before it)."""
        self.artifacts = Cards()
        self.pulses: list[PlannedPulse] = []
        """The planned pulses, fixed when execution starts (the approved plan's, or the quick path's one)."""
        self.review: ReviewCard | None = None
        """The review card from the start of review: comments come in, then the recommendation."""
        self.notes: list[StageNote] = []
        self.baselines: list[WorkflowBaseline] = []
        """Pre-existing issues preflight recorded (seed 000 baselines)."""
        self.feedback: list[ChangeRequest] = []
        self.last_feedback: str | None = None
        self.seen: dict[str, str] = {}
        """Idempotency key (or turn id) → what the first delivery answered: the stage of a card, the id of a note,
        baseline or comment, the outcome of a turn (tool calls may be delivered twice)."""
        # --- driving the agents (see driver.py): every external step is recorded, so a restart resumes it
        self.sessions: dict[str, Session] = {}
        """Step (``scoping``, ``research``, ``planning``, ``preflight``, ``review``, ``pulse:<run>``) → its
        agent session."""
        self.outbox: list[QueuedMessage] = []
        """Messages for agent sessions, in the order they were queued."""
        self.nudges: dict[str, int] = {}
        self.halt: Halt | None = None
        self.abandoned: str | None = None
        self.execution: Execution | None = None
        """The workflow branch and its worktree, once they exist."""
        self.worktree_removed = False
        self.preflight: Preflight | None = None
        self.runs: list[PulseRun] = []
        """Pulse runs in start order."""
        self.execution_mode: Literal["pulses", "swarm"] = "pulses"
        """``swarm``: the approved plan is a bead plan (seed 002), run by parallel workers from its epic."""
        self.swarm_advice: SwarmAdvice | None = None
        """What preflight said about running workers in parallel here."""
        self.fix_rounds: list[FixRoundView] = []
        """Change requests at review that sent the work back to execution, oldest first; the last one is running
        while the workflow is in execution again."""

    # --- events -------------------------------------------------------------------------------------

    @event("ErrorRecorded")
    def record_error(self, *, stage: str, message: str) -> None:
        """Something failed; the workflow stays in its stage (seed 003: workflow:error)."""
        self.last_error = message
        self.error_count += 1

    @event("ArtifactSubmitted")
    def _artifact_submitted(self, *, stage: str, artifact: dict[str, Any], key: str | None) -> None:
        self.awaiting_approval = True
        self.card_version = self.version + 1  # this event's own version (set on the aggregate after this runs)
        self.last_feedback = None
        # The event keeps the card's wire payload as recorded; the state is the typed card.
        if stage == "review":
            assert self.review is not None
            review = replace(self.review, recommendation=artifact.get("recommendation"),
                             summary=artifact.get("summary"))
            self.review = review
            self.artifacts = replace(self.artifacts, review=review)
        elif stage == "scoping":
            self.artifacts = replace(self.artifacts, scoping=msgspec.convert(artifact, SubmitScopeArgs))
        elif stage == "research":
            self.artifacts = replace(self.artifacts, research=msgspec.convert(artifact, SubmitResearchArgs))
        else:
            self.artifacts = replace(self.artifacts, planning=msgspec.convert(artifact, SubmitPlanArgs))
        if key:
            self.seen[key] = stage

    @event("StageChanged")
    def _stage_changed(self, *, from_stage: Stage, to_stage: Stage, path: WorkflowPath | None,
                       source: str | None = None) -> None:
        # ``source``: who approved (absent from automatic moves and from events recorded before it existed).
        self.stage = to_stage
        self.awaiting_approval = False
        fix_round = from_stage == "review" and to_stage == "execution"
        if not fix_round:
            # A fix round's feedback stays the latest change request until the review's next card.
            self.last_feedback = None
        if from_stage == "scoping":
            self.path = path
        if to_stage == "execution" and not fix_round:
            plan, scope = self.artifacts.planning, self.artifacts.scoping
            if plan is not None:
                self.pulses = copy.deepcopy(plan.pulses)
                self.execution_mode = "swarm" if is_bead_plan(plan) else "pulses"
            else:
                assert scope is not None, "execution starts from an approved scope"
                self.pulses = [quick_pulse(scope)]
        if to_stage == "review":
            self.review = ReviewCard()

    @event("Completed")
    def _completed(self, *, recommendation: str | None) -> None:
        pass  # the stage is already "done"; the event tells subscribers the workflow is finished

    @event("ChangesRequested")
    def _changes_requested(self, *, stage: str, feedback: str, fix: bool = False, source: str | None = None) -> None:
        # ``fix`` is absent (False) in events recorded before fix rounds existed.
        self.awaiting_approval = False
        self.last_feedback = feedback
        self.feedback.append(ChangeRequest(stage=stage, feedback=feedback))

    @event("FixRoundOpened")
    def _fix_round_opened(self, *, number: int, feedback: str, comment_ids: list[str],
                          pulses: list[dict[str, Any]]) -> None:
        # The round keeps the card it sends back; the review after the fixes starts a new one.
        assert self.review is not None
        self.fix_rounds.append(FixRoundView(round=number, feedback=feedback, comment_ids=list(comment_ids),
                                            pulses=msgspec.convert(pulses, list[FixPulseView]),
                                            review=copy.deepcopy(self.review)))

    @event("PlanBounced")
    def _plan_bounced(self, *, bounced: dict[str, list[str]], feedback: str) -> None:
        # Like a change request, but made by the check, not the user: the plan goes back to its agent.
        self.awaiting_approval = False
        self.last_feedback = feedback
        self.feedback.append(ChangeRequest(stage="planning", feedback=feedback))

    @event("SwarmAdvised")
    def _swarm_advised(self, *, mode: SwarmAdvice) -> None:
        self.swarm_advice = mode

    @event("NoteTaken")
    def _note_taken(self, *, note_id: str, stage: str, session_id: str, note: str, taken_at: str, key: str) -> None:
        # The wire's note is the state (its time parsed from the event's ISO string).
        self.notes.append(msgspec.convert({"note_id": note_id, "stage": stage, "session_id": session_id, "note": note,
                                           "taken_at": taken_at}, StageNote))
        self.seen[key] = note_id

    @event("BaselineRecorded")
    def _baseline_recorded(self, *, baseline: dict[str, Any], key: str) -> None:
        # The event keeps the baseline's payload as recorded; the state is a typed copy.
        self.baselines.append(msgspec.convert(baseline, WorkflowBaseline))
        self.seen[key] = str(baseline["baseline_id"])

    @event("ReviewCommentAdded")
    def _review_comment_added(self, *, comment: dict[str, Any], key: str) -> None:
        assert self.review is not None
        review = replace(self.review, comments=[*self.review.comments, msgspec.convert(comment, ReviewCommentView)])
        if self.artifacts.review is self.review:
            # The completed card and the open one are the same card until the review starts again: both see it.
            self.artifacts = replace(self.artifacts, review=review)
        self.review = review
        self.seen[key] = str(comment["comment_id"])

    @event("Forked")
    def _forked(self, *, forked_from: str, at: int, branch: str, script: str | None, closed_steps: list[str],
                dropped_steps: list[str], dropped_runs: list[str], start_commit: str | None,
                base_commit: str | None) -> None:
        # The first event of a fork's own, after the copied history (``forks.py`` decides what it drops): the
        # original's agents and worktree are never this workflow's, so the steps they were doing start over here.
        self.forked_from, self.forked_at = forked_from, at
        self.branch, self.script = branch, script
        for step in closed_steps:  # replaced, not changed: a command's copy shares the kept workflow's sessions
            self.sessions[step] = replace(self.sessions[step], closed=True)
        for step in dropped_steps:
            del self.sessions[step]
            self.nudges.pop(step, None)
        self.outbox = [m for m in self.outbox if m.step not in dropped_steps]
        self.runs = [r for r in self.runs if r.id not in dropped_runs]
        if self.halt is not None and self.halt.step in dropped_steps:
            self.halt = None
        # The original's branch and worktree stay its own: the driver cuts the fork's at ``start_commit``.
        self.execution, self.worktree_removed = None, False
        self.fork_start_commit, self.fork_base_commit = start_commit, base_commit

    # --- commands -----------------------------------------------------------------------------------

    def submit_artifact(self, stage: str, card: StageCard, *, key: str | None = None) -> bool:
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
        if not card_fits(stage, card):
            raise TypeError(f"a {type(card).__name__} is not the card of the {stage} stage")
        # The event records the card in its wire shape (the tool's field names): stored logs hold that shape.
        artifact: dict[str, Any] = msgspec.to_builtins(card)
        if stage == "planning":
            validate_plan(artifact["pulses"])
        self._artifact_submitted(stage=stage, artifact=artifact, key=key)
        return True

    def check_card(self, card_version: int | None) -> None:
        """Refuse (``card_moved_on``) an answer naming a card that no longer awaits approval, and (``finished``)
        any answer to an abandoned workflow's card: a Stop can end a workflow while its card waits."""
        if self.abandoned:
            raise LifecycleError(WorkflowErrorCode.FINISHED, "the workflow is abandoned", stage=self.stage)
        if card_version is None:
            return
        if not self.awaiting_approval or self.card_version != card_version:
            raise LifecycleError(WorkflowErrorCode.CARD_MOVED_ON,
                                 f"the card this answers (recorded at version {card_version}) no longer awaits "
                                 f"approval: the workflow is in {self.stage}"
                                 + (" with another card waiting" if self.awaiting_approval else ""),
                                 stage=self.stage, card_version=card_version)

    def approve(self, path: WorkflowPath | None = None, *, source: str = "api",
                card_version: int | None = None) -> None:
        """Approve the waiting card: move to the next stage (at scoping, on the chosen path)."""
        self.check_card(card_version)
        if not self.awaiting_approval:
            raise LifecycleError(WorkflowErrorCode.NOT_AWAITING_APPROVAL,
                                 f"nothing awaits approval in the {self.stage} stage", stage=self.stage)
        if path is not None and self.stage != "scoping":
            raise LifecycleError(WorkflowErrorCode.WRONG_STAGE,
                                 f"the path is chosen at scope approval; the workflow is in {self.stage}",
                                 stage=self.stage)
        if self.stage == "scoping":
            scope = self.artifacts.scoping
            path = path or (scope.recommended_path if scope is not None else None) or "full"
        if self.stage == "planning" and is_bead_plan(self.artifacts.planning):
            assert self.artifacts.planning is not None
            bounced = bounced_pulses(self.artifacts.planning)
            if bounced:
                feedback = bounce_feedback(bounced)
                self._plan_bounced(bounced=bounced, feedback=feedback)
                if "planning" in self.sessions:
                    self.queue_message("planning", feedback)
                return
        from_stage = self.stage
        to_stage = next_stage(from_stage, path)
        self._stage_changed(from_stage=from_stage, to_stage=to_stage, path=path, source=source)
        if to_stage == "done":
            self._completed(recommendation=self.review.recommendation if self.review is not None else None)

    def request_changes(self, feedback: str, *, source: str = "api", card_version: int | None = None) -> None:
        """Send the waiting card back with ``feedback``; the agent revises and resubmits."""
        self.check_card(card_version)
        if not self.awaiting_approval:
            raise LifecycleError(WorkflowErrorCode.NOT_AWAITING_APPROVAL,
                                 f"nothing awaits approval in the {self.stage} stage", stage=self.stage)
        self._changes_requested(stage=self.stage, feedback=feedback, fix=False, source=source)
        if self.stage in self.sessions:
            self.queue_message(self.stage, revision_request(self.stage, feedback))

    def request_fix(self, feedback: str, comment_ids: list[str] | None, *, limit: int) -> FixRoundView:
        """Send the review's comments (those of ``comment_ids``, else all) back to execution as fix pulses.

        Refused (recording nothing) unless the review card awaits approval and has the comments, and fewer than
        ``limit`` fix rounds ran.
        """
        self.check_card(None)
        if not self.awaiting_approval:
            raise LifecycleError(WorkflowErrorCode.NOT_AWAITING_APPROVAL,
                                 f"nothing awaits approval in the {self.stage} stage", stage=self.stage)
        if self.stage != "review":
            raise LifecycleError(WorkflowErrorCode.WRONG_STAGE,
                                 f"a fix round sends the review's comments back to execution; the workflow is in "
                                 f"{self.stage}: request changes without fix", stage=self.stage, expected="review")
        assert self.review is not None
        comments = self.review.comments
        if not comments:
            raise LifecycleError(WorkflowErrorCode.NO_REVIEW_COMMENTS,
                                 "the review card has no comments to fix: approve it, or request changes without "
                                 "fix to have the review run again with your feedback")
        if comment_ids is not None:
            known = {c.comment_id for c in comments}
            unknown = [i for i in dict.fromkeys(comment_ids) if i not in known]
            if unknown:
                raise LifecycleError(WorkflowErrorCode.UNKNOWN_COMMENTS,
                                     f"not comments of the review card awaiting approval: {', '.join(unknown)}",
                                     comment_ids=unknown)
            chosen = set(comment_ids)
            comments = [c for c in comments if c.comment_id in chosen]
        if len(self.fix_rounds) >= limit:
            raise LifecycleError(WorkflowErrorCode.FIX_ROUNDS_EXHAUSTED,
                                 f"{len(self.fix_rounds)} fix round(s) ran, the most this installation allows "
                                 f"(review_fix_rounds = {limit}): approve the review, request changes without fix, "
                                 "or start a new workflow for the rest", rounds=len(self.fix_rounds), limit=limit)
        number = len(self.fix_rounds) + 1
        taken = [p.id for p in self.pulses] + [r.id for r in self.runs] + [
            p.pulse_id for r in self.fix_rounds for p in r.pulses]
        pulses = fix_pulses(comments, number, taken)
        self._changes_requested(stage="review", feedback=feedback, fix=True, source="api")
        self._fix_round_opened(number=number, feedback=feedback, comment_ids=[c.comment_id for c in comments],
                               pulses=msgspec.to_builtins(pulses))
        self._stage_changed(from_stage="review", to_stage="execution", path=self.path, source="api")
        return self.fix_rounds[-1]

    def finish_execution(self) -> bool:
        """Every pulse is done: go to review with no approval. False when already past execution (a retry).

        After a fix round the review's agent session is asked to review the branch again (a first review opens
        its session from the driver).
        """
        if self.stage in ("review", "done"):
            return False
        if self.stage != "execution":
            raise LifecycleError.wrong_stage(self.stage, "execution", "finishing execution")
        self._stage_changed(from_stage="execution", to_stage="review", path=self.path, source=None)
        if self.fix_rounds and "review" in self.sessions:
            self.queue_message("review", review_again(self.fix_rounds[-1], self.runs))
        return True

    def advise_swarm(self, mode: SwarmAdvice) -> None:
        if self.swarm_advice != mode:
            self._swarm_advised(mode=mode)

    def take_note(self, *, session_id: str, note: str, key: str) -> str:
        """Store a note for the current stage; the note id (the first one's, for a repeated ``key``)."""
        if key in self.seen:
            return self.seen[key]
        note_id = str(uuid.uuid4())
        self._note_taken(note_id=note_id, stage=self.stage, session_id=session_id, note=note,
                         taken_at=datetime.now(UTC).isoformat(), key=key)
        return note_id

    def record_baseline(self, baseline: dict[str, Any], *, key: str) -> str:
        """Record a pre-existing issue (preflight runs at the start of execution); the baseline id."""
        if key in self.seen:
            return self.seen[key]
        if self.stage != "execution":
            raise LifecycleError.wrong_stage(self.stage, "execution", "recording a baseline (preflight)")
        baseline = {**baseline, "baseline_id": str(uuid.uuid4())}
        self._baseline_recorded(baseline=baseline, key=key)
        return str(baseline["baseline_id"])

    def add_review_comment(self, comment: dict[str, Any], *, key: str) -> str:
        """Add a comment to the open review card; ``not_found`` when there is none."""
        if key in self.seen:
            return self.seen[key]
        if self.stage != "review" or self.review is None:
            raise LifecycleError.not_found("review card not found: the workflow is not in review", stage=self.stage)
        if self.awaiting_approval:
            raise LifecycleError(WorkflowErrorCode.AWAITING_APPROVAL,
                                 "the review is complete and awaits approval; request changes to reopen it")
        comment = {**comment, "comment_id": str(uuid.uuid4())}
        self._review_comment_added(comment=comment, key=key)
        return str(comment["comment_id"])

    # --- driving events (recorded by the driver; see driver.py) --------------------------------------

    @event("SessionAssigned")
    def assign_session(self, *, step: str, session_id: str, role: Role, root: str, kickoff: str,
                       script: str | None, notes: list[str], assigned_at: str) -> None:
        # The notes are copied: state changed later must not change the recorded event.
        self.sessions[step] = Session(session_id=session_id, role=role, root=root, kickoff=kickoff, script=script,
                                      notes=list(notes), assigned_at=assigned_at, running_since=assigned_at)

    @event("SessionConfirmed")
    def confirm_session(self, *, step: str, kickoff_turn_id: str | None = None) -> None:
        # Events recorded before the kickoff turn id was kept carry none (the default).
        self._change_session(step, started=True, kickoff_turn_id=kickoff_turn_id)

    @event("SessionClosed")
    def session_closed(self, *, step: str, reason: str) -> None:
        """The step's work is over and its agent session was closed (``session:completed``)."""
        self._change_session(step, closed=True)

    @event("MessageQueued")
    def _message_queued(self, *, step: str, session_id: str, message_id: str, text: str) -> None:
        self.outbox.append(QueuedMessage(step=step, session_id=session_id, message_id=message_id, text=text))

    @event("MessageDelivered")
    def message_delivered(self, *, message_id: str) -> None:
        for i, message in enumerate(self.outbox):
            if message.message_id == message_id:
                self.outbox[i] = replace(message, delivered=True)

    @event("TurnHandled")
    def turn_handled(self, *, turn_id: str, step: str, outcome: str) -> None:
        self.seen[turn_id] = outcome
        if step in self.sessions:
            # The outcome of the step's latest turn: a pulse agent failing twice in a row is told apart by it.
            self._change_session(step, last_outcome=outcome)

    @event("Nudged")
    def _nudged(self, *, step: str) -> None:
        self.nudges[step] = self.nudges.get(step, 0) + 1

    @event("Halted")
    def _halted(self, *, stage: str, reason: HaltReason, message: str, pulse_id: str | None,
                details: dict[str, Any], at: str | None = None) -> None:
        # ``at`` (when, for the step's running clock) is None in events recorded before the clock was kept.
        # The event keeps the details' wire payload as recorded; the state is a typed copy.
        self.halt = Halt(reason=reason, message=message, pulse_id=pulse_id,
                         details=msgspec.convert(details, HaltDetails))
        self.halt_version = self.version + 1  # this event's own version, as for a card
        step = self.halt.step
        session = self.sessions.get(step) if step is not None else None
        if step is not None and session is not None and at is not None and session.running_since is not None:
            # The halted step's clock stops: time waiting for the user is not running time.
            self._change_session(step, ran_seconds=session.ran_seconds + _seconds_between(session.running_since, at),
                                 running_since=None)

    @event("Resumed")
    def _resumed(self, *, stage: str, reason: str, message: str | None, at: str | None = None,
                 source: str | None = None) -> None:
        # ``source``: who resumed (absent from a halt lifted by itself and from events recorded before it existed).
        step = self.halt.step if self.halt is not None else None
        session = self.sessions.get(step) if step is not None else None
        if step is not None and session is not None and at is not None and session.running_since is None:
            self._change_session(step, running_since=at)
        self.halt = None

    @event("Abandoned")
    def _abandoned(self, *, stage: str, reason: str, source: str | None = None) -> None:
        self.abandoned = reason
        # Nothing waits any more: neither the card (its approval is refused from now on) nor the halt.
        self.awaiting_approval = False
        self.halt = None

    @event("ExecutionPrepared")
    def execution_prepared(self, *, branch: str, worktree_path: str, base_commit: str, repository_id: str) -> None:
        self.execution = Execution(branch=branch, worktree_path=worktree_path, base_commit=base_commit,
                                   repository_id=repository_id)

    @event("WorktreeRemoved")
    def worktree_removed_event(self) -> None:
        self.worktree_removed = True

    @event("PreflightCompleted")
    def _preflight_completed(self, *, status: PreflightStatus, summary: str | None, setup_commands: list[str],
                             build_success: bool | None, baselines_recorded: int, error: str | None) -> None:
        self.preflight = Preflight(status=status, summary=summary, setup_commands=list(setup_commands),
                                   build_success=build_success, baselines_recorded=baselines_recorded, error=error)

    @event("PulseStarted")
    def pulse_started(self, *, run: dict[str, Any]) -> None:
        # The event keeps the run's payload as recorded; the state is a typed copy (so changing the run
        # later cannot change the recorded event either).
        self.runs.append(msgspec.convert(run, PulseRun))

    @event("PulseCompletionRejected")
    def _pulse_rejected(self, *, run_id: str, failures: list[str], escape_hatch: bool, rejections: int) -> None:
        self._change_run(run_id, completion_rejections=rejections)

    @event("PulseCompletionAccepted")
    def _pulse_accepted(self, *, run_id: str, description: str, files_changed: list[str],
                        unresolved_issues: list[dict[str, Any]]) -> None:
        # The event keeps the issues' wire payload as recorded; the state is typed.
        self._change_run(run_id, ending="succeeded", description=description, files_changed=list(files_changed),
                         unresolved_issues=msgspec.convert(unresolved_issues, list[UnresolvedIssue]),
                         has_unresolved_issues=bool(unresolved_issues))

    @event("PulseEnding")
    def _pulse_ending(self, *, run_id: str, status: PulseEnding, reason: str) -> None:
        self._change_run(run_id, ending=status, failure_reason=reason)

    @event("PulseExtended")
    def _pulse_extended(self, *, run_id: str) -> None:
        self._change_run(run_id, extensions=self.run(run_id).extensions + 1)

    @event("PulseEnded")
    def _pulse_ended(self, *, run_id: str, status: PulseStatus, commit: str | None, diff_artifact_id: str | None,
                     is_recovery_checkpoint: bool, ended_at: str, description: str | None, files_changed: list[str],
                     unresolved_issues: list[dict[str, Any]], failure_reason: str | None) -> None:
        self._change_run(run_id, status=status, checkpoint_commit=commit, diff_artifact_id=diff_artifact_id,
                         is_recovery_checkpoint=is_recovery_checkpoint, ended_at=ended_at, ending=None)

    def pulse_ended(self, *, run_id: str, status: PulseStatus, commit: str | None, diff_artifact_id: str | None,
                    is_recovery_checkpoint: bool, ended_at: str) -> None:
        """Record the end of a pulse run (the event carries the run's summary for subscribers)."""
        run = self.run(run_id)
        self._pulse_ended(run_id=run_id, status=status, commit=commit, diff_artifact_id=diff_artifact_id,
                          is_recovery_checkpoint=is_recovery_checkpoint, ended_at=ended_at,
                          description=run.description, files_changed=list(run.files_changed),
                          unresolved_issues=msgspec.to_builtins(run.unresolved_issues),
                          failure_reason=run.failure_reason)

    # --- copies ------------------------------------------------------------------------------------

    def _change_session(self, step: str, **changes: Any) -> None:
        """Put the session of ``step`` with ``changes`` in its place. Sessions, runs, queued messages, cards and the
        review card are replaced by the events that change them, never changed in place, so a copy of the workflow
        (:meth:`copy_for_change`) shares every one a command does not change."""
        self.sessions[step] = replace(self.sessions[step], **changes)

    def _change_run(self, run_id: str, **changes: Any) -> None:
        """Put run ``run_id`` (the first of that id, as :meth:`run` finds it) with ``changes`` in its place."""
        for i, run in enumerate(self.runs):
            if run.id == run_id:
                self.runs[i] = replace(run, **changes)
                return
        raise KeyError(run_id)

    def copy_for_change(self) -> Workflow:
        """A copy a command may change while this one stays as it is (``latest.py``), at the cost of copying its
        lists and dicts, not their items: every event replaces what it changes (a run, a session, a message, a
        card) or changes only those lists and dicts. Copying everything (a pickle round trip) cost a workflow of
        200 pulses more per command than the rest of the orchestrator's work on it."""
        twin = object.__new__(type(self))
        twin.__dict__.update({name: value.copy() if type(value) in (list, dict) else value
                              for name, value in self.__dict__.items()})
        return twin

    # --- driving commands ---------------------------------------------------------------------------

    def queue_message(self, step: str, text: str) -> None:
        """Send ``text`` to the session of ``step`` (delivered, and redelivered after a crash, by the driver)."""
        session = self.sessions[step]
        number = sum(1 for m in self.outbox if m.step == step) + 1
        self._message_queued(step=step, session_id=session.session_id, message_id=f"{step}#{number}", text=text)

    def halt_for(self, reason: HaltReason, message: str, *, pulse_id: str | None = None,
                 details: HaltDetails | None = None, at: str | None = None) -> None:
        self._halted(stage=self.stage, reason=reason, message=message, pulse_id=pulse_id,
                     details=msgspec.to_builtins(details or HaltDetails()),
                     at=at or _now())

    def resume(self, expected: tuple[HaltReason, ...], message: str | None, *, at: str | None = None,
               source: str | None = None, halt_version: int | None = None) -> Halt:
        """Lift the halt when its reason is one of ``expected`` (and, given ``halt_version``, it is that halt);
        the halt that was lifted."""
        self.check_halt(halt_version)
        if self.halt is None:
            raise LifecycleError(WorkflowErrorCode.NOT_HALTED, f"the workflow is not halted (stage {self.stage})",
                                 stage=self.stage)
        if self.halt.reason not in expected:
            hint = {"extension_requested": "approve the extension", "questions": "answer the questions"}.get(
                self.halt.reason, "resume it")
            raise LifecycleError(WorkflowErrorCode.WRONG_HALT,
                                 f"the workflow is halted for {self.halt.reason}: {hint}",
                                 reason=self.halt.reason)
        halt = self.halt
        self._resumed(stage=self.stage, reason=halt.reason, message=message, at=at or _now(), source=source)
        return halt

    def check_halt(self, halt_version: int | None) -> None:
        """Refuse (``card_moved_on``) an answer naming a halt the workflow no longer waits at."""
        if halt_version is None:
            return
        if self.halt is None or self.halt_version != halt_version:
            raise LifecycleError(WorkflowErrorCode.CARD_MOVED_ON,
                                 f"the halt this answers (recorded at version {halt_version}) is over: the workflow "
                                 + (f"halted again ({self.halt.reason})" if self.halt else
                                    f"went on (stage {self.stage})"),
                                 stage=self.stage, card_version=halt_version)

    def abandon(self, reason: str, *, source: str | None = None) -> None:
        self._abandoned(stage=self.stage, reason=reason, source=source)

    def nudge(self, step: str, text: str) -> int:
        self._nudged(step=step)
        self.queue_message(step, text)
        return self.nudges[step]

    def complete_preflight(self, *, status: PreflightStatus, summary: str | None = None,
                           setup_commands: list[str] | None = None, build_success: bool | None = None,
                           baselines_recorded: int = 0, error: str | None = None) -> None:
        self._preflight_completed(status=status, summary=summary, setup_commands=setup_commands or [],
                                  build_success=build_success, baselines_recorded=baselines_recorded, error=error)

    def reject_completion(self, run_id: str, failures: list[str], escape_hatch: bool) -> None:
        """Record that the agent runner refused a ``complete_pulse`` (the run counts its refusals)."""
        self._pulse_rejected(run_id=run_id, failures=failures, escape_hatch=escape_hatch,
                             rejections=self.run(run_id).completion_rejections + 1)

    def accept_completion(self, run_id: str, *, description: str, files_changed: list[str],
                          unresolved_issues: list[UnresolvedIssue]) -> None:
        self._pulse_accepted(run_id=run_id, description=description, files_changed=files_changed,
                             unresolved_issues=msgspec.to_builtins(unresolved_issues))

    def end_pulse_as(self, run_id: str, status: PulseEnding, reason: str) -> None:
        """Decide that the running pulse ends ``failed`` or ``stopped``; the driver makes the recovery checkpoint."""
        self._pulse_ending(run_id=run_id, status=status, reason=reason)

    def extend_pulse(self, run_id: str) -> None:
        self._pulse_extended(run_id=run_id)

    def run(self, run_id: str) -> PulseRun:
        for run in self.runs:
            if run.id == run_id:
                return run
        raise KeyError(run_id)

    def running_run(self) -> PulseRun | None:
        return next((r for r in self.runs if r.status == "running"), None)

    def running_seconds(self, step: str, now: str) -> float:
        """How long ``step``'s session has been running at ``now``, not counting time spent halted."""
        session = self.sessions[step]
        ran = session.ran_seconds
        if session.running_since is not None:
            ran += _seconds_between(session.running_since, now)
        return ran

    def step_of(self, session_id: str) -> str | None:
        return next((step for step, s in self.sessions.items() if s.session_id == session_id), None)

    @property
    def status(self) -> WorkflowStatus:
        if self.abandoned:
            return "abandoned"
        if self.stage == "done":
            return "done"
        if self.halt is not None:
            return "halted"
        return "awaiting_approval" if self.awaiting_approval else "active"

    # --- queries ------------------------------------------------------------------------------------

    def approved_scope(self) -> SubmitScopeArgs | None:
        """The scope card once the user approved it (the review agent checks the diff against it)."""
        if self.stage == "scoping":
            return None
        return self.artifacts.scoping

    def same_request(self, *, title: str, request: str, repo: str, base_branch: str) -> bool:
        """True when a repeated create asks for exactly this workflow."""
        return (self.title, self.request, self.repo, self.base_branch) == (title, request, repo, base_branch)


# Until this module moved here, its events were stored as events of ``domainmodel`` (their topics say so).
recorded_as(__name__, "autarch.services.orchestrator.domainmodel")

