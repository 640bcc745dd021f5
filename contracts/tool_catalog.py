"""The tool registry: every tool's LLM description, argument schema, and each agent role's tool set.

This is data, not behaviour, so it lives with the contracts: the agent runner takes its tool
definitions from :func:`tool_definitions` (or from the tools service's ``list_tools`` verb) and
the tools service dispatches on the same tables, so what the model is offered and what the
service executes cannot drift apart. Descriptions are the seed's text, verbatim.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, TypeGuard

import msgspec

from . import tool_args as a
from .base import Reply

__all__ = [
    "MUTATING_TOOLS",
    "ROLES",
    "ROLE_TOOLS",
    "SUCCESS_SHAPED_TOOLS",
    "TOOL_ARGUMENTS",
    "Role",
    "ToolDefinition",
    "input_schema",
    "role_for_tool",
    "tool_definitions",
    "tool_variant",
]

Role = Literal["discussion", "scoping", "research", "plan", "preflight", "pulsing", "review", "loop"]
ROLES: tuple[Role, ...] = ("discussion", "scoping", "research", "plan", "preflight", "pulsing", "review", "loop")


class ToolDefinition(Reply, kw_only=True):
    """One tool as the model is offered it (the Anthropic ``tools`` entry)."""

    name: str
    description: str
    input_schema: dict[str, Any]


TOOL_ARGUMENTS: dict[str, type[a.ToolArgs]] = {
    "semantic_search": a.SemanticSearchArgs,
    "read_file": a.ReadFileArgs,
    "list_directory": a.ListDirectoryArgs,
    "glob_search": a.GlobSearchArgs,
    "grep": a.GrepArgs,
    "take_note": a.TakeNoteArgs,
    "search_history": a.SearchHistoryArgs,
    "web_code_search": a.WebCodeSearchArgs,
    "write_file": a.WriteFileArgs,
    "edit_file": a.EditFileArgs,
    "multi_edit": a.MultiEditArgs,
    "shell": a.ShellArgs,
    "record_baseline": a.RecordBaselineArgs,
    "get_diff": a.GetDiffArgs,
    "get_scope_card": a.GetScopeCardArgs,
    "add_line_comment": a.AddLineCommentArgs,
    "add_file_comment": a.AddFileCommentArgs,
    "add_review_comment": a.AddReviewCommentArgs,
    "complete_review": a.CompleteReviewArgs,
    "send_message": a.SendMessageArgs,
    "reply_message": a.ReplyMessageArgs,
    "fetch_inbox": a.FetchInboxArgs,
    "fetch_topic": a.FetchTopicArgs,
    "request_scope": a.RequestScopeArgs,
    "file_reservation_paths": a.FileReservationPathsArgs,
    "release_file_reservations": a.ReleaseFileReservationsArgs,
    "robot_priority": a.RobotPriorityArgs,
}
"""Every executable tool and the Struct its arguments decode into."""

MUTATING_TOOLS = frozenset(
    {
        "take_note",
        "write_file",
        "edit_file",
        "multi_edit",
        "shell",
        "record_baseline",
        "add_line_comment",
        "add_file_comment",
        "add_review_comment",
        "complete_review",
        "send_message",
        "reply_message",
        "request_scope",
        "file_reservation_paths",
        "release_file_reservations",
    }
)
"""Tools with an effect: a repeated call (same session and tool-call id) replays the recorded result."""

SUCCESS_SHAPED_TOOLS = frozenset(
    {
        "take_note",
        "write_file",
        "shell",
        "record_baseline",
        "add_line_comment",
        "add_file_comment",
        "add_review_comment",
        "complete_review",
        "send_message",
        "reply_message",
        "request_scope",
        "file_reservation_paths",
        "release_file_reservations",
    }
)
"""Tools whose errors take the seed's ``{"success": false, "error": …}`` shape; the rest use ``{"error": …}``."""

