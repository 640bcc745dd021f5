"""The git service's side of a swarm (seed 002): one worktree per worker, one commit per bead, ordered merges.

Each worker of a workflow has its own linked worktree on its own branch ``<workflow branch>.w-<worker>``
(a sibling of the workflow branch, for the same reason as pulse branches). A bead attempt starts from the
current tip of the workflow branch (:class:`BeginBead`), ends as one commit ``feat(<bead-id>): <summary>``
on the worker branch (:class:`CommitBead`), and is merged onto the workflow branch by the git service one
merge at a time per workflow (:class:`MergeBead`): a fast-forward when nothing landed since the attempt
began, else the bead's file changes applied on the new tip when none of its files changed meanwhile, else
``conflict`` with the files and nothing changed. Every command is idempotent on ``(bead_id, attempt)``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .base import Command, Reply

__all__ = [
    "BeadBegun",
    "BeadCommitted",
    "BeadMerged",
    "BeginBead",
    "CloseWorker",
    "CommitBead",
    "MergeBead",
    "OpenWorker",
    "SyncWorkflowWorktree",
    "WorkerClosed",
    "WorkerFilesWritten",
    "WorkerWorktree",
    "WorkflowWorktreeSynced",
    "WriteWorkerFiles",
]

Identifier = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$(?!\n)")]
"""Workflow ids, worker names and bead ids: safe in a branch name and a directory name."""
Attempt = Annotated[int, msgspec.Meta(ge=1)]


class OpenWorker(Command, kw_only=True):
    """Create the worker's branch and worktree at the workflow branch tip (idempotent: an open worker is kept)."""

    workflow_id: Identifier
    worker: Identifier


class WorkerWorktree(Reply, kw_only=True):
    workflow_id: str
    worker: str
    branch: str
    worktree_path: str


class BeginBead(Command, kw_only=True):
    """Point the worker's branch at the workflow branch tip and reset its worktree there (leftovers discarded)."""

    workflow_id: Identifier
    worker: Identifier
    bead_id: Identifier
    attempt: Attempt


class BeadBegun(Reply, kw_only=True):
    workflow_id: str
    worker: str
    bead_id: str
    attempt: int
    base_commit: str
    """The workflow branch tip the attempt starts from (the same answer when the command is repeated)."""
    worktree_path: str


class CommitBead(Command, kw_only=True):
    """Commit everything changed in the worker's worktree (as ``git add -A``) as ``feat(<bead_id>): <summary>``."""

    workflow_id: Identifier
    worker: Identifier
    bead_id: Identifier
    attempt: Attempt
    summary: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    body: Annotated[str, msgspec.Meta(max_length=20_000)] = ""
    files: dict[Annotated[str, msgspec.Meta(pattern=r"^(?!/)(?!.*(^|/)\.\.(/|$)).{1,512}$(?!\n)")], str] = {}
    """Files written into the worktree just before the commit, path (relative) → content: the bead's
    verification evidence goes into its own commit this way."""


class BeadCommitted(Reply, kw_only=True):
    workflow_id: str
    bead_id: str
    attempt: int
    commit: str | None
    """None when the worktree held no change (no empty commit is made)."""
    base_commit: str
    files_changed: list[str] = []
    message: str = ""


class MergeBead(Command, kw_only=True):
    """Land the attempt's commit on the workflow branch; serialized per workflow."""

    workflow_id: Identifier
    worker: Identifier
    bead_id: Identifier
    attempt: Attempt


class BeadMerged(Reply, kw_only=True):
    workflow_id: str
    bead_id: str
    attempt: int
    status: Literal["merged", "conflict"]
    commit: str | None = None
    """The commit now at the workflow branch tip for this bead (``merged``)."""
    fast_forward: bool = False
    conflicting_files: list[str] = []
    """``conflict``: the bead's files that changed on the workflow branch since the attempt began."""
    landed_since: list[str] = []
    """``conflict``: the commits that landed on the workflow branch since the attempt began, oldest first."""


class SyncWorkflowWorktree(Command, kw_only=True):
    """Bring the workflow worktree's checkout to the workflow branch tip (after merges moved the branch)."""

    workflow_id: Identifier


class WorkflowWorktreeSynced(Reply, kw_only=True):
    workflow_id: str
    head: str


class WriteWorkerFiles(Command, kw_only=True):
    """Write coordination files (a handoff and its manifest) into the worker's worktree under ``.pulse/``.

    ``.pulse/`` is the swarm's, not the change's: the worker's session reads it, and bead commits leave it out.
    """

    workflow_id: Identifier
    worker: Identifier
    files: dict[Annotated[str, msgspec.Meta(pattern=r"^\.pulse/(?!.*(^|/)\.\.(/|$)).{1,500}$(?!\n)")], str]


class WorkerFilesWritten(Reply, kw_only=True):
    workflow_id: str
    worker: str
    paths: list[str]


class CloseWorker(Command, kw_only=True):
    """Remove the worker's worktree and branch (idempotent)."""

    workflow_id: Identifier
    worker: Identifier


class WorkerClosed(Reply, kw_only=True):
    workflow_id: str
    worker: str
    removed: bool
