"""The arguments of every agent tool (seed 004), as the model sends them.

One Struct per tool; field names, types, defaults and descriptions follow the seed's
parameter tables to the letter (camelCase where the seed uses it). The JSON Schema handed
to the model is generated from these Structs (see :mod:`autarch.contracts.tool_catalog`), so
the schema and the validation can never disagree. Unknown fields are refused: a misspelt
argument gets a clear error instead of being silently ignored.

Some checks are deliberately *not* schema constraints (``issueType``, ``severity``, an empty
``note`` or ``summary``, ``start_line`` ≥ 1 of a line comment): the seed gives those their own
error texts, which the tools service returns instead of a generic validation message.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

__all__ = [
    "REASON_DESCRIPTION",
    "REVIEW_REASON_DESCRIPTION",
    "AddFileCommentArgs",
    "AddLineCommentArgs",
    "AddReviewCommentArgs",
    "CompleteReviewArgs",
    "EditFileArgs",
    "EditOperation",
    "FetchInboxArgs",
    "FetchTopicArgs",
    "FileReservationPathsArgs",
    "GetDiffArgs",
    "GetScopeCardArgs",
    "GlobSearchArgs",
    "GrepArgs",
    "ListDirectoryArgs",
    "MultiEditArgs",
    "ReadFileArgs",
    "RecordBaselineArgs",
    "ReleaseFileReservationsArgs",
    "ReplyMessageArgs",
    "RequestScopeArgs",
    "RobotPriorityArgs",
    "SearchHistoryArgs",
    "SemanticSearchArgs",
    "SendMessageArgs",
    "ShellArgs",
    "TakeNoteArgs",
    "ToolArgs",
    "WebCodeSearchArgs",
    "WriteFileArgs",
]

REASON_DESCRIPTION = (
    "Required. A short, human-readable statement of the logical purpose of this tool call "
    '(e.g. "Add Channels property to ViewModel used by ChannelListView").\n'
    'Do not describe the tool operation itself (e.g. "edit_file Foo.cs").\n'
    "Assume this reason may be the only surviving record of the action after a yield."
)
"""The seed's common ``reason`` description."""

REVIEW_REASON_DESCRIPTION = "Required. A short, human-readable statement of the logical purpose of this tool call."
"""The shorter ``reason`` description the seed gives the review tools."""

Reason = Annotated[str, Meta(min_length=1, description=REASON_DESCRIPTION)]
ReviewReason = Annotated[str, Meta(min_length=1, description=REVIEW_REASON_DESCRIPTION)]
WorktreePath = Annotated[str, Meta(description="Path to file, relative to worktree root")]
PositiveLine = Annotated[int, Meta(ge=1)]
Severity = Annotated[str, Meta(description="The severity level: High, Medium, or Low")]
Category = Annotated[
    str,
    Meta(description="The category of the comment (e.g., security, performance, style, bug, architecture)"),
]
CommentText = Annotated[str, Meta(description="The description/content of the comment")]
CommentPath = Annotated[str, Meta(description="The file path this comment applies to")]


class ToolArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of every tool's arguments."""


class SemanticSearchArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    query: Annotated[str, Meta(min_length=1, description="The natural language search query")]
    pattern_weights: Annotated[
        list[str] | None,
        Meta(
            description="Pattern weights as 'glob:weight' strings, e.g. ['**/*.cs:1.5', 'docs/**:0.1']. "
            "Weight >1 boosts, <1 penalizes, 0 excludes."
        ),
    ] = None
    max_results: Annotated[int, Meta(ge=1, le=100, description="Maximum number of results to return (default: 10)")] = (
        10
    )


class ReadFileArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    path: Annotated[str, Meta(description="Path to file, relative to project root")]
    start_line: Annotated[PositiveLine | None, Meta(description="Optional start line (1-indexed, inclusive)")] = None
    end_line: Annotated[PositiveLine | None, Meta(description="Optional end line (1-indexed, inclusive)")] = None


class ListDirectoryArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    path: Annotated[str, Meta(description="Path relative to project root (empty or '.' for root)")] = "."
    depth: Annotated[
        PositiveLine | None,
        Meta(description="Maximum depth to traverse (1 = immediate children, null = unlimited)"),
    ] = 1
    type: Annotated[
        Literal["files", "directories", "all"],
        Meta(description="Type of entries: 'files', 'directories', or 'all'"),
    ] = "all"


class GlobSearchArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    pattern: Annotated[
        str, Meta(min_length=1, description="Glob pattern to match files, e.g., '**/*.cs' or 'src/**/*.ts'")
    ]


class GrepArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    pattern: Annotated[
        str,
        Meta(
            min_length=1,
            description="The search pattern (literal string or regex depending on useRegex parameter)",
        ),
    ]
    glob: Annotated[
        str | None, Meta(description="Optional glob pattern to filter files, e.g., '**/*.cs' for C# files only")
    ] = None
    case_sensitive: Annotated[
        bool,
        Meta(description="If true, perform case-sensitive matching; if false (default), match case-insensitively"),
    ] = False
    skip: Annotated[int, Meta(ge=0, description="Number of matches to skip for pagination (default: 0)")] = 0


class TakeNoteArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    note: Annotated[str, Meta(description="The note content to store for the current workflow stage")]


class SearchHistoryArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    query: Annotated[str, Meta(min_length=1, max_length=10_000,
                               description="What to look for in the session's earlier turns, in plain words")]
    limit: Annotated[int, Meta(ge=1, le=20, description="How many turns to return (default 5)")] = 5


class WebCodeSearchArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    query: Annotated[
        str,
        Meta(
            min_length=1,
            description="A short query describing the code or documentation to search for, "
            "e.g. 'authentication patterns in NextJS applications'",
        ),
    ]


class WriteFileArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    path: WorktreePath
    content: Annotated[str, Meta(description="Content to write to the file")]


class EditFileArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    path: WorktreePath
    old_string: Annotated[
        str,
        Meta(
            description="Exact content to match in the file (must be found as-is, including whitespace and indentation)"
        ),
    ]
    new_string: Annotated[
        str,
        Meta(
            description="Replacement content for the matched string (must preserve intended indentation and structure)"
        ),
    ]
    replace_all: Annotated[
        bool,
        Meta(
            description="If true, replaces all occurrences of oldString; otherwise, fails if multiple matches are found"
        ),
    ] = False


class EditOperation(ToolArgs, kw_only=True, rename="camel"):
    """One replacement of a ``multi_edit``."""

    old_string: Annotated[str, Meta(description="Exact content to match")]
    new_string: Annotated[str, Meta(description="Replacement content")]
    replace_all: Annotated[bool, Meta(description="If true, replaces all occurrences (default: false)")] = False


class MultiEditArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    path: WorktreePath
    edits: Annotated[
        list[EditOperation],
        Meta(
            description="Array of edit operations to apply sequentially. Each edit has: oldString (exact content to "
            "match), newString (replacement content), replaceAll (optional, if true replaces all occurrences)"
        ),
    ]


class ShellArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    command: Annotated[str, Meta(min_length=1, description="Shell command to execute")]
    timeout_seconds: Annotated[float, Meta(gt=0, description="Timeout in seconds (default: 60, max: 300)")] = 60


class RecordBaselineArgs(ToolArgs, kw_only=True, rename="camel"):
    reason: Reason
    issue_type: Annotated[str, Meta(description="Type of issue: 'Error' or 'Warning'")]
    source: Annotated[str, Meta(description="Source of the issue: 'Build', 'Lint', or 'Test'")]
    pattern: Annotated[str, Meta(min_length=1, description="The exact error/warning message or pattern to match")]
    file_path: Annotated[str | None, Meta(description="Optional file path associated with this issue")] = None
    description: Annotated[str | None, Meta(description="Optional description for context")] = None


class GetDiffArgs(ToolArgs, kw_only=True):
    reason: ReviewReason


class GetScopeCardArgs(ToolArgs, kw_only=True):
    reason: ReviewReason


class AddLineCommentArgs(ToolArgs, kw_only=True):
    reason: ReviewReason
    file_path: CommentPath
    start_line: Annotated[int, Meta(description="The starting line number for the comment")]
    severity: Severity
    category: Category
    description: CommentText
    end_line: Annotated[
        int | None,
        Meta(description="The ending line number (inclusive). Omit for single-line comments."),
    ] = None


class AddFileCommentArgs(ToolArgs, kw_only=True):
    reason: ReviewReason
    file_path: CommentPath
    severity: Severity
    category: Category
    description: CommentText


class AddReviewCommentArgs(ToolArgs, kw_only=True):
    reason: ReviewReason
    severity: Severity
    category: Category
    description: CommentText


