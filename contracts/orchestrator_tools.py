"""Commands and queries the tools service forwards to the orchestrator for the tools whose effect it owns.

Notes, baselines, the scope card and the review card belong to the orchestrator. The tools
service validates the model's arguments exactly as seed 004 says and then sends one of these
typed messages to ``autarch.svc.orchestrator.<verb>`` (the orchestrator adds the ``*_VERB``
names below to ``subjects.ORCHESTRATOR_VERBS`` when it serves them). An answer of ``not_found``
becomes the seed's "… not found" error; no answer at all becomes an error the model can read.
(Diffs come from the git service's ``workflow_diff``/``get_diff_artifact`` and semantic search
from the indexer's ``semantic_search``; their contracts are in ``git.py`` and ``indexer.py``.)

``idempotency_key`` (``<session>:<tool call>``) lets the owner drop a duplicate delivery.
"""

from __future__ import annotations

from typing import Literal

from .base import Command, Query, Reply

__all__ = [
    "ADD_REVIEW_COMMENT_VERB",
    "COMPLETE_REVIEW_VERB",
    "GET_SCOPE_CARD_VERB",
    "ORCHESTRATOR_TOOL_VERBS",
    "RECORD_BASELINE_VERB",
    "SEARCH_HISTORY_VERB",
    "TAKE_NOTE_VERB",
    "AddReviewComment",
    "BaselineRecorded",
    "CompleteReview",
    "GetScopeCard",
    "HistoryHit",
    "HistoryHits",
    "NoteTaken",
    "RecordBaseline",
    "ReviewCommentAdded",
    "ReviewCompleted",
    "ScopeCard",
    "SearchHistory",
    "TakeNote",
]

TAKE_NOTE_VERB = "take_note"
RECORD_BASELINE_VERB = "record_baseline"
GET_SCOPE_CARD_VERB = "get_scope_card"
ADD_REVIEW_COMMENT_VERB = "add_review_comment"
COMPLETE_REVIEW_VERB = "complete_review"
SEARCH_HISTORY_VERB = "search_history"
"""Orchestrator verbs (``autarch.svc.orchestrator.<verb>``)."""
ORCHESTRATOR_TOOL_VERBS = (
    TAKE_NOTE_VERB,
    RECORD_BASELINE_VERB,
    GET_SCOPE_CARD_VERB,
    ADD_REVIEW_COMMENT_VERB,
    COMPLETE_REVIEW_VERB,
)


class TakeNote(Command, kw_only=True):
    """Store a note for the workflow's current stage, or for a loop session's later iterations."""

    run_id: str
    """The workflow or the loop session the note is for (``ToolCall.run_id``)."""
    session_id: str
    idempotency_key: str
    note: str


class NoteTaken(Reply, kw_only=True):
    note_id: str = ""


class RecordBaseline(Command, kw_only=True):
    """Record a pre-existing build/lint/test issue found by preflight (seed 000, baseline structure)."""

    workflow_id: str
    session_id: str
    idempotency_key: str
    issue_type: Literal["Error", "Warning"]
    source: Literal["Build", "Lint", "Test"]
    pattern: str
    file_path: str | None = None
    description: str | None = None


class BaselineRecorded(Reply, kw_only=True):
    baseline_id: str


class GetScopeCard(Query, kw_only=True):
    """The approved scope card of a workflow; ``not_found`` when it has none."""

    workflow_id: str


class ScopeCard(Reply, kw_only=True):
    title: str
    description: str
    in_scope: list[str] = []
    out_of_scope: list[str] = []
    constraints: list[str] = []


class AddReviewComment(Command, kw_only=True):
    """Add a comment to the workflow's review card; ``not_found`` when there is no review card."""

    workflow_id: str
    session_id: str
    idempotency_key: str
    kind: Literal["line", "file", "review"]
    severity: Literal["High", "Medium", "Low"]
    category: str
    description: str
    file_path: str | None = None
    start_line: int | None = None
    end_line: int | None = None


class ReviewCommentAdded(Reply, kw_only=True):
    comment_id: str


class CompleteReview(Command, kw_only=True):
    """Finalize the review card with a recommendation; ``not_found`` when there is no review card."""

    workflow_id: str
    session_id: str
    idempotency_key: str
    recommendation: Literal["approve", "reject", "manual_review"]
    summary: str


class ReviewCompleted(Reply, kw_only=True):
    recommendation: str


class SearchHistory(Query, kw_only=True):
    """A loop iteration's ``search_history``: the recorded turns of the session's project that match ``query``."""

    session_id: str
    """The loop session whose iteration asks."""
    query: str
    limit: int = 5


class HistoryHit(Reply, kw_only=True):
    turn_id: str
    iteration: int | None
    score: float
    excerpt: str


class HistoryHits(Reply, kw_only=True):
    items: list[HistoryHit]