_SEMANTIC_SEARCH = """Search the codebase for files and code relevant to a query.
Returns ranked results with file paths, line numbers, and matched content snippets.

patternWeights adjusts result ranking by file path:
- Values >1 boost matches (e.g., 2.0 doubles score)
- Values <1 penalize matches (e.g., 0.1 reduces by 90%)
- Value 0 excludes matches entirely
- Use [] for no weighting

Common patterns: boost test files for test questions, deprioritize docs for code questions."""

_SEMANTIC_SEARCH_PULSING = """Search the worktree codebase for files and code relevant to a query.
Returns ranked results with file paths, line numbers, and matched content snippets.

Note: You are working in an isolated git worktree. Search results are from your working copy.

patternWeights adjusts result ranking by file path:
- Values >1 boost matches (e.g., 2.0 doubles score)
- Values <1 penalize matches (e.g., 0.1 reduces by 90%)
- Value 0 excludes matches entirely"""

_READ_FILE = """Read the contents of a file from the repository.
Can optionally specify a line range to read only a portion of the file.
Some files may be blocked due to sensitive content policies."""

_LIST_DIRECTORY = """List files and directories at a given path.
Respects .gitignore and .autarchignore rules.
Returns entries with their type (file or directory) and relative path.

- depth controls how deep to traverse (1 = immediate children, 2 = children + grandchildren, null = unlimited)
- type filters results: 'files' (only files), 'directories' (only dirs), 'all' (both)"""

_GLOB_SEARCH = """Find files matching a glob pattern.
Examples: "**/*.cs" for all C# files, "src/**/test_*.py" for Python test files.
Returns a list of matching file paths relative to the project root."""

_GREP = """Search file contents for a pattern using regex matching.
Returns file paths and line numbers for matches.

- Case-insensitive by default (set caseSensitive=true for exact case matching)
- Respects .gitignore and .autarchignore rules
- Skips binary files and files larger than 10MB
- Returns up to 50 matches; use skip parameter to paginate through more results
- Results are sorted alphabetically by file path

Use glob parameter to filter files, e.g., "**/*.cs" for C# files only."""

_TAKE_NOTE = """Store a note for the current workflow stage.
Notes persist across agent invocations within the same workflow stage,
but are cleared when the workflow transitions to a different state.
Notes are automatically injected into the conversation on every turn."""

_SEARCH_HISTORY = """Search the project's recorded agent turns (earlier iterations of this loop session and other
sessions on the same repository) for what matters to your current step: a design, a decision, an error seen
before. Returns the most relevant turns with their turn id, relevance and an excerpt; name a turn id in an
<anchor_hint> to start the next iteration from it."""

_WEB_CODE_SEARCH = """Search and get relevant context for any programming task using Exa Code API
Provides the highest quality and freshest context for libraries, SDKs, and APIs
Use this tool for ANY question or task related to programming
Returns comprehensive code examples, documentation, and API references
Optimized for finding specific programming patterns and solutions"""

_WRITE_FILE = """Write content to a file in the worktree.
Creates the file if it doesn't exist, or overwrites if it does.
Parent directories are created automatically.

Note: You are working in an isolated git worktree. Changes are isolated until pulse completion."""

_EDIT_FILE = """Apply an **exact string replacement** in files within the worktree.
Supports single-instance replacements (oldString → newString) and multi-instance replacements via replaceAll.

Edits are applied atomically: if any replacement fails (e.g., oldString not found or multiple matches when \
replaceAll is not set), no changes are applied and the tool reports a hard failure.

Rules:
- You must read the target file with read_file before editing.
- The oldString must match the file content exactly, including indentation, whitespace, and line endings.
- Line number prefixes from read_file output must not be included in oldString or newString.

Failure is final: do not attempt fuzzy matching or retries.
Note: You are working in an isolated git worktree. Changes are isolated until pulse completion."""

