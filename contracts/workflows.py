"""Commands, queries and replies of the orchestrator's workflow endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from .agents import PlannedPulse, SubmitPlanArgs, SubmitResearchArgs, SubmitScopeArgs
from .base import UUID_PATTERN, Command, Query, Reply
from .beads import SwarmView
from .execution import HaltView, PreflightView, PulseRunView, Source
from .http import Text
from .mail import MailMessage

__all__ = [
    "ApproveBody",
    "ApproveWorkflow",
    "CommentId",
    "CreateWorkflow",
    "FinishExecution",
    "FixPulseView",
    "FixRequest",
    "FixRoundView",
    "ForkBody",
    "ForkWorkflow",
    "GetArtifacts",
    "GetWorkflow",
    "ListWorkflows",
    "ReplayWorkflow",
    "ReplayedWorkflow",
    "RequestChanges",
    "RequestChangesBody",
    "ReviewCard",
    "ReviewCommentView",
    "StageNote",
    "SubmitPlan",
    "SubmitResearch",
    "SubmitScope",
    "WorkflowArtifacts",
    "WorkflowBaseline",
    "WorkflowErrorCode",
    "WorkflowList",
    "WorkflowPath",
    "WorkflowStatus",
    "WorkflowView",
]

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
Title = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Request = Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
BranchName = Annotated[str, msgspec.Meta(min_length=1, max_length=250)]
WorkflowId = Annotated[str, msgspec.Meta(pattern=UUID_PATTERN)]
CommentId = Annotated[str, msgspec.Meta(pattern=UUID_PATTERN)]
"""A review comment's id (``comment_id`` of the review card's comments)."""
FixRequest = bool | Annotated[list[CommentId], msgspec.Meta(min_length=1, max_length=1000)]
"""What a change request at review sends back to execution: ``false`` nothing (the review agent reviews again),
``true`` every comment of the review card, a list of comment ids those comments."""


class CreateWorkflow(Command, kw_only=True):
    """Start a workflow. Idempotent on ``workflow_id``: the same create twice records one workflow."""

    workflow_id: WorkflowId
    """Chosen by the caller (a UUID) so that a retried create cannot record a second workflow."""
    title: Title
    request: Request
    repo: NonEmpty
    """Absolute path of the local git repository the workflow changes."""
    base_branch: BranchName = "main"
    branch: BranchName | None = None
    """The workflow branch the pulses commit to (default ``autarch/<first 8 characters of the id>``)."""
    script: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$(?!\n)")] | None = None
    """Scenario selector handed to the scripted model (tests, demo); ignored by real models."""


ScriptName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$(?!\n)")]


class ForkWorkflow(Command, kw_only=True):
    """Make a new workflow whose history is the first ``at`` events of ``forked_from``, and carry it on live.

    The original is only read. Idempotent on ``workflow_id``: the same fork twice records one workflow.
    """

    workflow_id: WorkflowId
    """The new workflow's id, chosen by the caller (a UUID) so that a retried fork cannot record a second one."""
    forked_from: WorkflowId
    at: Annotated[int, msgspec.Meta(ge=1)]
    """How many of the original's events the fork starts from (``version`` counts them; 1 is its creation)."""
    branch: BranchName | None = None
    """The fork's workflow branch (default ``autarch/<first 8 characters of the new id>``)."""
    script: ScriptName | None = None
    """Scenario selector handed to the scripted model from here on (default: the original's)."""


class ForkBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows/{id}/fork``. Unknown fields are refused."""

    at: Annotated[int, msgspec.Meta(ge=1)]
    """The number of the original's event the fork starts after (1 … the original's ``version``)."""
    fork_id: WorkflowId | None = None
    """The new workflow's id (default: a new UUID); given, a retried request records one fork."""
    branch: BranchName | None = None
    """The fork's workflow branch (default ``autarch/<first 8 characters of the new id>``)."""
    script: ScriptName | None = None
    """Scenario selector handed to the scripted model from here on (default: the original's)."""


class GetWorkflow(Query, kw_only=True):
    workflow_id: WorkflowId


class ListWorkflows(Query, kw_only=True):
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0


