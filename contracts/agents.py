"""The agent runner's wire: block tools (seed 004, "Structured Output Tools"), commands, queries and replies.

Block tools are real tool calls here, not ``:::autarch-*`` markdown blocks. Their argument Structs
carry the seed's exact field names (``submit_scope`` in snake_case, the others in camelCase as the
seed's schemas show) and the JSON Schema the model is offered is generated from them, so what the
model sees and what the runner validates cannot disagree. A block tool is never executed: it ends
the turn, and its arguments become the turn's outcome.

Requests go to ``autarch.svc.agent_runner.<verb>`` (``subjects.AGENT_RUNNER_VERBS``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from .base import Command, Query, Reply
from .tool_args import ToolArgs
from .tool_catalog import Role, ToolDefinition, input_schema

__all__ = [
    "BLOCK_TOOLS",
    "BLOCK_TOOL_ARGUMENTS",
    "BLOCK_TOOL_DESCRIPTIONS",
    "ROLE_BLOCK_TOOLS",
    "TURN_ENDING_TOOLS",
    "AskQuestionsArgs",
    "Baseline",
    "Challenge",
    "CompletePreflightArgs",
    "CompletePulseArgs",
    "Dependency",
    "GetSession",
    "IntegrationPoint",
    "KeyFile",
    "ListSessions",
    "Pattern",
    "PlannedPulse",
    "Question",
    "RequestExtensionArgs",
    "SendMessage",
    "SessionList",
    "SessionStopped",
    "SessionSummary",
    "SessionView",
    "StartSession",
    "StopSession",
    "SubmitPlanArgs",
    "SubmitResearchArgs",
    "SubmitScopeArgs",
    "ThoughtView",
    "ToolCallView",
    "TurnAccepted",
    "TurnDelta",
    "TurnOutcome",
    "TurnUsage",
    "TurnView",
    "UnresolvedIssue",
    "block_tool_definitions",
]

Text = Annotated[str, Meta(min_length=1)]
SessionId = Annotated[str, Meta(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]


# --- block tool arguments (seed 004) --------------------------------------------------------------


class SubmitScopeArgs(ToolArgs, kw_only=True):
    title: Annotated[str, Meta(min_length=1, description="Brief title of what this scope covers")]
    description: Annotated[str, Meta(min_length=1, description="A few sentences describing the scope in detail")]
    in_scope: Annotated[list[str], Meta(description="List of items explicitly in scope")]
    out_of_scope: Annotated[list[str], Meta(description="List of items explicitly out of scope")]
    recommended_path: Annotated[Literal["quick", "full"], Meta(description="Recommended workflow path")]
    constraints: Annotated[
        list[str] | None, Meta(description="List of binding constraints that must not be violated")
    ] = None
    rationale: Annotated[
        str | None, Meta(description="Explanation of why the recommended path was chosen")
    ] = None


class KeyFile(ToolArgs, kw_only=True, rename="camel"):
    path: str
    purpose: str
    line_ranges: Annotated[str | None, Meta(description='e.g., "45-120, 200-250"')] = None


class Pattern(ToolArgs, kw_only=True, rename="camel"):
    category: Annotated[str, Meta(description='e.g., "error-handling", "dependency-injection"')]
    description: str
    example: Annotated[str, Meta(description="Describe in words, not code")]
    locations: Annotated[list[str], Meta(description='e.g., ["file.ts:10-50", "other.ts:100-120"]')]


class Dependency(ToolArgs, kw_only=True, rename="camel"):
    name: str
    purpose: str
    usage_example: str


class IntegrationPoint(ToolArgs, kw_only=True, rename="camel"):
    location: str
    description: str
    existing_code: Annotated[str, Meta(description="Reference to relevant files/lines")]


class Challenge(ToolArgs, kw_only=True, rename="camel"):
    issue: str
    mitigation: str


class SubmitResearchArgs(ToolArgs, kw_only=True, rename="camel"):
    summary: Annotated[
        str, Meta(min_length=1, description="Concise, factual overview of how the relevant system works")
    ]
    key_files: Annotated[list[KeyFile], Meta(description="Important files discovered during research")]
    recommendations: Annotated[
        list[str], Meta(description="Clear, directive guidance for implementation (no alternatives, no hedging)")
    ]
    patterns: Annotated[
        list[Pattern] | None, Meta(description="Observed patterns used consistently across the codebase")
    ] = None
    dependencies: Annotated[
        list[Dependency] | None, Meta(description="External libraries or modules relevant to the work")
    ] = None
    integration_points: Annotated[
        list[IntegrationPoint] | None, Meta(description="Locations where new behavior should attach")
    ] = None
    challenges: Annotated[list[Challenge] | None, Meta(description="Technical or architectural risks")] = None


class PlannedPulse(ToolArgs, kw_only=True, rename="camel"):
    id: Annotated[str, Meta(min_length=1, description='e.g., "pulse-1", "pulse-2"')]
    title: Annotated[str, Meta(min_length=1, description="Short, concrete pulse title")]
    description: Annotated[str, Meta(description="What this pulse accomplishes and why")]
    expected_changes: Annotated[list[str], Meta(description="File paths expected to be modified")]
    estimated_size: Annotated[
        Literal["small", "medium", "large"],
        Meta(description="small: < 50 lines of change; medium: 50-200 lines; large: > 200 lines (avoid)"),
    ]
    depends_on: Annotated[list[str] | None, Meta(description="IDs of pulses that must complete first")] = None


class SubmitPlanArgs(ToolArgs, kw_only=True, rename="camel"):
    approach_summary: Annotated[
        str, Meta(min_length=1, description="High-level description of how the solution will be implemented")
    ]
    pulses: Annotated[list[PlannedPulse], Meta(min_length=1, description="Ordered list of execution units")]


class RequestExtensionArgs(ToolArgs, kw_only=True):
    reason: Annotated[str, Meta(min_length=1, description="Why additional time/exploration is required")]
    completed: Annotated[list[str], Meta(description="Concrete work already completed in this turn")]
    remaining: Annotated[list[str], Meta(description="Concrete work still required")]


class Question(ToolArgs, kw_only=True):
    type: Literal["single_select", "multi_select", "ranked", "free_text"]
    prompt: Annotated[str, Meta(min_length=1)]
    options: Annotated[
        list[str] | None, Meta(description="Required for single_select, multi_select, ranked")
    ] = None


class AskQuestionsArgs(ToolArgs, kw_only=True):
    questions: Annotated[list[Question], Meta(min_length=1, description="Array of structured questions")]


class UnresolvedIssue(ToolArgs, kw_only=True):
    issue: str
    reason: str


class CompletePulseArgs(ToolArgs, kw_only=True, rename="camel"):
    summary: Annotated[
        str,
        Meta(min_length=1, description='Conventional commit message (e.g., "feat(auth): implement login flow")'),
    ]
    files_changed: Annotated[list[str], Meta(description="List of file paths that were modified")]
    unresolved_issues: Annotated[
        list[UnresolvedIssue] | None,
        Meta(description="Acknowledged issues that couldn't be fixed (escape hatch)"),
    ] = None


class CompletePreflightArgs(ToolArgs, kw_only=True, rename="camel"):
    summary: Annotated[str, Meta(min_length=1, description="Brief description of setup completed")]
    setup_commands: Annotated[list[str], Meta(description="List of commands that were executed")]
    build_success: Annotated[bool, Meta(description="Whether the project builds successfully")]
    baselines_recorded: Annotated[int, Meta(ge=0, description="Count of baseline issues recorded")]


BLOCK_TOOL_ARGUMENTS: dict[str, type[ToolArgs]] = {
    "submit_scope": SubmitScopeArgs,
    "submit_research": SubmitResearchArgs,
    "submit_plan": SubmitPlanArgs,
    "request_extension": RequestExtensionArgs,
    "ask_questions": AskQuestionsArgs,
    "complete_pulse": CompletePulseArgs,
    "complete_preflight": CompletePreflightArgs,
}
"""Every block tool and the Struct its arguments decode into."""

BLOCK_TOOLS = frozenset(BLOCK_TOOL_ARGUMENTS)

# Each description: the seed's one-line purpose, then its "LLM Description" text verbatim.
BLOCK_TOOL_DESCRIPTIONS: dict[str, str] = {
    "submit_scope": """Submits a finalized scope card for user approval. Used when all Four Pillars (outcome, \
boundaries, constraints, success criteria) are clearly defined.

