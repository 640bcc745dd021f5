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

from .base import UUID_PATTERN, Command, Query, Reply
from .beads import VerificationEvidence, WorkerDiscipline
from .git import COMMIT_TYPES
from .http import MAX_COST_IDS
from .tool_args import ToolArgs
from .tool_catalog import Role, ToolDefinition, input_schema

__all__ = [
    "BLOCK_TOOLS",
    "BLOCK_TOOL_ARGUMENTS",
    "BLOCK_TOOL_DESCRIPTIONS",
    "COMPLETION_REJECTED",
    "ESCAPE_HATCH_FIELD",
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
    "PlannedTddSteps",
    "Question",
    "ReplyView",
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
    "WorkflowCostList",
    "WorkflowCosts",
    "block_tool_definitions",
]

Text = Annotated[str, Meta(min_length=1)]
SessionId = Annotated[str, Meta(pattern=UUID_PATTERN)]


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


class PlannedTddSteps(ToolArgs, kw_only=True):
    red: Annotated[str, Meta(min_length=1, description="A test command that must fail before production code")]
    green: Annotated[str, Meta(min_length=1, description="The same or another test command that must then pass")]


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
    # Bead fields (seed 002). A plan that gives ``verify`` for any pulse is a bead plan: its pulses run as beads
    # by parallel workers, and every pulse must then carry ``verify`` and a non-empty ``expectedChanges`` (the
    # bead's files) or it is bounced back to planning. A plan without them runs its pulses one after another.
    verify: Annotated[
        list[str] | None,
        Meta(description="Bead plans: shell commands that must pass before this pulse's commit (its verification)"),
    ] = None
    verification_evidence: Annotated[
        str | None,
        Meta(description="Bead plans: where the evidence is written (default history/<feature>/verification/<id>.md)"),
    ] = None
    testing_mode: Annotated[
        Literal["standard", "tdd-required"] | None,
        Meta(description="Bead plans: tdd-required needs tddSteps (a red command that fails first, then green)"),
    ] = None
    tdd_steps: Annotated[
        PlannedTddSteps | None, Meta(description="Bead plans: {red, green} commands for a tdd-required pulse")
    ] = None
    decision_refs: Annotated[list[str] | None, Meta(description="Decision ids (D1, D2 …) this pulse must keep")] = None
    learning_refs: Annotated[list[str] | None, Meta(description="Learning files to read before implementing")] = None
    priority: Annotated[
        Annotated[int, Meta(ge=0, le=4)] | None, Meta(description="0 (critical) … 4 (backlog); default 2")
    ] = None


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
        Meta(description="Failures that genuinely cannot be fixed within this pulse, each with the reason; "
                         "halts automatic execution until a person reviews the pulse"),
    ] = None


class CompletePreflightArgs(ToolArgs, kw_only=True, rename="camel"):
    summary: Annotated[str, Meta(min_length=1, description="Brief description of setup completed")]
    setup_commands: Annotated[list[str], Meta(description="List of commands that were executed")]
    build_success: Annotated[bool, Meta(description="Whether the project builds successfully")]
    baselines_recorded: Annotated[int, Meta(ge=0, description="Count of baseline issues recorded")]
    recommended_mode: Annotated[
        Literal["swarm", "single-worker"] | None,
        Meta(description="Whether parallel workers are safe here (shared build state, a single database, "
                         "ports): single-worker runs one worker at a time"),
    ] = None


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

_YIELD_RULES = """\
Calling this tool ends your turn: it is a yield, and control passes to the person (or the system) until the \
next message. Call it on its own: no other tool call in the same message, and never together with another \
stage-completion tool. It must be the last content of your message: no text, caveats or tool calls after it. \
After calling it, stop."""