_MULTI_EDIT = """Apply **multiple exact string replacements** to a single file atomically.
More efficient than multiple edit_file calls when making several changes to the same file.

Edits are applied sequentially in array order, each operating on the result of the previous edit.
This allows overlapping or adjacent edits to work correctly.

All edits are validated before any are applied. If any edit fails validation:
- No changes are written to the file
- The tool reports which edit failed and why

Rules:
- You must read the target file with read_file before editing.
- Each oldString must match the file content exactly (at the time that edit is applied).
- Line number prefixes from read_file output must not be included in oldString or newString.
- Each edit has its own replaceAll parameter.

Failure is final: do not attempt fuzzy matching or retries.
Note: You are working in an isolated git worktree. Changes are isolated until pulse completion."""

_SHELL_PULSING = """Execute a shell command in the worktree directory.
Returns stdout, stderr, and exit code.
Commands time out after 60 seconds.

Note: You are working in an isolated git worktree. All commands run in that context.

WARNING: Shell commands can have side effects. Use with caution.
         If you have other tools that can accomplish the same thing, use them instead."""

_SHELL_PREFLIGHT = """Execute a shell command in the worktree directory.
Returns stdout, stderr, and exit code.
Commands time out after 60 seconds.

Use this to run environment setup commands like:
- git submodule update --init --recursive
- dotnet restore
- npm install
- pip install -r requirements.txt

WARNING: You must NOT modify any files tracked by git.
Only untracked artifacts (dependencies, build outputs) may be created."""

_RECORD_BASELINE = """Record a known build/lint error or warning from the clean worktree state.
Pulses will filter out these known issues from their own build/lint output.

Use this after running build/lint commands to record any pre-existing issues
that are not caused by pulse changes.

Parameters:
- issueType: "Error" or "Warning"
- source: "Build", "Lint", or "Test"
- pattern: The exact error/warning message or a pattern to match
- filePath: Optional file path associated with the issue
- description: Optional description for context"""

_GET_DIFF = """Retrieve the diff content for the current review.
Returns the unified diff showing all changes made during the workflow.
Use this to analyze what was changed before submitting your review summary."""

_GET_SCOPE_CARD = """Retrieve the approved scope card for the current workflow.
Returns the scope definition including in-scope items, out-of-scope items,
and constraints. Use this to verify changes align with the approved scope."""

_ADD_LINE_COMMENT = """Add a comment attached to specific line(s) in a file.
Use this to provide feedback on specific code changes in the diff."""

_ADD_FILE_COMMENT = """Add a comment attached to a file as a whole.
Use this to provide feedback about a file that isn't tied to specific lines."""

_ADD_REVIEW_COMMENT = """Add a comment attached to the overall review.
Use this for general observations or feedback not tied to specific files or lines."""

_COMPLETE_REVIEW = """Complete the review with a recommendation and summary.
Call this tool once after adding all comments to finalize the review.
The recommendation must be one of: approve, reject, or manual_review."""

_SEND_MESSAGE = """Send coordination mail to other agents of your swarm (your epic's thread).
Use it for the startup acknowledgment, file conflicts, completion reports and handoffs, addressed to the
coordinator (agent name "coordinator") or to other workers by their agent mail name.
You always send as yourself; project_key is always your own epic.
Mail sent to you is delivered into your conversation automatically; fetch_inbox shows it again."""

_REPLY_MESSAGE = """Reply to a coordination message in its thread: the reply goes to the message's sender,
with the same topic."""

_FETCH_INBOX = """List the coordination mail addressed to you (optionally only one topic, e.g. epic-<EPIC_ID>),
oldest first."""

_FETCH_TOPIC = """List every coordination message on a topic of your epic (the epic timeline), oldest first."""

_REQUEST_SCOPE = """Ask the coordinator for files beyond your bead's files.
A bead's files are its scope: writes and edits outside them are refused, and what a command changes outside them
is put back. If the bead truly needs another file, ask here with the paths and why; the coordinator widens the
bead (the files become yours, leased to you) or refuses with the reason (for instance another worker holds them;
wait_seconds lets you wait for their release). Write the files only once the answer says granted."""

