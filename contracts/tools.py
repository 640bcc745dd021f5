"""Requests and replies of the tools service (``autarch.svc.tools.<verb>``).

``call`` runs one tool for one agent session and answers a :class:`ToolResult` whose
``content`` is exactly what the model is given back: plain text for ``read_file`` and
``web_code_search``, the seed's JSON shape for everything else, error shapes included. A
tool's own failure (file not found, oldString not found, a timed-out command) is a normal
:class:`ToolResult` with ``is_error`` set; only a malformed request (unknown role, a root that
is not a directory) is answered with an :class:`~autarch.contracts.errors.ErrorReply`.

``cancel`` stops a call that is still running (a stopped agent turn must not leave a shell
command changing the worktree behind it): the call's own request is then answered with a
``cancelled: …`` error result, recorded like any other result of a mutating call.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from .base import Command, Query, Reply
from .tool_catalog import Role, ToolDefinition

__all__ = [
    "CALL",
    "CANCEL",
    "FILE_ACCESS",
    "LIST_TOOLS",
    "CancelState",
    "CancelToolCall",
    "FileAccess",
    "FileAccessLog",
    "GetFileAccess",
    "ListTools",
    "ToolCall",
    "ToolCallCancelled",
    "ToolDefinitions",
    "ToolErrorCode",
    "ToolResult",
]

CALL = "call"
"""Verb: run one tool (:class:`ToolCall` → :class:`ToolResult`)."""
LIST_TOOLS = "list_tools"
"""Verb: the tool definitions of one role (:class:`ListTools` → :class:`ToolDefinitions`)."""
FILE_ACCESS = "file_access"
"""Verb: the files a session has read, for research provenance (:class:`GetFileAccess` → :class:`FileAccessLog`)."""
CANCEL = "cancel"
"""Verb: stop a running tool call (:class:`CancelToolCall` → :class:`ToolCallCancelled`)."""

NonEmpty = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class ToolErrorCode:
    """The ``code`` a tool's error result carries beside its ``error`` sentence, where a caller must tell it apart.

    ``git_file_tampered``: the worktree's ``.git`` was not what Autarch's records say (rewritten, a link, a
    directory, gone); it was written back from the records before anything else ran (docs/security.md).
    """

    GIT_FILE_TAMPERED = "git_file_tampered"


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
    run_id: str | None = None
    """The run this session belongs to (``StartSession.run_id``): a workflow (notes, baselines and review tools need
    one) or a loop session (notes and ``search_history``)."""
    lease_holder: str | None = None
    """A swarm worker's registered name: its writes are refused on paths another holder leased in the
    workflow's lease table (``runtime.leases``). None for every other session."""


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


class CancelToolCall(Command, kw_only=True):
    """Stop one running tool call: its work is cancelled and a shell command's processes are killed.

    Answered by whichever instance runs the call, once the call has stopped. The call's own request
    then gets a ``cancelled: …`` error result, recorded under its idempotency key, so a replay of a
    mutating call returns that result instead of running it. Cancelling a call that already finished,
    or that no instance knows, changes nothing and is answered with ``cancelled`` false.
    """

    session_id: NonEmpty
    tool_call_id: NonEmpty
    """The model's ``tool_use`` id, as sent in :class:`ToolCall`."""
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=500)] = "stopped"
    """Why it is stopped; quoted in the call's ``cancelled: …`` result."""


CancelState = Literal["cancelled", "finished", "not_running"]
"""``cancelled``: this request stopped it. ``finished``: it had already ended; its result stands.
``not_running``: no instance runs it (an unknown id, a call that never started, or one whose process died)."""


class ToolCallCancelled(Reply, kw_only=True):
    """What a cancel did."""

    session_id: str
    tool_call_id: str
    cancelled: bool
    """True when this request stopped the call; False when there was nothing to stop."""
    state: CancelState
    detail: str = ""
    """One sentence for logs and records."""
