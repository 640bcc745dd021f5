"""The gateway's bearer token: created on first start, kept at ``<data dir>/token`` with mode 0600."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["ensure_token", "read_token"]


def ensure_token(path: Path) -> str:
    """Return the token at ``path``, creating it (owner read/write only) if it does not exist."""
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        # O_EXCL: two processes starting at once never overwrite each other's token.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_token(path)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


def read_token(path: Path) -> str:
    token = path.read_text().strip()
    if not token:
        raise ValueError(f"{path} is empty; delete it and restart to create a new token")
    return token