class ReplayWorkflow(Query, kw_only=True):
    """Rebuild a workflow from its recorded events alone, optionally only its first ``at`` events."""

    workflow_id: WorkflowId
    at: Annotated[int, msgspec.Meta(ge=1)] | None = None



WorkflowPath = Literal["quick", "full"]
"""``full`` runs every stage; ``quick`` goes from scoping straight to one execution pulse, then review."""


class WorkflowErrorCode:
    """Domain error codes of the workflow lifecycle (besides ``not_found``/``bad_request``)."""

    NOT_AWAITING_APPROVAL = "not_awaiting_approval"
    """Approve or request-changes while no artifact awaits the user."""
    AWAITING_APPROVAL = "awaiting_approval"
    """An artifact was submitted while the previous one still awaits the user (request changes first)."""
    WRONG_STAGE = "wrong_stage"
    """The command belongs to another stage than the workflow's current one."""
    INVALID_PLAN = "invalid_plan"
    """Duplicate pulse ids, a dependsOn naming an unknown pulse, or a dependency cycle."""

    NOT_HALTED = "not_halted"
    """Resume, extension approval or answers while the workflow is not halted."""
    WRONG_HALT = "wrong_halt"
    """The workflow is halted for another reason (e.g. resume while it waits for answers)."""
    NOT_RUNNING = "not_running"
    """Stop while no agent works (the workflow awaits approval, is halted or finished)."""
    FINISHED = "finished"
    """A command to a workflow that is done or abandoned."""

    NO_REVIEW_COMMENTS = "no_review_comments"
    """A fix round asked of a review card that has no comments (nothing to fix)."""
    UNKNOWN_COMMENTS = "unknown_comments"
    """A fix round names comment ids that are not on the review card awaiting approval."""
    FIX_ROUNDS_EXHAUSTED = "fix_rounds_exhausted"
    """A fix round asked after ``review_fix_rounds`` rounds already ran: a person decides how the work goes on."""
    CARD_MOVED_ON = "card_moved_on"
    """An answer to a card (``card_version``, as an action link carries) that no longer awaits approval: it was
    approved, sent back or replaced; or a resume or an abandon naming a halt (``halt_version``, ``version``) the
    workflow no longer waits at: it was resumed, or halted again."""

    EVENT_OUT_OF_RANGE = "event_out_of_range"
    """A fork ``at`` an event number the workflow has not recorded (details: ``at``, ``events_total``)."""
    FORK_UNSUPPORTED = "fork_unsupported"
    """A fork at a point it cannot start from (a bead plan's swarm execution: its workers' state is not the
    workflow's)."""

    CONFLICTS = frozenset({NOT_AWAITING_APPROVAL, AWAITING_APPROVAL, WRONG_STAGE, NOT_HALTED, WRONG_HALT,
                           NOT_RUNNING, FINISHED, NO_REVIEW_COMMENTS, UNKNOWN_COMMENTS, FIX_ROUNDS_EXHAUSTED,
                           CARD_MOVED_ON, FORK_UNSUPPORTED})
    """The codes that mean "not in this state" (HTTP 409)."""


class SubmitScope(Command, kw_only=True):
    """The scoping agent's ``submit_scope``: record the scope card and wait for the user."""

    workflow_id: WorkflowId
    scope: SubmitScopeArgs
    idempotency_key: str | None = None
    """``<session>:<tool call>``: a repeated submission with the same key records nothing."""


class SubmitResearch(Command, kw_only=True):
    """The research agent's ``submit_research``."""

    workflow_id: WorkflowId
    research: SubmitResearchArgs
    idempotency_key: str | None = None


class SubmitPlan(Command, kw_only=True):
    """The planning agent's ``submit_plan``; pulse ids must be unique and ``dependsOn`` acyclic."""

    workflow_id: WorkflowId
    plan: SubmitPlanArgs
    idempotency_key: str | None = None


