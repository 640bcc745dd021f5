"""Storage that cannot be written for lack of space, on the wire: in health answers and in storage notices.

A service that cannot write a store, the event stream or a worktree reports it (``runtime/storage.py``); one
whose stalled work belongs to workflows tells the orchestrator with a :class:`StorageNotice` on
``autarch.storage.<service>`` (core NATS), so that those workflows halt with ``disk_full`` and carry on once
the path has room again.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["StorageNotice", "StorageProblem"]


class StorageProblem(msgspec.Struct, kw_only=True, frozen=True):
    """A path a service cannot write for lack of space (a store, the event stream's files, a worktree)."""

    kind: Literal["disk_full"] = "disk_full"
    """Why it cannot be written; ``disk_full``: no space left on the file system holding ``path``."""
    path: str
    """What could not be written: a database file, the stream's directory, a worktree."""
    message: str
    """The failure as the writer saw it, e.g. ``no space left on device: database or disk is full``."""


class StorageNotice(msgspec.Struct, kw_only=True, frozen=True):
    """What a service's stalled work is waiting for; sent when it stalls, again every few seconds while it
    waits, and once more (``problem`` None) when it goes on."""

    service: str
    problem: StorageProblem | None
    """What could not be written; None: the path has room again and the work goes on."""
    path: str
    """The path the work waited for (``problem.path`` while it waits)."""
    workflow_ids: list[str] = []
    """The workflows (or loop sessions) whose work waits for it."""
