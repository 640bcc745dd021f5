"""Commands, queries and replies of the git service (branches, worktrees, checkpoints, diffs).

One *run* owns one branch and one linked worktree under the data dir: a gated workflow, or a loop session (a
Pulse Protocol loop reuses the same branches, pulses and checkpoints, one pulse per iteration). Every contract here
names it ``run_id`` (the workflow's id, or the loop session's); the text below says "workflow branch" for the run's
branch. Each pulse
runs on its own pulse branch, named ``<workflow branch>.pulse-<pulse id>`` (git cannot hold
both ``x`` and ``x/pulse-1`` as branches: a ref cannot be a file and a directory at once), and
ends either as one checkpoint commit fast-forwarded onto the workflow branch or as a recovery
checkpoint kept on its pulse branch. Every command is idempotent: the same command retried
(after a timeout or a crash of the service) answers with the first outcome.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .base import Command, Query, Reply

__all__ = [
    "COMMIT_TYPES",
    "CONVENTIONAL_SUBJECT",
    "RUN_ID_WAS",
    "CheckpointPulse",
    "CreateWorkflowBranch",
    "DiffArtifact",
    "DiffArtifactRef",
    "FileChange",
    "GetDiffArtifact",
    "GetWorkflowBranch",
    "GetWorktreeRecord",
    "GitErrorCode",
    "ListWorktrees",
    "ModifiedTrackedFiles",
    "PulseCheckpointed",
    "PulseDiff",
    "PulseStarted",
    "PulseView",
    "RecoveryCheckpoint",
    "RecoveryCheckpointed",
    "RegisterRepository",
    "RemoveWorktree",
    "RepositoryRegistered",
    "StartPulse",
    "TrackedChanges",
    "WorkflowBranchView",
    "WorkflowDiff",
    "WorktreeList",
    "WorktreeRecord",
    "WorktreeRemoved",
    "WorktreeView",
]


class GitErrorCode:
    """Domain error codes of the git service (besides the generic ``ErrorCode`` ones)."""

    NOT_A_REPOSITORY = "not_a_repository"
    """The path is not the top directory of a git repository dulwich can open."""
    BASE_BRANCH_MISSING = "base_branch_missing"
    """The requested base branch does not exist in the repository."""
    INVALID_BRANCH_NAME = "invalid_branch_name"
    """The branch name is not a legal git branch name (``git check-ref-format --branch``)."""
    BRANCH_EXISTS = "branch_exists"
    """The branch (or a ref that would clash with it, ``a`` for ``a/b``) already exists."""
    DIRTY_WORKTREE = "dirty_worktree"
    """Tracked files of the worktree are modified where a clean worktree is required."""
    NOT_FAST_FORWARD = "not_fast_forward"
    """The workflow branch moved since the pulse started: the checkpoint cannot fast-forward it."""
    PULSE_IN_PROGRESS = "pulse_in_progress"
    """Another pulse of the workflow is running (or the pulse already ended)."""
    NO_ACTIVE_PULSE = "no_active_pulse"
    """The pulse named is not the workflow's running pulse."""
    FILE_TOO_LARGE = "file_too_large"
    """A worktree file is larger than ``git_max_file_bytes``: nothing was committed (details: path, size, limit)."""
    PATH_TOO_DEEP = "path_too_deep"
    """A worktree path nests more directories than a commit may hold (500): nothing was committed."""
    UNREADABLE_PATH = "unreadable_path"
    """A directory or file of the worktree cannot be read (permissions, a name too long): nothing was committed."""


AbsolutePath = Annotated[str, msgspec.Meta(min_length=2, max_length=4096, pattern=r"^/")]
# Syntax beyond length is checked by the service, which answers ``invalid_branch_name``.
BranchName = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Identifier = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$(?!\n)")]
"""Run (workflow or loop session) and pulse ids: used in branch names, directory names and worktree ids."""
RUN_ID_WAS = {"workflow_id": "run_id"}
"""``run_id`` was ``workflow_id`` before loop sessions stopped passing as workflows (issue 33): a record stored in the
old shape (a diff artifact's ``DiffArtifactRef``) is read with ``contracts.base.decode_renamed(data, kind,
RUN_ID_WAS)``."""
CommitHex = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{40}$(?!\n)")]
RepositoryId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{16}$(?!\n)")]
ArtifactId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}$(?!\n)")]
COMMIT_TYPES = ("feat", "fix", "docs", "style", "refactor", "perf", "test", "chore", "build", "ci")
"""Seed 004's Conventional Commit types, the only ones a pulse's commit subject may start with."""
CONVENTIONAL_SUBJECT = rf"^(?:{'|'.join(COMMIT_TYPES)})(\([^()\r\n]+\))?!?: [^\r\n]*\S[^\r\n]*$(?!\n)"
"""A one-line Conventional Commit subject: ``type(scope)!: description`` (scope and ``!`` optional)."""
Summary = Annotated[
    str,
    msgspec.Meta(
        min_length=4,
        max_length=200,
        pattern=CONVENTIONAL_SUBJECT,
        description="A one-line Conventional Commit subject, e.g. 'feat(auth): validate JWT tokens'.",
    ),
]
Body = Annotated[str, msgspec.Meta(max_length=20_000)]
CoAuthor = Annotated[
    str,
    msgspec.Meta(
        max_length=300,
        pattern=r"^[^<>\r\n]*[^<>\s][^<>\r\n]* <[^<>\s]+>$(?!\n)",
        description="'Name <email>', written as a Co-authored-by trailer.",
    ),
]


