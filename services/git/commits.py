"""Commit identity and messages: checkpoint commits and recovery checkpoints."""

from __future__ import annotations

import time
from dataclasses import dataclass

from dulwich.objects import Commit

from .dulwich_ids import oid

__all__ = [
    "RECOVERY_TRAILER",
    "Identity",
    "checkpoint_message",
    "make_commit",
    "recovery_message",
]

RECOVERY_TRAILER = "Autarch-Recovery-Checkpoint: true"
"""The trailer that marks a recovery checkpoint (``git log --grep`` finds them)."""


@dataclass(frozen=True)
class Identity:
    """Author and committer of every commit the service makes (from the settings)."""

    author_name: str = "Autarch"
    author_email: str = "autarch@localhost"
    committer_name: str | None = None
    """Defaults to the author."""
    committer_email: str | None = None

    @property
    def author(self) -> bytes:
        return f"{self.author_name} <{self.author_email}>".encode()

    @property
    def committer(self) -> bytes:
        name = self.committer_name or self.author_name
        email = self.committer_email or self.author_email
        return f"{name} <{email}>".encode()


def _compose(subject: str, body: str, trailers: list[str]) -> bytes:
    parts = [subject.strip()]
    if body.strip():
        parts.append(body.strip())
    if trailers:
        parts.append("\n".join(trailers))
    return ("\n\n".join(parts) + "\n").encode("utf-8")


def checkpoint_message(*, summary: str, body: str = "", co_author: str | None = None) -> bytes:
    """The agent's summary as subject, the optional body, and the requesting user as co-author."""
    return _compose(summary, body, [f"Co-authored-by: {co_author}"] if co_author else [])


def recovery_message(*, pulse_id: str, status: str, reason: str = "", co_author: str | None = None) -> bytes:
    """A recovery checkpoint: what ended how, why, and the marking trailers."""
    trailers = [RECOVERY_TRAILER, f"Autarch-Pulse: {pulse_id}", f"Autarch-Pulse-Status: {status}"]
    if co_author:
        trailers.append(f"Co-authored-by: {co_author}")
    return _compose(f"chore(recovery): work in progress of {status} pulse {pulse_id}", reason, trailers)


def make_commit(*, tree: bytes, parents: list[bytes], message: bytes, identity: Identity) -> Commit:
    """A commit object (not yet stored) dated now in the local timezone."""
    commit = Commit()
    commit.tree = tree
    commit.parents = [oid(p) for p in parents]
    commit.author = identity.author
    commit.committer = identity.committer
    commit.author_time = commit.commit_time = int(time.time())
    commit.author_timezone = commit.commit_timezone = time.localtime().tm_gmtoff
    commit.message = message
    return commit