_FILE_RESERVATION_PATHS = """Reserve files (paths or globs) in your epic's lease table, the one the coordinator's
assignments are in. exclusive (default): nobody else may reserve or write them; exclusive=false: a shared,
reader's reservation, granted beside other shared ones, that keeps writers off while you read. All paths are
granted or none: a conflict names the holder, its bead and until when. Reserving keeps others off a file; it does
not add it to your bead's files (ask request_scope for that). Reserve again to renew."""

_RELEASE_FILE_RESERVATIONS = """Release your own reservations (the given paths, or all of them). Your bead's files
stay leased until the bead lands: the coordinator releases them before your completion report."""

_ROBOT_PRIORITY = """The ready beads of your epic ranked by impact (the bv --robot-priority equivalent), best first,
each with every part of its score: pagerank, betweenness, blocker_ratio, staleness, priority, on_critical_path,
and unblocks (the beads it alone holds back). Check it before claiming more work."""

DESCRIPTIONS: dict[tuple[str, str], str] = {
    ("semantic_search", "base"): _SEMANTIC_SEARCH,
    ("semantic_search", "pulsing"): _SEMANTIC_SEARCH_PULSING,
    ("read_file", "base"): _READ_FILE,
    ("read_file", "pulsing"): _READ_FILE + "\nRequired before attempting to edit_file.",
    ("read_file", "research"): _READ_FILE + "\nFile access is tracked for research provenance.",
    ("list_directory", "base"): _LIST_DIRECTORY,
    ("glob_search", "base"): _GLOB_SEARCH,
    ("grep", "base"): _GREP,
    ("take_note", "base"): _TAKE_NOTE,
    ("search_history", "base"): _SEARCH_HISTORY,
    ("web_code_search", "base"): _WEB_CODE_SEARCH,
    ("write_file", "base"): _WRITE_FILE,
    ("edit_file", "base"): _EDIT_FILE,
    ("multi_edit", "base"): _MULTI_EDIT,
    ("shell", "pulsing"): _SHELL_PULSING,
    ("shell", "preflight"): _SHELL_PREFLIGHT,
    ("record_baseline", "base"): _RECORD_BASELINE,
    ("get_diff", "base"): _GET_DIFF,
    ("get_scope_card", "base"): _GET_SCOPE_CARD,
    ("add_line_comment", "base"): _ADD_LINE_COMMENT,
    ("add_file_comment", "base"): _ADD_FILE_COMMENT,
    ("add_review_comment", "base"): _ADD_REVIEW_COMMENT,
    ("complete_review", "base"): _COMPLETE_REVIEW,
    ("send_message", "base"): _SEND_MESSAGE,
    ("reply_message", "base"): _REPLY_MESSAGE,
    ("fetch_inbox", "base"): _FETCH_INBOX,
    ("fetch_topic", "base"): _FETCH_TOPIC,
    ("request_scope", "base"): _REQUEST_SCOPE,
    ("file_reservation_paths", "base"): _FILE_RESERVATION_PATHS,
    ("release_file_reservations", "base"): _RELEASE_FILE_RESERVATIONS,
    ("robot_priority", "base"): _ROBOT_PRIORITY,
}
"""LLM description of each (tool, variant); the seed's text verbatim."""

_BASE = (
    ("semantic_search", "base"),
    ("read_file", "base"),
    ("list_directory", "base"),
    ("glob_search", "base"),
    ("grep", "base"),
    ("take_note", "base"),
    ("web_code_search", "base"),
)


_MAIL = (("send_message", "base"), ("reply_message", "base"), ("fetch_inbox", "base"), ("fetch_topic", "base"))
_COORDINATION = (("request_scope", "base"), ("file_reservation_paths", "base"), ("release_file_reservations", "base"),
                 ("robot_priority", "base"))
"""A swarm worker's own coordination verbs beside mail (seed 002)."""


def _with(tools: tuple[tuple[str, str], ...], **variants: str) -> tuple[tuple[str, str], ...]:
    return tuple((name, variants.get(name, variant)) for name, variant in tools)