When you're ready to define the scope, emit a single structured block.
The block IS the scope. Anything outside it doesn't count.
After emitting the scope block, stop. No additional content.""",
    "submit_research": """Submits completed research findings for user approval.

When—and only when—you have sufficient understanding to guide implementation, end the message with an \
autarch-research block.

Before producing it:
- Review accumulated notes
- Ensure all key findings are incorporated""",
    "submit_plan": """Submits an execution plan for user approval, after verifying research findings against the \
codebase.

When the plan is ready, you must end your message with a single :::autarch-plan block.
This block is the execution contract.""",
    "request_extension": """Requests additional execution time: a yield point that pauses execution, allows \
context compaction, and continues in a subsequent turn.

autarch-extend is a yield.

When you emit autarch-extend, you are:
- Pausing execution
- Yielding control to the user
- Allowing context compaction to occur

You MUST NOT perform additional work after emitting it.""",
    "ask_questions": """Asks structured questions requiring user input, when you cannot proceed without explicit \
user decisions.

All questions use autarch-questions. Period. No exceptions.

You cannot ask questions in prose, bullets, or inline text.
If you need clarification, emit an autarch-questions block and stop.""",
    "complete_pulse": """Signals pulse completion with a summary suitable for a commit message.

Only when ALL pulse requirements are satisfied—code complete and clean—may you mark the pulse as done.

