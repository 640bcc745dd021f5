"""Bodies of the gateway's HTTP API (the replies are the orchestrator's Structs)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from .base import UUID_PATTERN
from .storage import StorageProblem

__all__ = [
    "BRANCH_NAME",
    "CLEAN_TEXT",
    "GIT_BRANCH",
    "MAX_COST_IDS",
    "TEXT",
    "TITLE",
    "ChannelSessionBody",
    "CreateWorkflowBody",
    "Health",
    "Reason",
    "ServiceHealth",
    "SessionMessageBody",
    "StopSessionBody",
    "Text",
    "Title",
    "WorkflowCostsBody",
]

# Control characters reach terminals raw (ANSI escapes, NUL): refused at the door. C0 and C1 both, since
# \x9b is a CSI of its own in some terminals. Each pattern is unambiguous (a run of blanks, then one
# non-blank character, then anything allowed), so matching is linear even on 100 000 characters.
# Patterns that refuse newlines end in ``$(?!\n)``: Python's ``$`` (msgspec, jsonschema) also matches before a
# final newline, ECMAScript's does not; the lookahead makes both refuse ``"title\n"``.
TITLE = r"^[^\S\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$(?!\n)"
"""One line with at least one visible character and no control character."""
TEXT = (r"^[^\S\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f]"
        r"[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$(?!\n)")
"""Free text with at least one visible character; tab, newline and carriage return are the only controls."""
CLEAN_TEXT = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$(?!\n)"
"""Free text that may be empty (a description), with no control character but tab, newline and carriage return."""
_NO_REF_SEQUENCE = r"(?![\s\S]*(?:\.\.|@\{|//|/\.|\.lock(?:/|$)))"
"""None of git's forbidden sequences anywhere: ``..``, ``@{``, ``//``, a component starting with ``.`` or ending
with ``.lock`` (``[\\s\\S]`` rather than ``.``: ECMAScript's ``.`` stops at U+2028, Python's does not)."""
BRANCH_NAME = (r"^" + _NO_REF_SEQUENCE + r"(?!(?:HEAD|@)$)(?!refs/)"
               r"[^\x00-\x20\x7f~^:?*\[\\/.-](?:[^\x00-\x20\x7f~^:?*\[\\]*[^\x00-\x20\x7f~^:?*\[\\/.])?$(?!\n)")
"""Every rule of ``git check-ref-format --branch`` (no control character, space or ``~^:?*[\\``; no ``..``, ``@{``,
``//``; no component starting with ``.`` or ending with ``.lock``; not ending with ``/`` or ``.``), and the
gateway's own: not ``HEAD`` or ``@``, not under ``refs/``, no leading ``-``."""
GIT_BRANCH = (r"^" + _NO_REF_SEQUENCE + r"(?!HEAD$)[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9_-])?$(?!\n)")
"""A branch name of letters, digits and ``._/-`` that git takes (a loop session's branches)."""

Title = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=TITLE)]
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=100_000, pattern=TEXT)]
Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=10_000, pattern=TEXT)]
Branch = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=BRANCH_NAME)]
"""At most 200 characters, as the git service takes them (``contracts.git.BranchName``)."""

SessionId = Annotated[str, msgspec.Meta(pattern=UUID_PATTERN)]


class CreateWorkflowBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows``. Unknown fields are refused so a typo never goes unnoticed."""

    title: Title
    request: Text
    repo: Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[^\x00]*$(?!\n)")]
    """The top of a git work tree with at least one commit (absolute, or relative to the gateway's working
    directory); not ``/`` nor Autarch's data dir."""
    base_branch: Branch = "main"
    """An existing branch of ``repo``."""
    branch: Branch | None = None
    """The workflow branch to create (default ``autarch/<first 8 characters of the workflow id>``): a valid
    git branch name, not the base branch."""
    script: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$(?!\n)")] | None = None
    """Scenario selector for the scripted model (tests and the demo); ignored by real models."""


class ChannelSessionBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/channels/{id}/session``: open a discussion session (read-only tools) in a channel."""

    repo: Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[^\x00]*$(?!\n)")]
    """The git repository the discussion is about (absolute, or relative to the gateway's directory); no NUL,
    which no path holds."""
    message: Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
    """The first question."""
    session_id: SessionId | None = None
    """Chosen by the client to make a retry safe (default: a new id)."""
    script: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$(?!\n)")] | None = None


class SessionMessageBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/message``: the next user message (answered at once; the turn streams)."""

    text: Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
    message_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    """Idempotency key: the same message id twice starts one turn."""


MAX_COST_IDS = 1000
"""How many workflows one cost query asks about: a page of the list, well under NATS's payload limit."""


class WorkflowCostsBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows/costs``: the workflows (a page of the list) whose spend to give."""

    workflow_ids: Annotated[list[SessionId], msgspec.Meta(max_length=MAX_COST_IDS)]
    """At most 1,000 workflow ids (canonical UUIDs); an id no session belongs to costs 0.0."""


class ServiceHealth(msgspec.Struct, kw_only=True, omit_defaults=True):
    ok: bool
    """An instance answers (every partition, when partitioned) and none reports a storage problem."""
    instances: int
    """How many instances answered ``$SRV.PING``."""
    problems: list[StorageProblem] = []
    """What the instances cannot write for lack of space; each is dropped once its path has room again (left out
    of the answer when there is none)."""


class Health(msgspec.Struct, kw_only=True):
    status: str
    """``ok`` when NATS and every expected service answer, else ``degraded``."""
    nats: bool
    services: dict[str, ServiceHealth]


class StopSessionBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/sessions/{id}/stop`` (optional body)."""

    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=10_000)] = "stopped by user"
    close: bool = False
    """Also close the session: it takes no more messages (``session:completed``)."""
