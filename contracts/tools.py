"""Requests and replies of the tools service (``autarch.svc.tools.<verb>``).

``call`` runs one tool for one agent session and answers a :class:`ToolResult` whose
``content`` is exactly what the model is given back: plain text for ``read_file`` and
``web_code_search``, the seed's JSON shape for everything else, error shapes included. A
tool's own failure (file not found, oldString not found, a timed-out command) is a normal
:class:`ToolResult` with ``is_error`` set; only a malformed request (unknown role, a root that
is not a directory) is answered with an :class:`~autarch.contracts.errors.ErrorReply`.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from .base import Command, Query, Reply
from .tool_catalog import Role, ToolDefinition

__all__ = [
    "CALL",
    "FILE_ACCESS",
    "LIST_TOOLS",
    "FileAccess",
    "FileAccessLog",
    "GetFileAccess",
    "ListTools",
    "ToolCall",
    "ToolDefinitions",
    "ToolResult",
]

CALL = "call"
"""Verb: run one tool (:class:`ToolCall` → :class:`ToolResult`)."""
LIST_TOOLS = "list_tools"
"""Verb: the tool definitions of one role (:class:`ListTools` → :class:`ToolDefinitions`)."""
FILE_ACCESS = "file_access"
"""Verb: the files a session has read, for research provenance (:class:`GetFileAccess` → :class:`FileAccessLog`)."""

NonEmpty = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class ToolCall(Command, kw_only=True):
    """Run one tool call of one agent session.

    ``(session_id, tool_call_id)`` is the idempotency key: a mutating tool called again with
    the same pair is not run again; the recorded result is returned with ``replayed`` set.
    """

    session_id: NonEmpty
    """The agent session; read-before-edit tracking is per session."""
    tool_call_id: NonEmpty
    """The model's ``tool_use`` id."""
    role: Role
    """The agent role; decides which tools (and which variant of them) may run."""
    root: NonEmpty
    """Absolute path of the worktree (or project checkout) every path argument is relative to."""
    tool: NonEmpty
    """The tool's name, as the model called it."""
    arguments: dict[str, Any] = {}
    """The model's ``input`` for the tool, validated against the tool's argument Struct."""
    workflow_id: str | None = None
    """The workflow this session belongs to; notes, baselines and review tools need one."""


class ToolResult(Reply, kw_only=True):
    """The outcome of one tool call, ready to hand back to the model."""

    tool_call_id: str
    tool: str
    content: str
    """What the model sees: plain text (``is_json`` false) or the JSON text of the seed's return shape."""
    is_json: bool = True
    is_error: bool = False
    """True for the seed's error shapes (``error``, ``success: false``, ``blocked``) and non-zero exits."""
    replayed: bool = False
    """True when this is the recorded result of an earlier identical call, not a new run."""
    duration_ms: float = 0.0


class ListTools(Query, kw_only=True):
    role: Role


class ToolDefinitions(Reply, kw_only=True):
    role: str
    tools: list[ToolDefinition]


class GetFileAccess(Query, kw_only=True):
    session_id: NonEmpty


class FileAccess(msgspec.Struct, kw_only=True):
    """One ``read_file`` of a session."""

    root: str
    path: str
    sha256: str
    """Hash of the whole file's content when it was read."""
    start_line: int | None = None
    end_line: int | None = None
    read_at: float
    """Unix time of the read."""


class FileAccessLog(Reply, kw_only=True):
    session_id: str
    reads: list[FileAccess]