The summary field becomes the commit message. Format it as a Conventional Commit.""",
    "complete_preflight": """Signals preflight environment setup is complete.

When environment setup is complete, provide a summary of:
1. What setup commands were run
2. Whether the build succeeded
3. How many baseline issues were recorded (if any)""",
}
"""LLM description of each block tool."""

ROLE_BLOCK_TOOLS: dict[str, tuple[str, ...]] = {
    "discussion": (),
    "scoping": ("submit_scope", "ask_questions"),
    "research": ("submit_research", "request_extension", "ask_questions"),
    "plan": ("submit_plan",),
    "preflight": ("complete_preflight",),
    "pulsing": ("complete_pulse", "request_extension"),
    "review": (),
}
"""Seed 004's "Block Tool Availability by Agent" table. Review ends its turn with ``complete_review``,
a regular tool the tools service executes (see :data:`TURN_ENDING_TOOLS`)."""

TURN_ENDING_TOOLS = BLOCK_TOOLS | {"complete_review"}
"""Tools that end the turn and obey the block rules (one per message, last, alone)."""


def block_tool_definitions(role: str) -> list[ToolDefinition]:
    """The block tools ``role`` is offered, in the seed's table order."""
    if role not in ROLE_BLOCK_TOOLS:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLE_BLOCK_TOOLS)}")
    return [
        ToolDefinition(
            name=name,
            description=BLOCK_TOOL_DESCRIPTIONS[name],
            input_schema=input_schema(BLOCK_TOOL_ARGUMENTS[name]),
        )
        for name in ROLE_BLOCK_TOOLS[role]
    ]


# --- commands, queries and replies --------------------------------------------------------------------


class Baseline(msgspec.Struct, kw_only=True):
    """A pre-existing build, lint or test issue recorded by preflight (seed 000, "Baseline Structure")."""

    issue_type: Literal["Error", "Warning"]
    source: Literal["Build", "Lint", "Test"]
    pattern: Text
    """An error code or a message (or part of one) as the tool prints it."""
    file_path: str | None = None
    """Only output lines that also name this file match."""
    description: str | None = None


class StartSession(Command, kw_only=True):
    """Open an agent session and start its first turn with ``kickoff``.

    Idempotent on ``session_id``: the same start twice opens one session (and answers with its first
    turn); the same id with other fields is a ``conflict``.
    """

    session_id: SessionId
    """Chosen by the caller (a UUID) so that a retried start cannot open a second session."""
    role: Role
    root: Text
    """Absolute path of the worktree (or project checkout) the session's tools work in."""
    kickoff: Text
    """The first user message: the task, with whatever context the caller gives."""
    workflow_id: str | None = None
    """The workflow the session works for; None for a channel discussion."""
    channel_id: str | None = None
    script: str | None = None
    """Scenario selector for the scripted model (sent as header ``x-autarch-script``); ignored by real models."""
    notes: list[str] = []
    """Notes already taken in this workflow stage (by earlier sessions); injected on every turn."""
    baselines: list[Baseline] = []
    """Known issues preflight recorded (seed 000): a pulse's tool failure that only repeats them does not
    hold back ``complete_pulse``."""