class ApproveWorkflow(Command, kw_only=True):
    """The user approves the artifact awaiting approval; the workflow moves to the next stage."""

    workflow_id: WorkflowId
    path: WorkflowPath | None = None
    """Only at scope approval; defaults to the scope card's ``recommended_path``."""
    source: Source = "api"
    """Where the approval came from (the channel of an action link); recorded in ``workflow:stage_changed``."""
    card_version: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """The workflow version the approved card was recorded at (``version`` of its ``workflow:approval_needed``):
    refused with ``card_moved_on`` unless that card still awaits approval. None: whatever card awaits."""


FIX_RULES = (
    "Only at review. false (the default): the review agent reviews again, taking the feedback into account; the "
    "code is not changed. true: the work goes back to execution: one fix pulse per file the review card's comments "
    "name (and one for the comments on no file) fixes them, each one commit on the workflow branch, then the review "
    "runs again on the whole branch and its card awaits approval again. A list of comment ids (comment_id of the "
    "review card's comments): the same, for those comments only. Refused with 409: wrong_stage at another stage, "
    "no_review_comments when the card has no comments, unknown_comments for an id not on the card, "
    "fix_rounds_exhausted once review_fix_rounds fix rounds ran (default 3).")
"""What ``fix`` of a change request means; the OpenAPI document carries it as the field's description."""


class RequestChanges(Command, kw_only=True):
    """The user sends the artifact back with feedback; the agent revises and resubmits.

    At review, ``fix`` sends the work itself back: fix pulses made from the review's comments and the feedback
    run in execution, each one commit on the workflow branch, and the review runs again on the new diff.
    """

    workflow_id: WorkflowId
    feedback: Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
    fix: FixRequest = False
    source: Source = "api"
    """Where the request came from; recorded in ``workflow:changes_requested``."""
    card_version: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """As for ``ApproveWorkflow``: the card this answers (``card_moved_on`` once another is waiting or none)."""


class ApproveBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows/{id}/approve`` (the body is optional). Unknown fields are refused."""

    path: WorkflowPath | None = None
    """Only at scope approval: ``quick`` or ``full`` (default: the scope card's recommended path)."""


class RequestChangesBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows/{id}/request-changes``."""

    feedback: Text
    """What to change: at least one visible character; tab and newlines are the only control characters. With
    ``fix``, it is handed to every fix pulse and to the review that follows them."""
    fix: Annotated[FixRequest, msgspec.Meta(description=FIX_RULES)] = False
    """See ``FIX_RULES`` (the document states them)."""


class FinishExecution(Command, kw_only=True):
    """Every pulse is done: execution moves to review automatically (no approval). Idempotent."""

    workflow_id: WorkflowId


class GetArtifacts(Query, kw_only=True):
    workflow_id: WorkflowId


class StageNote(msgspec.Struct, kw_only=True):
    note_id: str
    stage: str
    note: str
    session_id: str
    taken_at: datetime


class WorkflowBaseline(msgspec.Struct, kw_only=True):
    """A pre-existing build/lint/test issue (seed 000, baseline structure)."""

    baseline_id: str
    issue_type: str
    source: str
    pattern: str
    file_path: str | None = None
    description: str | None = None


class ReviewCommentView(msgspec.Struct, kw_only=True):
    comment_id: str
    kind: str
    """``line``, ``file`` or ``review``."""
    severity: str
    category: str
    description: str
    file_path: str | None = None
    start_line: int | None = None
    end_line: int | None = None


class ReviewCard(msgspec.Struct, kw_only=True):
    """The review stage's card: comments as they are added, then the recommendation."""

    comments: list[ReviewCommentView] = []
    recommendation: str | None = None
    """``approve``, ``reject`` or ``manual_review`` once the review is complete."""
    summary: str | None = None


class FixPulseView(msgspec.Struct, kw_only=True):
    """One fix pulse of a fix round: the review comments it fixes (its runs are in ``pulse_runs``)."""

    pulse_id: str
    """The planned id of the pulse (``fix-<round>-<n>``); its runs have it as ``planned_pulse_id``."""
    title: str
    file_path: str | None = None
    """The file whose comments it fixes; None for the comments on no file (the review's general comments)."""
    comment_ids: list[str] = []


class FixRoundView(msgspec.Struct, kw_only=True):
    """A change request at review that sent the work back to execution: what was sent back, and its fix pulses."""

    round: int
    """1 for the first fix round of the workflow, then 2, …"""
    feedback: str
    comment_ids: list[str]
    """The review comments sent back to be fixed."""
    pulses: list[FixPulseView]
    review: ReviewCard
    """The review card that was sent back (the review that follows the fixes starts a new card)."""


class WorkflowArtifacts(Reply, kw_only=True):
    """Every card of a workflow (the latest submission of each), its notes, baselines and pulses."""

    workflow_id: str
    stage: str
    awaiting_approval: bool
    path: WorkflowPath | None = None
    scope: SubmitScopeArgs | None = None
    research: SubmitResearchArgs | None = None
    plan: SubmitPlanArgs | None = None
    pulses: list[PlannedPulse] = []
    """What execution runs: the approved plan's pulses, or the single pulse of the quick path."""
    review: ReviewCard | None = None
    notes: list[StageNote] = []
    baselines: list[WorkflowBaseline] = []
    feedback: list[dict[str, Any]] = []
    """Every change request: ``{"stage", "feedback"}`` in order."""
    preflight: PreflightView | None = None
    pulse_runs: list[PulseRunView] = []
    """Every pulse run in the order started (retries included), then the pulses not started yet."""
    fix_rounds: list[FixRoundView] = []
    """Every change request at review that sent the work back to execution, oldest first."""


WorkflowStatus = Literal["active", "awaiting_approval", "halted", "done", "abandoned"]


class WorkflowView(Reply, kw_only=True):
    """A workflow's current state as clients see it."""

    id: str
    title: str
    request: str
    repo: str
    base_branch: str
    stage: str
    """``scoping`` → ``research`` → ``planning`` → ``execution`` → ``review`` → ``done``."""
    awaiting_approval: bool
    created_at: datetime
    updated_at: datetime
    version: int
    """Number of events recorded for this workflow."""
    last_error: str | None = None
    path: WorkflowPath | None = None
    """Chosen at scope approval (None before)."""
    artifact_stages: list[str] = []
    """Stages with a submitted card (fetch them with ``get_artifacts``)."""
    notes_count: int = 0
    baselines_count: int = 0
    review_comments_count: int = 0
    pulses_count: int = 0
    last_feedback: str | None = None
    """The user's latest change request, until the next submission."""
    status: WorkflowStatus = "active"
    """``active`` while agents work; ``halted`` waits for the user (see ``halt``); ``abandoned`` is final."""
    halt: HaltView | None = None
    card_version: int | None = None
    """The workflow version the card awaiting approval was recorded at (what ``card_version`` of an answer and
    ``version`` of an abandon name); null while no card waits."""
    branch: str | None = None
    """The workflow branch (the deliverable), once execution created it."""
    worktree_path: str | None = None
    pulses_succeeded: int = 0
    """Of the ``pulses_count`` planned pulses, those that succeeded (fix pulses are not counted: see
    ``fix_rounds``)."""
    current_pulse: str | None = None
    """The pulse run that is running (or halted) now."""
    sessions: dict[str, str] = {}
    """Agent session of each step: ``scoping``, ``research``, ``planning``, ``preflight``, ``review`` and
    ``pulse:<run id>`` for each pulse run → session id."""
    fix_rounds: int = 0
    """Change requests at review that sent the work back to execution so far (see ``fix_rounds`` of
    ``GET …/artifacts``)."""
    forked_from: str | None = None
    """For a fork: the workflow it was forked from (``forked_at``: after how many of that one's events)."""
    forked_at: int | None = None


class WorkflowList(Reply, kw_only=True):
    items: list[WorkflowView]
    total: int


class ReplayedWorkflow(Reply, kw_only=True):
    workflow: WorkflowView
    events_applied: int
    events_total: int
    artifacts: WorkflowArtifacts | None = None
    """The cards, notes, baselines and review comments as of ``events_applied``."""
    swarm: SwarmView | None = None
    """The epic (beads, workers, claims, recorded leases, evidence, handoffs) rebuilt from its own events, for a
    bead plan's workflow; always its latest state (``at`` counts the workflow's events only)."""
    mail: list[MailMessage] = []
    """The epic's coordination mail rebuilt from its mailbox's events, oldest first."""
