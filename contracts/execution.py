"""The execution side of a workflow on the wire: preflight, pulse runs, halts, and the user's controls.

Seed 000 gives the model (``Pulse``, ``PreflightSetup``); these Structs are what clients read in
``WorkflowView``/``WorkflowArtifacts`` and what they send to stop, resume, approve an extension or
answer the agent's questions. Requests go to ``autarch.svc.orchestrator.<verb>``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from .base import UUID_PATTERN, Command
from .http import Reason
from .http import Text as VisibleText

__all__ = [
    "RESUMABLE",
    "AbandonBody",
    "AbandonWorkflow",
    "AnswerQuestions",
    "AnswerQuestionsBody",
    "ApproveExtension",
    "ApproveExtensionBody",
    "HaltReason",
    "HaltView",
    "PreflightView",
    "PulseRunView",
    "PulseStatus",
    "ResumeBody",
    "ResumeWorkflow",
    "Source",
    "StopBody",
    "StopWorkflow",
]

WorkflowId = Annotated[str, msgspec.Meta(pattern=UUID_PATTERN)]
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]

PulseStatus = Literal["proposed", "running", "succeeded", "failed", "stopped"]
"""Seed 000's lifecycle: Proposed → Running → Succeeded | Failed | Stopped."""

HaltReason = Literal["unresolved_issues", "pulse_failed", "stopped", "extension_requested", "questions", "error",
                     "disk_full"]
"""Why orchestration waits for a person:

- ``unresolved_issues``: a pulse succeeded but declared ``unresolvedIssues`` (resume starts the next pulse);
- ``pulse_failed``: a pulse failed, e.g. at the iteration limit (resume runs it again from the branch head);
- ``stopped``: the user stopped the workflow (resume continues: a stopped pulse runs again);
- ``extension_requested``: the agent asked for more time (approve the extension to continue);
- ``questions``: the agent asked questions (answer them to continue);
- ``error``: an agent turn failed (model API, budget) or a step could not be done; resume asks the same agent
  (a running pulse's included) to carry on, or retries the step;
- ``disk_full``: a store, the event stream or the worktree could not be written for lack of space
  (``details.path`` names it); the workflow carries on by itself once the path has room again (the interrupted
  agent turn runs again from what was recorded, a failed step is retried), or on resume.
"""

RESUMABLE: tuple[HaltReason, ...] = ("unresolved_issues", "pulse_failed", "stopped", "error", "disk_full")
"""Halts that ``resume`` lifts (an extension request and questions have their own control)."""


class PulseRunView(msgspec.Struct, kw_only=True):
    """One pulse as it runs (seed 000 ``Pulse``); a retried pulse is a new run with ``attempt`` + 1."""

    id: str
    """``<planned id>`` for the first attempt, ``<planned id>-a<n>`` for attempt n (also the git pulse id)."""
    planned_pulse_id: str
    title: str
    attempt: int
    status: PulseStatus
    session_id: str | None = None
    initiating_message_id: str | None = None
    """The kickoff message that started the pulse: the id of its session's first turn (``turns[0].turn_id``
    in ``GET /api/sessions/{session_id}``); None until the session is open."""
    pulse_branch: str | None = None
    worktree_path: str | None = None
    """The worktree the pulse ran in (the workflow's; it is removed once the workflow ends)."""
    checkpoint_commit: str | None = None
    diff_artifact_id: str | None = None
    description: str | None = None
    """The agent's summary: the commit message."""
    files_changed: list[str] = []
    has_unresolved_issues: bool = False
    unresolved_issues: list[dict[str, Any]] = []
    is_recovery_checkpoint: bool = False
    completion_rejections: int = 0
    extensions: int = 0
    failure_reason: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    fix_round: int | None = None
    """The fix round (``fix_rounds`` of the artifacts) this pulse fixes review comments for; None for a pulse of
    the plan."""


