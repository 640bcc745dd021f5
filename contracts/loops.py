"""Pulse Protocol loop sessions (seed 001): commands, queries, replies and the HTTP bodies.

A loop session hands a goal to agents that iterate on it unattended on the session's own branch: one
agent turn per iteration, one commit per iteration that changed files, one signal per iteration
(CONTINUE, COMPLETE, BLOCKED) deciding what happens next. The orchestrator answers these on
``autarch.svc.orchestrator.<verb>``; the gateway serves them at ``/api/pulse`` with the seed's
camelCase bodies. A session's events go on the stream with the session id in the workflow token, so
``/api/events?workflow=<session id>`` follows one session.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from .base import UUID_PATTERN, Command, Query, Reply
from .http import GIT_BRANCH, TEXT, TITLE, Reason
from .http import Text as VisibleText

__all__ = [
    "ADDRESS_RULES",
    "AbortLoop",
    "AbortLoopBody",
    "AddressedTarget",
    "AnchorStrategy",
    "ContextStrategy",
    "CreatedBy",
    "ForkLoop",
    "ForkLoopBody",
    "GetLoop",
    "IterationStatus",
    "IterationView",
    "ListLoops",
    "LoopErrorCode",
    "LoopList",
    "LoopStatus",
    "LoopSummary",
    "LoopView",
    "NotifyKind",
    "NotifyTarget",
    "PauseLoop",
    "ProgressEntry",
    "ResumeLoop",
    "ResumeLoopBody",
    "Signal",
    "StartLoop",
    "StartLoopBody",
    "missing_address",
]

LoopStatus = Literal["pending", "running", "complete", "blocked", "failed", "aborted", "paused"]
"""pending → running → complete | blocked | failed | aborted | paused (seed 001). ``pending``: accepted, its first
iteration not started yet; ``blocked``: waits for a person, who may resume it; ``failed``: cannot go on (its
repository is gone)."""
FINISHED_STATUSES: frozenset[str] = frozenset({"complete", "failed", "aborted"})
"""Statuses a session never leaves (blocked and paused sessions can be resumed)."""
IterationStatus = Literal["pending", "dispatched", "running", "complete", "failed", "timeout"]
Signal = Literal["CONTINUE", "COMPLETE", "BLOCKED"]
AnchorStrategy = Literal["chained", "explicit", "semantic", "temporal", "none"]
"""How the iteration's anchor turn was found, in the seed's priority order (``none``: nothing recorded yet)."""
ContextStrategy = Literal["none", "prefetch", "mcp", "hybrid"]
"""``prefetch``: the anchor's slice and search results go into the prompt; ``mcp``: the agent searches history
with tools; ``hybrid``: both; ``none``: neither."""
CreatedBy = Literal["api", "cli", "mcp", "telegram", "sms"]
"""Who started the session: seed 001's ``telegram``/``sms``/``api``/``cli``, and ``mcp`` (the MCP server). The
notifier starts sessions from Telegram commands (``telegram``); ``sms`` is accepted from any client that starts a
session on behalf of a text message (no SMS command is received by Autarch itself)."""
NotifyKind = Literal["webhook", "slack", "discord", "telegram", "sms"]

SessionId = Annotated[str, msgspec.Meta(pattern=UUID_PATTERN)]
# Names, goals and messages reach agents and terminals: visible text, no control character (contracts/http.py).
ProjectName = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=TITLE)]
ProjectPath = Annotated[str, msgspec.Meta(min_length=2, max_length=4096, pattern=r"^/[^\x00-\x1f\x7f-\x9f]*$(?!\n)")]
Goal = Annotated[str, msgspec.Meta(min_length=1, max_length=100_000, pattern=TEXT)]
MaxIterations = Annotated[int, msgspec.Meta(ge=1, le=10_000)]
"""The orchestrator also refuses more than its ``loop_max_iterations_limit`` setting."""
BranchName = Annotated[str, msgspec.Meta(min_length=1, max_length=250, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$(?!\n)")]
BodyBranchName = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=GIT_BRANCH)]
"""A branch name at the HTTP door: every rule the git service applies (``..``, ``//``, ``.lock``, a trailing ``/``
or ``.``, its 200 characters) is in the document, so a name it states as valid is one git takes."""
TurnId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Message = Annotated[str, msgspec.Meta(max_length=100_000)]
Script = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$(?!\n)")]
TokenBudget = Annotated[int, msgspec.Meta(ge=1)]
CostBudget = Annotated[float, msgspec.Meta(gt=0)]


class NotifyTarget(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Where the notifier delivers a session's notifications (seed 001: Telegram if ``chat_id`` is set, SMS if
    ``phone_number`` is, Discord if ``discord_thread_id`` is; webhooks and Slack beside them).

    ``webhook``: a JSON POST of the notification to ``url``; ``slack``: Slack's incoming-webhook format at ``url``;
    ``discord``: into the thread ``discord_thread_id`` through the Bot API (the bot token is a notifier setting),
    or through the Discord webhook at ``url`` (into that thread when both are given); ``telegram``: the Bot API's
    ``sendMessage`` to ``chat_id``; ``sms``: a text message to ``phone_number`` through a Twilio-compatible API
    (account and sender are notifier settings). :func:`missing_address` says what a kind needs.
    """

    kind: NotifyKind
    url: Annotated[str, msgspec.Meta(pattern=r"^https?://", max_length=2048)] | None = None
    chat_id: Annotated[str, msgspec.Meta(min_length=1, max_length=100)] | None = None
    discord_thread_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,20}$(?!\n)")] | None = None
    """A Discord thread (or channel) id, a snowflake."""
    phone_number: Annotated[str, msgspec.Meta(pattern=r"^\+[1-9][0-9]{6,14}$(?!\n)")] | None = None
    """E.164: ``+`` and 7 to 15 digits."""