class SendMessage(Command, kw_only=True):
    """Start a new turn with the user's ``text``; answered at once, the turn ends with ``turn:completed``.

    Refused with ``conflict`` while a turn is running or once the session is closed.
    """

    session_id: SessionId
    text: Text
    message_id: str | None = None
    """Optional idempotency key: the same message id twice starts one turn (and answers with it)."""
    notes: list[str] | None = None
    """Replaces the stage notes given at start (None keeps them)."""


class StopSession(Command, kw_only=True):
    """Cancel the running turn (outcome ``cancelled``); with ``close`` the session ends too."""

    session_id: SessionId
    reason: str = "stopped by user"
    close: bool = False


class GetSession(Query, kw_only=True):
    session_id: SessionId


class ListSessions(Query, kw_only=True):
    workflow_id: str | None = None
    """Only the sessions of this workflow."""
    running: bool | None = None
    """Only sessions with (True) or without (False) a running turn."""


class TurnAccepted(Reply, kw_only=True):
    session_id: str
    turn_id: str
    created: bool = True
    """False when this repeated an earlier start or message (idempotency)."""


class SessionStopped(Reply, kw_only=True):
    session_id: str
    turn_id: str | None = None
    """The turn that was cancelled; None when no turn was running."""
    closed: bool = False


class TurnUsage(msgspec.Struct, kw_only=True):
    """Token counts of one model reply or the sum over a turn (Anthropic's ``usage`` fields)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class TurnOutcome(msgspec.Struct, kw_only=True):
    """How a turn ended.

    ``kind`` is ``block`` (``tool`` and ``arguments`` name the block tool, or ``complete_review``),
    ``end_turn`` (the model stopped without a tool), ``cancelled``, ``error``, ``budget_exceeded`` or
    ``step_limit`` (``agent_max_steps`` model calls in one turn: seed 000's iteration limit).
    """

    kind: Literal["block", "end_turn", "cancelled", "error", "budget_exceeded", "step_limit"]
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    detail: str = ""


class TurnDelta(msgspec.Struct, kw_only=True):
    """A live piece of a turn's text or thinking, on core NATS (``subjects.deltas``), never persisted.

    ``turn:completed`` carries the full text, so a listener that missed deltas loses nothing.
    """

    type: Literal["turn:message_delta", "turn:thought_delta"]
    session_id: str
    turn_id: str
    text: str
    workflow_id: str | None = None
    restart: bool = False
    """The model call was retried after its stream broke: drop what this turn's current reply streamed so
    far (of this ``type``) and start again from this delta."""


class ToolCallView(msgspec.Struct, kw_only=True):
    tool_use_id: str
    name: str
    input: dict[str, Any]
    step: int
    """The model reply (0-based within the turn) that asked for it."""
    output: str | None = None
    """None while it runs (or if it never ran)."""
    is_error: bool = False
    duration_ms: float = 0.0
    replayed: bool = False


class ThoughtView(msgspec.Struct, kw_only=True):
    step: int
    text: str


class TurnView(msgspec.Struct, kw_only=True):
    turn_id: str
    index: int
    user_text: str
    started_at: datetime
    messages: list[str]
    """The assistant's text blocks, in order."""
    tool_calls: list[ToolCallView]
    thoughts: list[ThoughtView]
    usage: TurnUsage
    cost_usd: float
    model_calls: int
    completed_at: datetime | None = None
    outcome: TurnOutcome | None = None
    """None while the turn runs."""
    violations: list[str] = []
    """Block-tool rule violations the model was told about."""


class SessionView(Reply, kw_only=True):
    session_id: str
    role: str
    root: str
    model: str
    status: Literal["idle", "running", "closed"]
    turns: list[TurnView]
    usage: TurnUsage
    cost_usd: float
    notes: list[str]
    created_at: datetime
    workflow_id: str | None = None
    channel_id: str | None = None
    compacted_through: int = -1
    """Index of the last turn replaced by a digest in model requests (-1: none)."""


class SessionSummary(msgspec.Struct, kw_only=True):
    session_id: str
    role: str
    status: str
    turns: int
    workflow_id: str | None = None
    cost_usd: float = 0.0


class SessionList(Reply, kw_only=True):
    items: list[SessionSummary]