# --- repositories -------------------------------------------------------------------------------


class RegisterRepository(Command, kw_only=True):
    """Register a local repository; idempotent (the same path always gets the same id)."""

    path: AbsolutePath
    """Absolute path of the repository's top directory (the one holding ``.git``)."""
    base_branch: BranchName | None = "main"
    """The branch workflows start from unless they name another; must exist. None: the branch checked out in
    the repository (a loop session started without a base branch)."""


class RepositoryRegistered(Reply, kw_only=True):
    repository_id: str
    """Stable id derived from the repository's real path."""
    path: str
    """The real (symlink-free) path of the repository."""
    base_branch: str
    base_commit: str
    """Where the base branch points now."""


class ListWorktrees(Query, kw_only=True):
    """The worktrees Autarch made in one repository, as git sees them."""

    repository_id: RepositoryId


class WorktreeView(Reply, kw_only=True):
    run_id: str
    path: str
    branch: str | None
    """The checked-out branch (the workflow branch, or a pulse branch while a pulse runs)."""
    head: str | None
    prunable: bool = False
    """The directory is gone; ``git worktree prune`` would drop the entry."""
    locked: bool = False


class WorktreeList(Reply, kw_only=True):
    repository_id: str
    items: list[WorktreeView]


class GetWorktreeRecord(Query, kw_only=True):
    """Where git keeps the repository of a directory Autarch knows, from the git service's own records.

    Asked by the tools service before it runs git on a worktree or grants a command read access to a git
    directory: a worktree's ``.git`` file is written by git, but an agent can rewrite it, so nothing outside the
    sandbox takes a path from it (docs/security.md). Answered for a workflow's worktree, a swarm worker's
    worktree and a registered repository's top directory; any other path is ``not_found``.
    """

    path: AbsolutePath
    """The directory, as the caller names it (compared by its real path)."""


class WorktreeRecord(Reply, kw_only=True):
    path: str
    """The real path of the work tree."""
    repository_id: str
    repository_path: str
    git_dir: str
    """What ``GIT_DIR`` must be: the linked worktree's administrative directory
    (``<common dir>/worktrees/<id>``), or the repository's own ``.git`` directory."""
    common_dir: str
    """The repository's git directory (objects, refs, config), shared by all its worktrees."""
    linked: bool
    """True for a linked worktree, whose ``.git`` is a file that must read ``gitdir: <git_dir>``."""
    run_id: str | None = None
    worker: str | None = None
    """The swarm worker whose worktree this is (None: the workflow's own, or the repository)."""


# --- workflow branches and worktrees ----------------------------------------------------------


class CreateWorkflowBranch(Command, kw_only=True):
    """Create the workflow branch off the base branch and the workflow's worktree.

    Never overwrites a branch: a branch of that name that this workflow did not create is
    answered with ``branch_exists``. Retrying the same command answers with the same branch.
    """

    run_id: Identifier
    repository_id: RepositoryId
    branch: BranchName
    """The workflow branch name the user chose, e.g. ``autarch/jwt-validation``."""
    base_branch: BranchName | None = None
    """Defaults to the repository's registered base branch."""
    start_commit: CommitHex | None = None
    """Cut the branch at this commit instead of the base branch's head (a fork of another workflow: the commit
    that workflow's branch had at the fork's event). The repository must hold it (``not_found`` otherwise)."""
    base_commit: CommitHex | None = None
    """With ``start_commit``: the commit the work is measured from (the original's base, so the fork's diff is
    its whole change); default ``start_commit``."""


class PulseView(Reply, kw_only=True):
    pulse_id: str
    branch: str
    base_commit: str
    state: Literal["running", "succeeded", "recovered", "discarded"]
    """``recovered``: ended with a recovery checkpoint kept on its branch; ``discarded``: ended
    without changes to keep."""
    commit: str | None = None
    is_recovery_checkpoint: bool = False


class WorkflowBranchView(Reply, kw_only=True):
    run_id: str
    repository_id: str
    repository_path: str
    branch: str
    base_branch: str
    base_commit: str
    """Where the base branch pointed when the workflow branch was made."""
    head: str | None
    """Where the workflow branch points now (None once deleted)."""
    worktree_path: str
    worktree_removed: bool = False
    active_pulse: str | None = None
    pulses: list[PulseView] = []


class GetWorkflowBranch(Query, kw_only=True):
    run_id: Identifier


class ModifiedTrackedFiles(Query, kw_only=True):
    """The preflight guard: tracked files that differ from the worktree's last checkout."""

    run_id: Identifier


