"""Checks of what a client puts in a path, a query or a body, shared by the routes.

A malformed id in a path names nothing, so it is answered 404 like an unknown one; a malformed
query parameter or body field is answered 400 ``bad_request`` naming the field.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from litestar import Response
from litestar.openapi.datastructures import ResponseSpec

from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.runtime.errors import RemoteError

__all__ = [
    "CHANNEL_ID",
    "bad_request",
    "canonical_uuid",
    "error_responses",
    "not_found",
    "resolve_repo",
]

CHANNEL_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$(?!\n)")
"""A channel id: 1 to 100 letters, digits, ``_``, ``.`` or ``-``."""

_WHEN = {
    400: "Malformed body or parameter (`bad_request`)",
    401: "Missing or wrong bearer token (`unauthorized`)",
    404: "Unknown or malformed id (`not_found`)",
    409: "Not possible in the current state (the code says why)",
    503: "No service answered (`unavailable`); retry",
    504: "The service did not answer in time (`timeout`)",
}


def error_responses(*statuses: int) -> dict[int, ResponseSpec]:
    """OpenAPI entries for the error answers of a route (every one has the ``ErrorReply`` body)."""
    return {
        status: ResponseSpec(ErrorReply, description=_WHEN[status], generate_examples=False)
        for status in (*statuses, 401, 503, 504)
    }


def bad_request(message: str, **details: Any) -> RemoteError:
    """A 400 ``bad_request`` to raise from a handler (the exception handlers turn it into the error body)."""
    return RemoteError(ErrorReply(code=ErrorCode.BAD_REQUEST, message=message, details=details), subject="-")


def not_found(kind: str, given: str) -> Response[ErrorReply]:
    return Response(ErrorReply(code=ErrorCode.NOT_FOUND, message=f"no {kind} {given}"), status_code=404)


def canonical_uuid(given: str) -> str | None:
    """``given`` as a canonical (lower-case, hyphenated) UUID, or None when it is not one."""
    try:
        return str(uuid.UUID(given))
    except ValueError:
        return None


def resolve_repo(given: str, *, git: bool = False, field: str = "repo") -> Path:
    """The absolute path of the directory ``given`` (relative paths: to the gateway's working directory).

    With ``git``, the directory must be the top of a git repository or worktree (it has ``.git``).
    """
    try:
        repo = Path(given).expanduser()
        if not repo.is_absolute():
            repo = Path.cwd() / repo
        if not repo.is_dir():
            raise bad_request(f"{field} {given!r} is not a directory", field=field)
        repo = repo.resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        # A name too long, a symlink loop, an unknown ~user: the path names no directory either.
        raise bad_request(f"{field} {given!r} is not a usable path: {exc}", field=field) from None
    if git and not (repo / ".git").exists():
        raise bad_request(f"{field} {given!r} is not a git repository (no .git in {repo})", field=field)
    return repo
