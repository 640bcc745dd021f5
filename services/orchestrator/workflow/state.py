"""The typed pieces of the Workflow aggregate's state (what its events' ``apply`` builds).

These are state, not wire: the stored events keep their own attributes (eventsourcing stores those, and old
logs must still replay), and the wire views (``contracts``) are built from these by ``cards`` and ``views``.
The aggregate's events replace these rather than change them in place (``msgspec.structs.replace``), so a
command's copy of a workflow shares every piece it does not change (``Workflow.copy_for_change``). Where a piece of
state would copy a wire type field for field (a stage's note, a baseline, a fix round), the state is that wire type
(``StageNote``, ``WorkflowBaseline``, ``FixRoundView``) and this module does not repeat it.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from autarch.contracts.agents import Question, SubmitPlanArgs, SubmitResearchArgs, SubmitScopeArgs, UnresolvedIssue
from autarch.contracts.execution import HaltReason, PulseStatus
from autarch.contracts.tool_catalog import Role
from autarch.contracts.workflows import ReviewCard

__all__ = [
    "Cards",
    "ChangeRequest",
    "Execution",
    "Halt",
    "HaltDetails",
    "Preflight",
    "PreflightStatus",
    "PulseEnding",
    "PulseRun",
    "QueuedMessage",
    "ReviewVerdict",
    "Session",
    "Stage",
    "StageCard",
    "SwarmAdvice",
]

Stage = Literal["scoping", "research", "planning", "execution", "review", "done"]
"""Seed 003's stages, in order."""

PulseEnding = Literal["succeeded", "failed", "stopped"]
"""How a running pulse was decided to end, before its git step (checkpoint or recovery commit) is done."""

SwarmAdvice = Literal["swarm", "single-worker"]
"""What preflight said about running workers in parallel in the workflow's repository (``recommended_mode``)."""

PreflightStatus = Literal["completed", "failed"]
"""How a preflight ended (``running`` is not state: it is a preflight session with no outcome yet)."""


class HaltDetails(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a halt carries besides its reason, by reason; only what was given goes to ``HaltView.details``."""

    step: str | None = None
    """The step whose agent was working when the workflow halted."""
    questions: list[Question] | None = None
    """``questions``: what the agent asks (``ask_questions``)."""
    reason: str | None = None
    """``extension_requested``: why the agent asks for more time, with what it did and what is left."""
    completed: list[str] | None = None
    remaining: list[str] | None = None
    unresolved_issues: list[UnresolvedIssue] | None = None
    """``unresolved_issues``: what the pulse's agent could not fix."""
    recovery_commit: str | None = None
    """``pulse_failed`` / ``stopped`` after a recovery checkpoint: the commit keeping the pulse's work, and its
    branch."""
    pulse_branch: str | None = None
    path: str | None = None
    """``disk_full``: what could not be written for lack of space (a store, the stream's files, the worktree)."""


class Halt(msgspec.Struct, kw_only=True):
    """Why the workflow waits for the user (seed 003 ``workflow:halted``)."""

    reason: HaltReason
    message: str
    pulse_id: str | None
    details: HaltDetails

    @property
    def step(self) -> str | None:
        """The step whose agent was working when the workflow halted (None: no agent was)."""
        return self.details.step


class Preflight(msgspec.Struct, kw_only=True):
    """The outcome of the preflight step (seed 000 ``PreflightSetup``)."""

    status: PreflightStatus
    summary: str | None
    setup_commands: list[str]
    build_success: bool | None
    baselines_recorded: int
    error: str | None


class Cards(msgspec.Struct, kw_only=True):
    """The latest card of each stage the user approves, as the agent submitted it (None until then).

    The cards are the tools' own argument Structs: they are built from the ``ArtifactSubmitted`` payload,
    which keeps their wire shape.
    """

    scoping: SubmitScopeArgs | None = None
    research: SubmitResearchArgs | None = None
    planning: SubmitPlanArgs | None = None
    review: ReviewCard | None = None
    """Once the review is complete (``Workflow.review`` holds it while comments come in)."""

    def stages(self) -> list[str]:
        """The stages with a card, in stage order (the fields' order)."""
        return [stage for stage in self.__struct_fields__ if getattr(self, stage) is not None]


class ReviewVerdict(msgspec.Struct, kw_only=True, frozen=True):
    """What ``complete_review`` submits: the review card's conclusion (its comments came one by one)."""

    recommendation: str
    summary: str


StageCard = SubmitScopeArgs | SubmitResearchArgs | SubmitPlanArgs | ReviewVerdict
"""A card an agent submits for the user's approval."""

_CARD_OF_STAGE: dict[str, type] = {"scoping": SubmitScopeArgs, "research": SubmitResearchArgs,
                                   "planning": SubmitPlanArgs, "review": ReviewVerdict}


def card_fits(stage: str, card: StageCard) -> bool:
    """Whether ``card`` is the kind of card ``stage`` ends with."""
    return isinstance(card, _CARD_OF_STAGE[stage])


class ChangeRequest(msgspec.Struct, kw_only=True):
    """The user sent a stage's card back with ``feedback``."""

    stage: str
    feedback: str


class Session(msgspec.Struct, kw_only=True):
    """The agent session of one step (``scoping`` … ``review``, ``pulse:<run id>``), as the driver opened it."""

    session_id: str
    role: Role
    root: str
    kickoff: str
    script: str | None
    notes: list[str]
    assigned_at: str
    started: bool = False
    """The agent runner confirmed the session (its kickoff turn runs)."""
    kickoff_turn_id: str | None = None
    closed: bool = False
    running_since: str | None = None
    """When the step's clock last started; None while the workflow is halted (waiting is not running time)."""
    ran_seconds: float = 0.0
    """Running time before ``running_since``."""
    last_outcome: str | None = None
    """The outcome of the step's latest turn: a pulse agent failing twice in a row is told apart by it."""


class QueuedMessage(msgspec.Struct, kw_only=True):
    """A message for an agent session: delivered, and redelivered after a crash, by the driver."""

    step: str
    session_id: str
    message_id: str
    text: str
    delivered: bool = False


class PulseRun(msgspec.Struct, kw_only=True):
    """One run of a planned pulse (seed 000 ``Pulse``; its wire view is ``PulseRunView``).

    Built from the ``run`` payload of the ``PulseStarted`` event: the fields that runs recorded by earlier
    versions may lack have defaults, so old logs still replay.
    """

    id: str
    """``<planned id>`` for the first attempt, ``<planned id>-a<n>`` for attempt n (also the git pulse id)."""
    planned_pulse_id: str
    title: str
    attempt: int
    status: PulseStatus
    session_id: str | None = None
    pulse_branch: str | None = None
    base_commit: str | None = None
    worktree_path: str | None = None
    checkpoint_commit: str | None = None
    diff_artifact_id: str | None = None
    description: str | None = None
    """The agent's accepted summary: the commit message."""
    files_changed: list[str] = []
    has_unresolved_issues: bool = False
    unresolved_issues: list[UnresolvedIssue] = []
    """As the agent listed them in ``complete_pulse``."""
    is_recovery_checkpoint: bool = False
    completion_rejections: int = 0
    extensions: int = 0
    failure_reason: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    ending: PulseEnding | None = None
    """Set while the pulse waits for its git step; None again once it ended."""
    fix_round: int | None = None
    """The fix round whose review comments the run fixes (None: a pulse of the plan)."""


class Execution(msgspec.Struct, kw_only=True, frozen=True):
    """The workflow branch and its worktree, once the git service made them."""

    branch: str
    worktree_path: str
    base_commit: str
    repository_id: str