ROLE_TOOLS: dict[str, tuple[tuple[str, str], ...]] = {
    "discussion": _BASE,
    "scoping": _BASE,
    "research": _with(_BASE, read_file="research"),
    "plan": _BASE,
    "preflight": (*_BASE, ("shell", "preflight"), ("record_baseline", "base")),
    "pulsing": (
        *_with(_BASE, semantic_search="pulsing", read_file="pulsing"),
        ("write_file", "base"),
        ("edit_file", "base"),
        ("multi_edit", "base"),
        ("shell", "pulsing"),
        # Seed 002's coordination mail. The catalog has no per-session sets, so every pulsing agent is offered
        # them; a session that is no swarm worker (no epic, no registered name) gets an error saying so.
        *_MAIL,
        *_COORDINATION,
    ),
    "loop": (
        # A Pulse Protocol iteration (seed 001): the pulsing tools (take_note is in the base set) and the search
        # of recorded turns; it ends its turn with text carrying its signal, not with a block tool.
        *_with(_BASE, semantic_search="pulsing", read_file="pulsing"),
        ("search_history", "base"),
        ("write_file", "base"),
        ("edit_file", "base"),
        ("multi_edit", "base"),
        ("shell", "pulsing"),
    ),
    "review": (
        *_BASE,
        ("get_diff", "base"),
        ("get_scope_card", "base"),
        ("add_line_comment", "base"),
        ("add_file_comment", "base"),
        ("add_review_comment", "base"),
        ("complete_review", "base"),
    ),
}
"""Each agent role's tools and the description variant it sees (seed 004, "Tool Availability by Agent")."""


def tool_variant(role: str, tool: str) -> str | None:
    """The description variant ``role`` uses for ``tool``, or None when the role does not have the tool."""
    for name, variant in ROLE_TOOLS.get(role, ()):
        if name == tool:
            return variant
    return None


_PREFERRED_ROLES: tuple[Role, ...] = ("pulsing", "preflight", "review", "research", "discussion", "loop")


def is_role(name: str) -> TypeGuard[Role]:
    """Whether ``name`` is one of the agent roles."""
    return name in ROLES


def role_for_tool(tool: str) -> Role | None:
    """A role that has ``tool`` (the most capable first), for callers that do not care which role runs it."""
    for role in _PREFERRED_ROLES:
        if tool_variant(role, tool) is not None:
            return role
    return None


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(copy.deepcopy(defs[ref.removeprefix("#/$defs/")]), defs)
        cleaned = {}
        for key, value in node.items():
            if key == "title":
                continue
            if key == "properties":
                # Property names are data here; only their schemas are cleaned.
                cleaned[key] = {name: _inline(sub, defs) for name, sub in value.items()}
            else:
                cleaned[key] = _inline(value, defs)
        return cleaned
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node


_SCHEMAS: dict[type, dict[str, Any]] = {}


def input_schema(args_type: type[a.ToolArgs]) -> dict[str, Any]:
    """A tool's argument schema without ``$defs``, ``$ref`` or titles, as Anthropic's ``input_schema`` wants."""
    schema = _SCHEMAS.get(args_type)
    if schema is None:
        raw = msgspec.json.schema(args_type)
        schema = _inline(raw, raw.get("$defs", {}))
        schema.pop("$defs", None)
        schema.pop("description", None)  # the struct docstring; the tool description is separate
        _SCHEMAS[args_type] = schema
    return copy.deepcopy(schema)


def tool_definitions(role: str) -> list[ToolDefinition]:
    """The tools ``role`` is offered, in the seed's order, with that role's description variants."""
    if role not in ROLE_TOOLS:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    return [
        ToolDefinition(
            name=name,
            description=DESCRIPTIONS[(name, variant)],
            input_schema=input_schema(TOOL_ARGUMENTS[name]),
        )
        for name, variant in ROLE_TOOLS[role]
    ]