# Each description in our own words: what the tool is for and when to call it, then the yield rules above.
BLOCK_TOOL_DESCRIPTIONS: dict[str, str] = {
    "submit_scope": """Submit the finished scope card for the person to approve. Call it once all Four Pillars \
are settled: the outcome, the boundaries (what is in and what is out of scope), the binding constraints and the \
success criteria.

The call is the scope: only what you pass in its arguments counts, and anything you write outside it is not \
part of the scope. Put everything that matters into its fields.""",
    "submit_research": """Hand over your research findings, as a research card, for the person to approve.

Call it when, and only when, you understand the relevant part of the system well enough to guide the \
implementation. Before calling it, go over the notes you took and make sure every key finding is in the card.""",
    "submit_plan": """Submit the execution plan for the person to approve, after you have checked the research \
findings against the code.

Call it once, when the plan is ready. The plan you pass is the execution contract: its pulses are run as you \
list them.""",
    "request_extension": """Ask for more time: pause here and carry on in the next turn.

Calling it is a yield. Your execution pauses, control goes back to the person, and the earlier context may be \
compacted before you continue. Say why you need more time, what you completed in this turn and what remains. \
Do no more work in this turn once you have called it.

When researching, you must call it once you have made 8 research actions in one turn. When implementing a \
pulse, call it early if the pulse cannot be finished safely in this turn. Never combine it with a completion \
tool.""",
    "ask_questions": """Ask the person structured questions, when you cannot go on without their decision.

Every question goes through this tool, with no exception: never ask anything in prose, bullet points or inline \
text. Use single_select, multi_select or ranked (each with options) or free_text. Asking is a terminal yield: \
call it, then stop and wait for the answers.""",
    "complete_pulse": """Mark the pulse as done and hand over its commit message.

Call it only when every requirement of the pulse is satisfied and the code is complete and clean. The summary \
becomes the commit message: its first line must be a Conventional Commit, type(scope): description, with type \
one of """ + ", ".join(COMMIT_TYPES) + """ (the scope is optional; ! before the colon \
marks a breaking change). The call is refused while a tool failure of this session is unresolved (a failing \
command, a failed edit): fix it and check again first. Never combine it with request_extension.""",
    "complete_preflight": """Report that the environment setup is complete.

Pass a summary of the setup, the setup commands you ran, whether the build succeeded, and how many baseline \
issues you recorded with record_baseline (0 when there were none).""",
}
"""What each block tool is for; the model is offered this text followed by :data:`_YIELD_RULES`."""

ESCAPE_HATCH_FIELD = "unresolvedIssues"
"""``complete_pulse``'s escape hatch (seed 000): offered only once the session has opened it."""

COMPLETION_REJECTED = "completion_rejected"
"""The ``rule`` of the tool result ``{"error", "rule"}`` that refuses ``complete_pulse`` while tool failures
are unresolved (seed 000, "Completion Validation"); the orchestrator records each as ``pulse:completion_rejected``."""

_ESCAPE_HATCH_DESCRIPTION = """\
unresolvedIssues is available now. Use it only for failures that genuinely cannot be fixed within this pulse \
(a flaky test, an environment problem): list each issue with the reason it cannot be fixed. Using it halts \
automatic execution until a person has reviewed the pulse, so fix whatever can be fixed first."""

ROLE_BLOCK_TOOLS: dict[str, tuple[str, ...]] = {
    "discussion": (),
    "scoping": ("submit_scope", "ask_questions"),
    "research": ("submit_research", "request_extension", "ask_questions"),
    "plan": ("submit_plan",),
    "preflight": ("complete_preflight",),
    "pulsing": ("complete_pulse", "request_extension"),
    "review": (),
    "loop": (),
}
"""Seed 004's "Block Tool Availability by Agent" table (and ``loop``, seed 001's iterations, which have none).
Review ends its turn with ``complete_review``,
a regular tool the tools service executes (see :data:`TURN_ENDING_TOOLS`)."""

TURN_ENDING_TOOLS = BLOCK_TOOLS | {"complete_review"}
"""Tools that end the turn and obey the block rules (one per message, last, alone)."""


def block_tool_definitions(role: str, *, escape_hatch: bool = False) -> list[ToolDefinition]:
    """The block tools ``role`` is offered, in the seed's table order.

    ``complete_pulse`` carries its ``unresolvedIssues`` field only with ``escape_hatch`` (seed 000: the escape
    hatch is revealed after repeated rejections, not before).
    """
    if role not in ROLE_BLOCK_TOOLS:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLE_BLOCK_TOOLS)}")
    definitions = []
    for name in ROLE_BLOCK_TOOLS[role]:
        description = BLOCK_TOOL_DESCRIPTIONS[name]
        schema = input_schema(BLOCK_TOOL_ARGUMENTS[name])
        if name == "complete_pulse":
            if escape_hatch:
                description += "\n\n" + _ESCAPE_HATCH_DESCRIPTION
            else:
                schema["properties"].pop(ESCAPE_HATCH_FIELD)
        definitions.append(
            ToolDefinition(name=name, description=f"{description}\n\n{_YIELD_RULES}", input_schema=schema)
        )
    return definitions


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
    run_id: str | None = None
    """The run the session works for: a workflow, or a loop session (one iteration's agent); None for a channel
    discussion. Called ``workflow_id`` before issue 33 (``contracts.git.RUN_ID_WAS``)."""
    channel_id: str | None = None
    script: str | None = None
    """Scenario selector for the scripted model (sent as header ``x-autarch-script``); ignored by real models."""
    notes: list[str] = []
    """Notes already taken in this workflow stage (by earlier sessions); injected on every turn."""
    baselines: list[Baseline] = []
    """Known issues preflight recorded (seed 000): a pulse's tool failure that only repeats them does not
    hold back ``complete_pulse``."""
    lease_holder: str | None = None
    """A swarm worker's registered name: passed on every tool call (leases are enforced against it), and the
    runner renews the holder's file leases in the workflow while a turn of this session runs."""
    discipline: WorkerDiscipline | None = None
    """A swarm worker's rules: verification run fresh at ``complete_pulse`` (a failure refuses the close),
    and for ``tdd-required`` no production edit before the red step failed."""


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
    replies: bool = False
    """Also give each turn's model replies as the API sent them (``TurnView.replies``): what
    ``autarch workflow record`` turns into a scenario. Off by default: they repeat the text and tool calls."""