class FileChange(Reply, kw_only=True):
    path: str
    change: Literal["modified", "deleted", "added", "type_changed"]
    """``added``: a new path staged in the index (an untracked file is never reported)."""


class TrackedChanges(Reply, kw_only=True):
    run_id: str
    clean: bool
    files: list[FileChange]


class RemoveWorktree(Command, kw_only=True):
    """Remove the workflow's worktree (the workflow ended or was abandoned); idempotent."""

    run_id: Identifier
    force: bool = False
    """Remove even with modified tracked files or a running pulse (their changes are lost)."""
    delete_branches: bool = False
    """Also delete the workflow branch and every pulse branch (an abandoned workflow)."""


class WorktreeRemoved(Reply, kw_only=True):
    run_id: str
    path: str
    removed: bool
    """False when the worktree was already gone."""
    deleted_branches: list[str] = []


# --- pulses -------------------------------------------------------------------------------------


class StartPulse(Command, kw_only=True):
    """Reset the worktree to the workflow branch head and create the pulse branch there."""

    run_id: Identifier
    pulse_id: Identifier


class PulseStarted(Reply, kw_only=True):
    run_id: str
    pulse_id: str
    pulse_branch: str
    base_commit: str
    worktree_path: str


class CheckpointPulse(Command, kw_only=True):
    """Commit the worktree as the pulse's checkpoint and fast-forward the workflow branch to it.

    Every change in the worktree counts, new files included (as ``git add -A``: ignored files
    stay out); no change makes an empty commit, unless ``skip_if_unchanged``: then the pulse is discarded
    with no commit (``committed`` false in the reply). The pulse branch is deleted and the worktree reset to
    the new workflow head.
    """

    run_id: Identifier
    pulse_id: Identifier
    summary: Summary
    """The agent's Conventional Commit summary: the commit's subject line."""
    body: Body = ""
    """Optional commit body (wrapped text, no trailers)."""
    co_author: CoAuthor | None = None
    """The requesting user, when known, as 'Name <email>'."""
    skip_if_unchanged: bool = False
    """A pulse that changed nothing makes no commit (a loop iteration commits only when files changed)."""


class PulseCheckpointed(Reply, kw_only=True):
    run_id: str
    pulse_id: str
    commit: str
    """The checkpoint commit; the workflow branch's unchanged head when ``committed`` is false."""
    workflow_branch: str
    files_changed: int
    """Paths that differ from the pulse's base (0 for an empty pulse)."""
    committed: bool = True
    """False when ``skip_if_unchanged`` discarded a pulse that changed nothing."""
    paths: list[str] = []
    """The paths that differ from the pulse's base, sorted."""


class RecoveryCheckpoint(Command, kw_only=True):
    """End a failed or stopped pulse, keeping its uncommitted work on its pulse branch.

    With changes, a commit marked as a recovery checkpoint (trailer
    ``Autarch-Recovery-Checkpoint: true``) goes on the pulse branch, which is kept; without, the
    pulse branch is deleted. Either way the worktree is reset to the workflow branch head.
    """

    run_id: Identifier
    pulse_id: Identifier
    status: Literal["failed", "stopped"]
    reason: Body = ""
    """Why the pulse ended (the failure reason), recorded in the commit body."""
    co_author: CoAuthor | None = None


class RecoveryCheckpointed(Reply, kw_only=True):
    run_id: str
    pulse_id: str
    is_recovery_checkpoint: bool
    """True when a recovery commit was made (the worktree had changes)."""
    commit: str | None = None
    pulse_branch: str | None = None
    """The kept pulse branch holding the recovery commit."""
    files_changed: int = 0


# --- diffs --------------------------------------------------------------------------------------


class WorkflowDiff(Query, kw_only=True):
    """The unified diff of the workflow branch against its base (from their merge base)."""

    run_id: Identifier


class PulseDiff(Query, kw_only=True):
    """The unified diff of one ended pulse's commit (checkpoint or recovery) against its parent."""

    run_id: Identifier
    pulse_id: Identifier


class DiffArtifactRef(Reply, kw_only=True):
    """A stored diff; the review tools fetch its text with :class:`GetDiffArtifact`."""

    artifact_id: str
    kind: Literal["workflow", "pulse"]
    run_id: str
    pulse_id: str | None = None
    from_commit: str
    to_commit: str
    files_changed: int
    insertions: int
    deletions: int
    size: int
    """Length of the diff text in characters."""


class GetDiffArtifact(Query, kw_only=True):
    artifact_id: ArtifactId
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Character offset to read from (large diffs are read in pages)."""
    limit: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 250_000
    """Characters to return at most; the default page stays below a default NATS server's 1 MB payload."""


class DiffArtifact(Reply, kw_only=True):
    ref: DiffArtifactRef
    diff: str
    """Git's unified diff format (``diff --git`` headers); undecodable bytes are replaced."""
    offset: int
    next_offset: int | None = None
    """Offset of the next page, None when this page ends the diff."""