def _has(*fields: str) -> dict[str, object]:
    return {"required": list(fields), "properties": {f: {"type": "string"} for f in fields}}


def _when(kind: str, then: dict[str, object]) -> dict[str, object]:
    return {"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]}, "then": then}


ADDRESS_RULES: dict[str, object] = {"allOf": [
    _when("telegram", _has("chatId")),
    _when("sms", _has("phoneNumber")),
    _when("discord", {"anyOf": [_has("url"), _has("discordThreadId")]}),
    _when("webhook", _has("url")),
    _when("slack", _has("url")),
]}
""":func:`missing_address` as JSON Schema, for the API document: each kind with the address it needs."""

AddressedTarget = Annotated[NotifyTarget, msgspec.Meta(extra_json_schema=ADDRESS_RULES)]
"""A notify target whose document states the address its kind needs (decoding checks only the fields: the
orchestrator refuses a start naming a target without its address, with :func:`missing_address`'s words)."""


def missing_address(target: NotifyTarget) -> str | None:
    """What ``target`` lacks to be deliverable (a start naming it is refused), or None."""
    if target.kind == "telegram" and not target.chat_id:
        return "a telegram target needs chatId"
    if target.kind == "sms" and not target.phone_number:
        return "an sms target needs phoneNumber"
    if target.kind == "discord" and not (target.url or target.discord_thread_id):
        return "a discord target needs url (a webhook) or discordThreadId (a thread the bot posts in)"
    if target.kind in ("webhook", "slack") and not target.url:
        return f"a {target.kind} target needs url"
    return None


class LoopErrorCode:
    """Domain error codes of loop sessions (besides ``not_found`` / ``bad_request`` / ``conflict``)."""

    NOT_RUNNING = "loop_not_running"
    """Pause of a session that is not running."""
    NOT_RESUMABLE = "loop_not_resumable"
    """Resume of a session that is neither blocked nor paused."""
    FINISHED = "loop_finished"
    """A control sent to a session that is complete, failed or aborted."""
    UNKNOWN_ANCHOR = "unknown_anchor"
    """``anchor_turn_id`` names no recorded agent turn."""
    NOT_A_REPOSITORY = "not_a_repository"
    """``project_path`` is not the top of a git repository."""
    MEMORY_UNAVAILABLE = "turn_memory_unavailable"
    """An explicit anchor cannot be checked: the turn memory (the indexer) did not answer. Not ``unavailable``,
    which would tell a client that the orchestrator itself is down and the request is worth repeating at once."""

    CARD_MOVED_ON = "card_moved_on"
    """A Stop link (``blocked_at``) for a block the session has left (resumed, or ended)."""

    ITERATION_OUT_OF_RANGE = "iteration_out_of_range"
    """A fork at an iteration the session has not ended (details: ``at_iteration``, ``iterations_ended``), or at
    its last allowed one (nothing would be left to run)."""

    CONFLICTS = frozenset({NOT_RUNNING, NOT_RESUMABLE, FINISHED, CARD_MOVED_ON})
    """The codes that mean "not in this state" (HTTP 409)."""


class StartLoop(Command, kw_only=True):
    """Create a loop session and start its first iteration. Idempotent on ``session_id``."""

    session_id: SessionId
    """Chosen by the caller (a UUID) so that a retried start cannot create a second session."""
    project_name: ProjectName
    project_path: ProjectPath
    goal: Goal
    max_iterations: MaxIterations = 10
    anchor_turn_id: TurnId | None = None
    branch_name: BranchName | None = None
    """Default ``autarch/loop-<first 8 characters of the id>``."""
    base_branch: BranchName | None = None
    """The branch the session's branch starts from (default: the repository's checked-out branch)."""
    context_strategy: ContextStrategy = "prefetch"
    notify: list[NotifyTarget] = []
    created_by: CreatedBy = "api"
    script: Script | None = None
    """Scenario selector for the scripted model (tests, ``autarch demo loop``); ignored by real models."""
    max_tokens: TokenBudget | None = None
    """The session's token budget (every iteration's tokens summed); spent → the session blocks."""
    max_cost_usd: CostBudget | None = None
    """The session's cost budget in US dollars at list prices; spent → the session blocks."""


class ForkLoop(Command, kw_only=True):
    """Make a new session whose history is ``forked_from``'s up to the end of its iteration ``at_iteration``, on a
    branch cut from the commit its branch had then; it goes on with the next iteration, anchored on that one's hint
    (the chained anchor). The original is only read. Idempotent on ``session_id``."""

    session_id: SessionId
    """The new session's id, chosen by the caller (a UUID) so that a retried fork cannot make a second one."""
    forked_from: SessionId
    at_iteration: Annotated[int, msgspec.Meta(ge=1)]
    branch_name: BranchName | None = None
    """Default ``autarch/loop-<first 8 characters of the new id>``."""
    script: Script | None = None
    """Scenario selector for the scripted model from here on (default: the original's)."""


ITERATIONS_PER_VIEW = 100
"""Iterations a session's view carries unless asked for others: the latest. A view of every iteration of a long
session (each with its prompt and full output) outgrows a message (about 380 iterations of a real loop)."""


class GetLoop(Query, kw_only=True):
    session_id: SessionId
    iterations_from: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """The first iteration (its number) the view carries; None: the latest ``iterations_limit``."""
    iterations_limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = ITERATIONS_PER_VIEW


class ListLoops(Query, kw_only=True):
    status: LoopStatus | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0


class PauseLoop(Command, kw_only=True):
    """Pause after the current iteration (the running turn finishes and is recorded)."""

    session_id: SessionId


class ResumeLoop(Command, kw_only=True):
    """Resume a blocked or paused session; ``message`` goes into the next iteration's prompt."""

    session_id: SessionId
    message: Message | None = None


class AbortLoop(Command, kw_only=True):
    """Stop at once: the running turn is cancelled, its work kept as a recovery commit on the pulse branch."""

    session_id: SessionId
    reason: Message = "aborted by the user"
    blocked_at: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """Stop only the session blocked at this iteration (``iteration_number`` of its ``loop:blocked``, as a Stop
    action link carries): refused with ``card_moved_on`` once it was resumed or ended. None: whatever its state."""


class IterationView(msgspec.Struct, kw_only=True):
    """One iteration (seed 001 ``pulse_iterations``)."""

    id: str
    session_id: str
    iteration_number: int
    """1-indexed."""
    status: IterationStatus
    task_content: str
    """The prompt the agent was given."""
    agent_session_id: str | None = None
    """The agent runner session of this iteration (the seed's ``inbox_task_id``)."""
    signal: Signal | None = None
    signal_source: Literal["explicit", "inferred", "default", "breaker", "limit"] | None = None
    """``explicit``: a ``<signal>`` tag; ``inferred``: the seed's pattern table; ``default``: no pattern (BLOCKED);
    ``breaker``: the no-progress breaker; ``limit``: a time limit or budget ended the iteration."""
    reason: str | None = None
    """Why the session blocked (the BLOCKED signal's reason, the breaker's, the failure's)."""
    output_summary: str | None = None
    output_full: str | None = None
    commit_hash: str | None = None
    files_changed: list[str] = []
    anchor_turn_id: str | None = None
    anchor_strategy: AnchorStrategy | None = None
    anchor_resolution_ms: float | None = None
    salience: float | None = None
    depth: int | None = None
    slice_id: str | None = None
    slice_turn_ids: list[str] = []
    node_count: int = 0
    anchor_hint_next: str | None = None
    anchor_hint_reason: str | None = None
    context_tokens: int = 0
    tokens_used: int = 0
    cost_usd: float = 0.0
    started_at: datetime | None = None
    ended_at: datetime | None = None


class ProgressEntry(msgspec.Struct, kw_only=True):
    """One line of the session's ``progress_log``: what an iteration did."""

    iteration: int
    signal: Signal
    summary: str
    commit_hash: str | None = None
    turn_id: str | None = None
    """The iteration's agent turn: what a later iteration names in an ``<anchor_hint>``."""


class LoopView(Reply, kw_only=True):
    """A session with its iterations (seed 001 ``pulse_sessions``)."""

    id: str
    project_name: str
    project_path: str
    goal: str
    max_iterations: int
    current_iteration: int
    status: LoopStatus
    last_signal: Signal | None
    progress_log: list[ProgressEntry]
    anchor_turn_id: str | None
    branch_name: str
    created_by: CreatedBy
    total_commits: int
    total_tokens_used: int
    total_cost_usd: float
    context_strategy: ContextStrategy
    notify: list[NotifyTarget]
    created_at: datetime
    updated_at: datetime
    status_reason: str | None = None
    """Why the session is blocked, failed, aborted or complete (``max iterations reached``, the BLOCKED reason…)."""
    pause_requested: bool = False
    worktree_path: str | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    iterations: list[IterationView] = []
    """The latest iterations (at most ``ITERATIONS_PER_VIEW``), or the page ``GetLoop`` asked for, in order."""
    iterations_total: int = 0
    """How many iterations the session has (``iterations`` may hold only some of them)."""
    base_commit: str | None = None
    """The commit the session's branch was cut from (None until the branch exists): a replay starts there."""
    forked_from: str | None = None
    """For a fork: the session it was forked from, after its iteration ``forked_at_iteration``."""
    forked_at_iteration: int | None = None


class LoopSummary(msgspec.Struct, kw_only=True):
    id: str
    project_name: str
    goal: str
    status: LoopStatus
    current_iteration: int
    max_iterations: int
    last_signal: Signal | None
    total_commits: int
    branch_name: str
    updated_at: datetime
    created_at: datetime
    """When the session was started (lists are in this order)."""


class LoopList(Reply, kw_only=True):
    items: list[LoopSummary]
    total: int


# --- HTTP bodies (seed 001's camelCase) ------------------------------------------------------------------


class StartLoopBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """``POST /api/pulse/start``."""

    project_name: ProjectName
    project_path: ProjectPath
    goal: Goal
    max_iterations: MaxIterations = 10
    """At most 10 000, and at most the installation's ``loop_max_iterations_limit`` (the document's maximum)."""
    anchor_turn_id: TurnId | None = None
    branch_name: BodyBranchName | None = None
    base_branch: BodyBranchName | None = None
    context_strategy: ContextStrategy = "prefetch"
    notify: list[AddressedTarget] = []
    created_by: CreatedBy = "api"
    session_id: SessionId | None = None
    """Optional: a client that retries its start sends the same id (default: a new UUID)."""
    script: Script | None = None
    max_tokens: TokenBudget | None = None
    max_cost_usd: CostBudget | None = None


class ForkLoopBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """``POST /api/pulse/{id}/fork``."""

    at_iteration: Annotated[int, msgspec.Meta(ge=1)]
    """The iteration (an ended one, before the session's last allowed) the fork starts after."""
    session_id: SessionId | None = None
    """Optional: a client that retries its fork sends the same id (default: a new UUID)."""
    branch_name: BodyBranchName | None = None
    script: Script | None = None


class ResumeLoopBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    message: VisibleText | None = None


class AbortLoopBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    reason: Reason = "aborted by the user"
