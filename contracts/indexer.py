"""Commands, queries, replies and progress events of the indexer (seed 004's ``semantic_search``).

A *project* is a git repository, named by a stable id derived from its path. It has *scopes*: the
project's own scope (its working tree, or one commit's tree) and one scope per pulse worktree.
Chunks are keyed by git blob id and shared by every scope of the project, so indexing a worktree
re-embeds only the files the pulse changed.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .base import Command, Contract, Query, Reply

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "NOT_INDEXED_MESSAGE",
    "PROJECT_SCOPE",
    "IndexAccepted",
    "IndexProgress",
    "IndexProject",
    "IndexStatus",
    "IndexStatusReply",
    "IndexWorktree",
    "IndexerErrorCode",
    "ScopeStatus",
    "SearchResult",
    "SearchResults",
    "SemanticSearch",
]

NOT_INDEXED_MESSAGE = "Project has not been indexed yet."
"""The exact error text of seed 004's ``semantic_search`` for a project without an index."""

PROJECT_SCOPE = "project"
"""Scope id of a project's own index (worktree scopes get ids derived from their paths)."""

DEFAULT_MAX_RESULTS = 10

NonEmpty = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
ProjectId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_-]{0,79}$(?!\n)")]
CommitIsh = Annotated[str, msgspec.Meta(min_length=1, max_length=250)]
SearchQuery = Annotated[str, msgspec.Meta(min_length=1, max_length=10_000)]
PatternWeight = Annotated[str, msgspec.Meta(min_length=3, max_length=1000)]
MaxResults = Annotated[int, msgspec.Meta(ge=1, le=200)]
ScopeState = Literal["indexing", "ready", "failed"]
ScopeKind = Literal["project", "worktree"]
IndexPhase = Literal["scanning", "chunking", "embedding", "storing", "done", "failed"]


class IndexerErrorCode:
    """Domain error codes of the indexer, beside the common ones of :class:`~autarch.contracts.errors.ErrorCode`."""

    NOT_INDEXED = "not_indexed"
    """The project (or worktree) has no completed index; the message is :data:`NOT_INDEXED_MESSAGE`."""
    NOT_A_REPOSITORY = "not_a_repository"
    """The path does not exist or is not inside a git repository."""
    UNKNOWN_PROJECT = "unknown_project"
    """No project with that id was ever indexed."""
    UNKNOWN_COMMIT = "unknown_commit"
    """The commit does not resolve in the repository."""
    INVALID_QUERY = "invalid_query"
    """The query is empty or only whitespace."""
    INVALID_PATTERN_WEIGHTS = "invalid_pattern_weights"
    """An entry of ``patternWeights`` is not ``glob:weight`` with a finite weight >= 0."""


class IndexProject(Command, kw_only=True):
    """Index a project: its working tree as checked out, or the tree of ``commit``. Runs in the background."""

    path: NonEmpty
    """Absolute path of the repository (any path inside it is accepted)."""
    commit: CommitIsh | None = None
    """A commit-ish to index instead of the working tree (branch, tag, sha)."""
    wait: bool = False
    """Answer only when the job is done (for scripts and tests; mind the request timeout)."""


class IndexWorktree(Command, kw_only=True):
    """Index a pulse's worktree (its embedding scope). Files whose blob is already indexed are not re-embedded."""

    project: ProjectId
    """Id of the project the worktree belongs to (from :class:`IndexAccepted`)."""
    worktree: NonEmpty
    """Absolute path of the worktree."""
    base: CommitIsh | None = None
    """The commit the worktree branched from, recorded with the scope."""
    wait: bool = False
    """Answer only when the job is done."""


class IndexStatus(Query, kw_only=True):
    """State of a project's scopes; ``root`` narrows it to the scope of that path."""

    project: ProjectId | None = None
    root: NonEmpty | None = None


class SemanticSearch(Query, kw_only=True):
    """Seed 004's ``semantic_search``: address the scope by ``root`` (repository or worktree path) or ``project``."""

    query: SearchQuery
    project: ProjectId | None = None
    """Project id; searches the project's own scope unless ``root`` names a worktree."""
    root: NonEmpty | None = None
    """Absolute path of the repository or worktree the agent works in."""
    pattern_weights: list[PatternWeight] | None = msgspec.field(default=None, name="patternWeights")
    """``glob:weight`` entries: >1 boosts, <1 penalizes, 0 excludes."""
    max_results: MaxResults = msgspec.field(default=DEFAULT_MAX_RESULTS, name="maxResults")


class IndexAccepted(Reply, kw_only=True):
    """An indexing job was started (or was already running for that scope), or finished when ``wait`` was set."""

    project: str
    scope: str
    job_id: str
    root: str
    state: ScopeState
    progress_subject: str
    """Core-NATS subject the job's :class:`IndexProgress` events go to."""
    files: int = 0
    chunks: int = 0
    embedded_chunks: int = 0
    """Chunks that had to be embedded (the rest were reused by blob id)."""
    seconds: float = 0.0
    error: str | None = None


class ScopeStatus(Contract, kw_only=True):
    scope: str
    kind: ScopeKind
    root: str
    state: ScopeState
    commit: str | None = None
    base: str | None = None
    files: int = 0
    chunks: int = 0
    indexed_at: float | None = None
    """Unix time the last completed index of this scope was stored."""
    error: str | None = None


class IndexStatusReply(Reply, kw_only=True):
    project: str
    root: str
    embedder: str
    scopes: list[ScopeStatus]


class SearchResult(Contract, kw_only=True):
    """One hit, exactly as seed 004 names its fields."""

    file_path: str
    start_line: int
    end_line: int
    snippet: str
    score: float
    adjusted_score: float


class SearchResults(Reply, kw_only=True):
    results: list[SearchResult]
    project: str
    scope: str


class IndexProgress(Contract, kw_only=True):
    """A progress event of an indexing job, on ``subjects.indexer_progress(project)`` (core NATS)."""

    project: str
    scope: str
    job_id: str
    phase: IndexPhase
    done: int = 0
    """Units finished in this phase (files while scanning/chunking, chunks while embedding)."""
    total: int = 0
    files: int = 0
    chunks: int = 0
    embedded_chunks: int = 0
    error: str | None = None
