"""Typed errors: every failed request is answered with an :class:`ErrorReply`."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["ErrorCode", "ErrorReply"]


class ErrorCode:
    """The error codes every service may use; services add domain codes of their own."""

    BAD_REQUEST = "bad_request"
    """The payload could not be decoded or failed validation."""
    NOT_FOUND = "not_found"
    """The addressed entity does not exist."""
    CONFLICT = "conflict"
    """The request contradicts the current state (a concurrent change, an existing name)."""
    UNAVAILABLE = "unavailable"
    """No service answered (none running, or it is restarting)."""
    TIMEOUT = "timeout"
    """The service did not answer within the deadline."""
    STORAGE_FULL = "storage_full"
    """The service could not record the request: no space left where it writes (``details.path``); nothing was
    recorded. Retried by the drivers once the path has room again; a client retries likewise."""
    INTERNAL = "internal"
    """A bug: the service failed unexpectedly; its log has the traceback."""


class ErrorReply(msgspec.Struct, kw_only=True):
    """The body of every error answer, on NATS and over HTTP."""

    code: str
    """Machine-readable error code (see :class:`ErrorCode`)."""
    message: str
    """Human-readable explanation, precise enough to fix the request."""
    details: dict[str, Any] = {}
    """Optional structured context (the offending field, the current state, …)."""
