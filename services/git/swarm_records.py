"""The git service's records of a workflow's swarm: its workers and every bead attempt.

One JSON file per workflow, ``<data dir>/git/swarms/<workflow id>.json``, replaced atomically and
only written under the repository's lock (as workflow records are). It doubles as the journal of
the swarm verbs: each records what it is about to do before it moves a branch, so a repeated
command (after a timeout or a restarted service) answers the first outcome or finishes the step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from .store import write_atomic

__all__ = ["AttemptRecord", "MergeJournal", "MergeOutcome", "SwarmRecord", "SwarmStore", "WorkerRecord", "attempt_key"]


class WorkerRecord(msgspec.Struct, kw_only=True):
    name: str
    branch: str
    worktree_path: str
    worktree_id: str
    """The name of the worktree's administrative directory (``<common dir>/worktrees/<id>``)."""
    state: Literal["new", "opening", "open", "closed"] = "opening"
    """``new`` only in memory, before the first save."""
    current: str | None = None
    """The key of the bead attempt the worktree was last reset for."""


class MergeJournal(msgspec.Struct, kw_only=True):
    """A merge whose commit exists but whose move of the workflow branch may not be done."""

    commit: str
    """What the workflow branch moves to."""
    old_tip: str
    """Where it pointed when the merge was computed."""
    fast_forward: bool


class MergeOutcome(msgspec.Struct, kw_only=True):
    status: Literal["merged", "conflict"]
    commit: str | None = None
    fast_forward: bool = False
    conflicting_files: list[str] = []
    landed_since: list[str] = []


class AttemptRecord(msgspec.Struct, kw_only=True):
    bead_id: str
    attempt: int
    worker: str
    base_commit: str
    ready: bool = False
    """The worker branch and worktree were reset to ``base_commit``."""
    committed: bool = False
    commit: str | None = None
    files_changed: list[str] = []
    message: str = ""
    merging: MergeJournal | None = None
    merged: MergeOutcome | None = None


class SwarmRecord(msgspec.Struct, kw_only=True):
    workflow_id: str
    workers: dict[str, WorkerRecord] = {}
    attempts: dict[str, AttemptRecord] = {}
    """Keyed by :func:`attempt_key`."""


def attempt_key(bead_id: str, attempt: int) -> str:
    return f"{bead_id}#{attempt}"


_encoder = msgspec.json.Encoder()


class SwarmStore:
    """Swarm records under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._decoder = msgspec.json.Decoder(SwarmRecord)

    def load(self, workflow_id: str) -> SwarmRecord:
        """The workflow's swarm record (an empty one when it has none yet)."""
        try:
            return self._decoder.decode((self.root / f"{workflow_id}.json").read_bytes())
        except FileNotFoundError:
            return SwarmRecord(workflow_id=workflow_id)

    def save(self, record: SwarmRecord) -> None:
        write_atomic(self.root / f"{record.workflow_id}.json", _encoder.encode(record))
