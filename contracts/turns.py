"""Turn memory: the project's recorded agent turns, for the anchors of loop iterations (seed 001).

The indexer keeps every recorded turn of a project (the orchestrator records each loop iteration's turn
once it ended) and answers the queries the anchor resolver needs, in the seed's priority order: does an
explicit or chained anchor exist, which turns match the goal (semantic), which turn is the most recent
(temporal), and the slice of conversation around an anchor within a token budget.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from .base import Command, Query, Reply

__all__ = [
    "FindTurn",
    "LatestTurn",
    "RecordTurns",
    "SearchTurns",
    "SliceView",
    "TurnFound",
    "TurnHit",
    "TurnHits",
    "TurnRecord",
    "TurnSlice",
    "TurnsRecorded",
]

ProjectPath = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
TurnId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class TurnRecord(msgspec.Struct, kw_only=True):
    """One agent turn as remembered: what the user (or loop) asked and what the agent answered."""

    turn_id: str
    session_id: str
    project_path: str
    """The repository the turn worked on (the loop session's ``project_path``)."""
    index: int
    """The turn's position in its session (0: the kickoff): its depth in the conversation."""
    user_text: str
    text: str
    """The assistant's text."""
    occurred_at: datetime
    loop_session_id: str | None = None
    iteration_number: int | None = None
    tokens: int = 0
    """Estimated tokens of ``user_text`` + ``text`` (what the turn costs in a slice)."""


class RecordTurns(Command, kw_only=True):
    """Remember ``turns`` (idempotent on ``turn_id``: a turn recorded twice is kept once)."""

    turns: list[TurnRecord]


class TurnsRecorded(Reply, kw_only=True):
    recorded: int
    """Turns that were new."""
    total: int
    """Turns remembered for the project(s) of this batch."""


class FindTurn(Query, kw_only=True):
    """Look up a turn by id (an explicit or chained anchor)."""

    turn_id: TurnId
    project_path: ProjectPath | None = None
    """When given, a turn of another project is not found."""


class LatestTurn(Query, kw_only=True):
    """The project's most recent turn (the temporal anchor)."""

    project_path: ProjectPath


class TurnFound(Reply, kw_only=True):
    turn: TurnRecord | None


class SearchTurns(Query, kw_only=True):
    """Turns of the project most relevant to ``query`` (the semantic anchor)."""

    project_path: ProjectPath
    query: Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
    limit: Annotated[int, msgspec.Meta(ge=1, le=100)] = 5


class TurnHit(msgspec.Struct, kw_only=True):
    turn_id: str
    session_id: str
    score: float
    """Cosine similarity of the turn to the query, in [0, 1] (the anchor's ``salience``); hits are ranked by the
    fusion of that similarity's ranking and BM25's."""
    index: int
    excerpt: str


class TurnHits(Reply, kw_only=True):
    items: list[TurnHit]


class TurnSlice(Query, kw_only=True):
    """The anchor turn and its neighbours in its conversation, nearest first, within ``token_budget``."""

    turn_id: TurnId
    token_budget: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 4000


class SliceView(Reply, kw_only=True):
    slice_id: str
    """Deterministic for (anchor, budget, the turns it holds): the same slice twice has the same id."""
    anchor_turn_id: str
    turn_ids: list[str]
    """In conversation order."""
    node_count: int
    tokens: int
    depth: int
    """The anchor's index in its session."""
    turns: list[TurnRecord]