class CompleteReviewArgs(ToolArgs, kw_only=True):
    reason: ReviewReason
    recommendation: Annotated[str, Meta(description="The recommendation: approve, reject, or manual_review")]
    summary: Annotated[str, Meta(description="A summary explanation for the recommendation")]


# --- coordination mail (seed 002: send_message, reply_message, fetch_inbox, fetch_topic; the seed's names) ----

ProjectKey = Annotated[
    str | None,
    Meta(description="The project (your epic): leave it out, or give the project root path or the epic id; "
                     "it is always your own epic"),
]
SenderName = Annotated[str | None, Meta(description="Your agent mail name (it must be yours; default: yours)")]
AgentMailName = Annotated[str, Meta(min_length=1, max_length=64, description="A registered agent name")]


class SendMessageArgs(ToolArgs, kw_only=True):
    reason: Reason
    to: Annotated[list[AgentMailName], Meta(min_length=1, max_length=64,
                                            description='Recipients\' agent names, e.g. ["coordinator"]')]
    subject: Annotated[str, Meta(min_length=1, max_length=500, description="The message's subject line")]
    body_md: Annotated[str, Meta(min_length=1, description="The message, in Markdown")]
    project_key: ProjectKey = None
    sender_name: SenderName = None
    thread_id: Annotated[str | None, Meta(description="The thread (default: the epic id)")] = None
    topic: Annotated[str | None, Meta(description="The topic tag (default: epic-<EPIC_ID>)")] = None


class ReplyMessageArgs(ToolArgs, kw_only=True):
    reason: Reason
    message_id: Annotated[str, Meta(min_length=1, description="The message you answer")]
    body_md: Annotated[str, Meta(min_length=1, description="The reply, in Markdown")]
    project_key: ProjectKey = None
    sender_name: SenderName = None


class FetchInboxArgs(ToolArgs, kw_only=True):
    reason: Reason
    project_key: ProjectKey = None
    agent_name: Annotated[str | None, Meta(description="Your agent mail name (default: yours)")] = None
    topic: Annotated[str | None, Meta(description="Only messages on this topic (e.g. epic-<EPIC_ID>)")] = None


class FetchTopicArgs(ToolArgs, kw_only=True):
    reason: Reason
    topic_name: Annotated[str, Meta(min_length=1, description="The topic, e.g. epic-<EPIC_ID>")]
    project_key: ProjectKey = None


class RequestScopeArgs(ToolArgs, kw_only=True):
    reason: Reason
    paths: Annotated[list[Annotated[str, Meta(min_length=1, max_length=1000)]],
                     Meta(min_length=1, max_length=50,
                          description="Files (or globs) your bead needs beyond its files, relative to the worktree")]
    why: Annotated[str, Meta(min_length=1, max_length=2000,
                             description="Why the bead needs them (recorded with the request)")]
    wait_seconds: Annotated[int, Meta(ge=0, le=90, description="If another worker holds one of the paths, wait up "
                                                              "to this many seconds for its release (default 0)")] = 0


LeasePath = Annotated[str, Meta(min_length=1, max_length=1000)]


class FileReservationPathsArgs(ToolArgs, kw_only=True):
    reason: Reason
    paths: Annotated[list[LeasePath], Meta(min_length=1, max_length=100,
                                           description="Paths or globs to reserve, relative to the worktree root "
                                                       "(e.g. src/foo.ts, docs/**)")]
    project_key: ProjectKey = None
    agent_name: SenderName = None
    exclusive: Annotated[bool, Meta(description="true: nobody else may reserve them; false: a shared (reader's) "
                                                "reservation, alongside other shared ones")] = True
    ttl_seconds: Annotated[int, Meta(ge=5, le=3600, description="Seconds the reservation lasts unless renewed by "
                                                               "reserving again")] = 600


class ReleaseFileReservationsArgs(ToolArgs, kw_only=True):
    reason: Reason
    project_key: ProjectKey = None
    agent_name: SenderName = None
    paths: Annotated[list[LeasePath], Meta(max_length=100, description="The reserved paths or globs to release "
                                                                     "(default, or []: all of yours)")] = []


class RobotPriorityArgs(ToolArgs, kw_only=True):
    reason: Reason
    project_key: ProjectKey = None
    limit: Annotated[int, Meta(ge=1, le=100, description="How many of the top-ranked ready beads to list")] = 10