class ListSessions(Query, kw_only=True):
    run_id: str | None = None
    """Only the sessions of this run (a workflow or a loop session)."""
    running: bool | None = None
    """Only sessions with (True) or without (False) a running turn."""


class WorkflowCosts(Query, kw_only=True):
    """What each of these workflows' sessions spent: answered from the runner's running totals (its budget), so
    it costs the number of ids asked, not the number of sessions ever run."""

    workflow_ids: Annotated[list[Annotated[str, Meta(pattern=UUID_PATTERN)]], Meta(max_length=MAX_COST_IDS)]


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
    ``end_turn`` (the model stopped without a tool), ``cancelled``, ``error``, ``budget_exceeded``,
    ``step_limit`` (``agent_max_steps`` model calls in one turn: seed 000's iteration limit), ``handoff``,
    ``refusal`` (the model refused to go on: ``detail`` gives the API's reason and the model's words) or
    ``context_overflow`` (the request stayed longer than the model's context window after compaction).
    """

    kind: Literal["block", "end_turn", "cancelled", "error", "budget_exceeded", "step_limit", "handoff", "refusal",
                  "context_overflow"]
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    detail: str = ""
    evidence: VerificationEvidence | None = None
    tokens_used_pct: float | None = None
    """``handoff``: the share of the context window the session's last request used (a worker past
    ``handoff_at`` stops after its current step so that a fresh session can resume from a handoff)."""
    """A worker's ``complete_pulse``: the verification the runner ran before it let the turn end."""


class TurnDelta(msgspec.Struct, kw_only=True):
    """A live piece of a turn's text or thinking, on core NATS (``subjects.deltas``), never persisted.

    ``turn:completed`` carries the full text, so a listener that missed deltas loses nothing.
    """

    type: Literal["turn:message_delta", "turn:thought_delta"]
    session_id: str
    turn_id: str
    text: str
    run_id: str | None = None
    """The run the session works for (``StartSession.run_id``)."""
    step: int = 0
    """The model reply of the turn (0-based) this piece belongs to: a new step is a new reply."""
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


class ReplyView(msgspec.Struct, kw_only=True):
    """One model reply of a turn, whole: its content blocks in order (thinking signatures included)."""

    content: list[dict[str, Any]]
    stop_reason: str | None = None
    usage: TurnUsage | None = None
    """The tokens the model reported for this reply (a recording replays them, so costs and budgets match)."""


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
    replies: list[ReplyView] | None = None
    """Every model reply of the turn, in order; only when asked (``GetSession.replies``), else None."""


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
    run_id: str | None = None
    """The workflow or loop session the session works for (``StartSession.run_id``)."""
    channel_id: str | None = None
    compacted_through: int = -1
    """Index of the last turn replaced by a digest in model requests (-1: none)."""
    script: str | None = None
    """The scripted model's scenario selector the session was started with (None: none)."""


class SessionSummary(msgspec.Struct, kw_only=True):
    session_id: str
    role: str
    status: str
    turns: int
    run_id: str | None = None
    """The workflow or loop session the session works for (``StartSession.run_id``)."""
    cost_usd: float = 0.0


class SessionList(Reply, kw_only=True):
    items: list[SessionSummary]


class WorkflowCostList(Reply, kw_only=True):
    costs: dict[str, float]
    """Every id asked → US dollars its sessions spent (unrounded, at list prices); 0.0 for one with none."""