class PreflightView(msgspec.Struct, kw_only=True):
    """Seed 000 ``PreflightSetup``: ``running`` → ``completed`` | ``failed``."""

    status: Literal["running", "completed", "failed"]
    session_id: str | None = None
    summary: str | None = None
    setup_commands: list[str] = []
    build_success: bool | None = None
    baselines_recorded: int = 0
    error: str | None = None


class HaltView(msgspec.Struct, kw_only=True):
    """What the workflow waits for; ``details`` carries the questions, the extension request, the issues…"""

    reason: HaltReason
    message: str
    pulse_id: str | None = None
    details: dict[str, Any] = {}
    version: int | None = None
    """The workflow version this halt was recorded at (``halt_version`` of a resume, ``version`` of an abandon
    name it); null for a halt recorded before it was kept."""


Source = Literal["api", "webhook", "slack", "discord", "telegram", "sms"]
"""Where a user's answer to a card or a halt came from (``contracts.actions.ActionSource``)."""


class StopWorkflow(Command, kw_only=True):
    """Stop the running agent (a running pulse ends ``stopped`` with a recovery checkpoint) and halt."""

    workflow_id: WorkflowId
    reason: Annotated[str, msgspec.Meta(max_length=10_000)] = "stopped by user"


class ResumeWorkflow(Command, kw_only=True):
    """Continue a halted workflow (not one waiting for an extension approval or answers)."""

    workflow_id: WorkflowId
    message: Annotated[str, msgspec.Meta(max_length=100_000)] | None = None
    """Optional guidance handed to the agent that continues."""
    source: Source = "api"
    """Where the resume came from (the channel of an action link); recorded in ``workflow:resumed``."""
    halt_version: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """The workflow version the halt was recorded at (``version`` of its ``workflow:halted``): refused with
    ``card_moved_on`` unless the workflow still waits at that halt. None: whatever resumable halt it waits at."""


class AbandonWorkflow(Command, kw_only=True):
    """End a workflow that waits for the user (a card awaiting approval, or a halt), for good: it is recorded
    ``workflow:abandoned`` and its worktree removed (its branch stays). The Stop of an action link."""

    workflow_id: WorkflowId
    version: Annotated[int, msgspec.Meta(ge=1)]
    """The workflow version of the card (``workflow:approval_needed``) or of the halt (``workflow:halted``) the
    user saw: refused with ``card_moved_on`` unless the workflow still waits there."""
    reason: Annotated[str, msgspec.Meta(max_length=10_000)] = "ended by user"
    source: Source = "api"
    """Where the request came from (the channel of an action link); recorded in ``workflow:abandoned``."""


class ApproveExtension(Command, kw_only=True):
    """Let the pulse that asked for more time continue in a new turn."""

    workflow_id: WorkflowId
    message: Annotated[str, msgspec.Meta(max_length=100_000)] | None = None


class AnswerQuestions(Command, kw_only=True):
    """Answer the agent's ``ask_questions``; the agent continues with the answers."""

    workflow_id: WorkflowId
    answers: Annotated[list[Text], msgspec.Meta(min_length=1)]
    """One answer per question, in the order asked (free text; for a choice, the option's text)."""


class StopBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows/{id}/stop`` (optional body). Text fields: visible, no control character but
    tab and newlines (they reach the agent and the terminal of whoever lists the workflow)."""

    reason: Reason = "stopped by user"


class ResumeBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows/{id}/resume`` (optional body)."""

    message: VisibleText | None = None


class AbandonBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows/{id}/abandon``."""

    version: Annotated[int, msgspec.Meta(ge=1)]
    """The version of the card awaiting approval (``card_version`` of the workflow's view) or of the halt
    (``version`` of its ``workflow:halted``) the user decided on."""
    reason: Reason = "ended by user"


class ApproveExtensionBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows/{id}/extension/approve`` (optional body)."""

    message: VisibleText | None = None


class AnswerQuestionsBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows/{id}/answers``."""

    answers: Annotated[list[VisibleText], msgspec.Meta(min_length=1)]
