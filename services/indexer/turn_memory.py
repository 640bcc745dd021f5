"""Turn memory: the project's recorded agent turns, searchable, for the anchors of loop iterations (seed 001).

Turns are kept in SQLite beside the index (``<data dir>/indexer/<embedder id>/turns.sqlite``) with their
embedding, and held in memory per project for the queries: a lookup by id (chained and explicit anchors), the
latest turn (temporal), a hybrid search (semantic: the embedder's vectors and the index's BM25, fused by
reciprocal rank, as code search does), and the slice of conversation around an anchor within a token budget.
"""

from __future__ import annotations

import bisect
import hashlib
import sqlite3
import threading
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from autarch.contracts.turns import SliceView, TurnHit, TurnRecord

from .blas import one_blas_thread
from .embeddings import Embedder
from .fusion import reciprocal_rank_fusion
from .lexical import bm25_scores, query_terms, term_frequencies, top_rows

__all__ = ["TurnMemory"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY,
    project_path TEXT NOT NULL,
    record BLOB NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_by_project ON turns(project_path);
"""
_EMBED_CHARS = 2000
"""Characters of a turn that are embedded (its start carries what it is about)."""
_CANDIDATES = 50
"""Hits taken from each ranking before fusion."""
_FUSION_WEIGHTS = (1.0, 0.5)
"""Dense, then lexical. Turns are prose and a loop's goal paraphrases them: meaning leads, and BM25 lifts a turn
that also shares the goal's rarer words (names, identifiers) without letting one shared common word win."""
_QUERY_CACHE = 256

_encode = msgspec.json.Encoder().encode
_decode_record = msgspec.json.Decoder(TurnRecord).decode


def _text_of(turn: TurnRecord) -> str:
    return f"{turn.user_text}\n{turn.text}"


class _Rows:
    """A float32 matrix that grows by doubling: adding a row costs the same at 30,000 rows as at 30."""

    def __init__(self, width: int) -> None:
        self._data = np.zeros((16, width), dtype=np.float32)
        self.size = 0

    def extend(self, rows: np.ndarray) -> None:
        needed = self.size + len(rows)
        if needed > len(self._data):
            grown = np.zeros((max(needed, 2 * len(self._data)), self._data.shape[1]), dtype=np.float32)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : needed] = rows
        self.size = needed

    def view(self) -> np.ndarray:
        # Rows past ``size`` are only ever written by a later extend, so the view stays what it was when taken.
        return self._data[: self.size]


@dataclass
class _Project:
    """One project's turns in memory: records, a vector matrix and BM25 postings over the same rows.

    Everything a turn adds is appended in place (no structure is copied or rebuilt per turn), and a query copies
    only the postings of its own terms: a loop's thousandth iteration records and asks as fast as its first.
    """

    dim: int
    turns: list[TurnRecord] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    _vectors: _Rows = field(init=False)
    _lengths: array = field(default_factory=lambda: array("f"))
    postings: dict[str, tuple[array, array]] = field(default_factory=dict)
    """Term → (rows, term frequencies), 4 bytes an entry (a list held an int object per entry)."""
    sessions: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    """Session → (its turns' indexes, ascending; their rows, in the same order)."""
    latest: TurnRecord | None = None
    """The turn with the greatest (occurred_at, index): kept as turns come, so asking costs nothing."""

    def __post_init__(self) -> None:
        self._vectors = _Rows(self.dim)

    @property
    def vectors(self) -> np.ndarray:
        return self._vectors.view()

    def add(self, turn: TurnRecord, vector: np.ndarray) -> None:
        self.add_many([turn], vector[None, :])

    def _note_latest(self, turn: TurnRecord) -> None:
        if self.latest is None or (turn.occurred_at, turn.index) > (self.latest.occurred_at, self.latest.index):
            self.latest = turn

    def add_many(self, turns: list[TurnRecord], vectors: np.ndarray) -> None:
        start = len(self.turns)
        self._vectors.extend(vectors.astype(np.float32, copy=False))
        for offset, turn in enumerate(turns):
            row = start + offset
            self.turns.append(turn)
            self.rows[turn.turn_id] = row
            terms: Counter[str] = term_frequencies(_text_of(turn))
            self._lengths.append(sum(terms.values()))
            for term, tf in terms.items():
                posting = self.postings.get(term)
                if posting is None:
                    posting = self.postings[term] = (array("i"), array("i"))
                posting[0].append(row)
                posting[1].append(tf)
            indexes, rows = self.sessions.setdefault(turn.session_id, ([], []))
            # A session's turns come in order: appended at the end, bisected only when one comes late.
            at = len(indexes) if not indexes or indexes[-1] <= turn.index else bisect.bisect_right(indexes, turn.index)
            indexes.insert(at, turn.index)
            rows.insert(at, row)
            self._note_latest(turn)

    def lengths_array(self) -> np.ndarray:
        return np.frombuffer(self._lengths, dtype=np.float32).copy()

    def term_postings(self, terms: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Copies of the postings of ``terms`` (a copy: the arrays keep growing once the lock is let go)."""
        found = []
        for term in terms:
            posting = self.postings.get(term)
            if posting is not None:
                found.append((np.frombuffer(posting[0], dtype=np.int32).copy(),
                              np.frombuffer(posting[1], dtype=np.int32).copy()))
        return found


class TurnMemory:
    """Every recorded turn, per project; thread-safe (the service calls it from worker threads)."""

    def __init__(self, path: Path, embedder: Embedder) -> None:
        one_blas_thread()  # a search multiplies the matrix of every turn's vector (blas.py)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._projects: dict[str, _Project] = {}
        self._project_of: dict[str, str] = {}
        self._queries: dict[str, np.ndarray] = {}
        """Recent query embeddings, oldest first (a loop's goal is asked for again and again)."""
        self._load()

    def _load(self) -> None:
        by_project: dict[str, tuple[list[TurnRecord], list[np.ndarray]]] = {}
        for project, record, vector in self._db.execute(
                "SELECT project_path, record, vector FROM turns ORDER BY rowid"):
            turns, vectors = by_project.setdefault(project, ([], []))
            turns.append(_decode_record(record))
            vectors.append(np.frombuffer(vector, dtype=np.float32))
        for project, (turns, vectors) in by_project.items():
            memory = self._project(project)
            memory.add_many(turns, np.vstack(vectors))
            for turn in turns:
                self._project_of[turn.turn_id] = project

    def _project(self, project_path: str) -> _Project:
        memory = self._projects.get(project_path)
        if memory is None:
            memory = self._projects[project_path] = _Project(dim=self.embedder.dim)
        return memory

    def close(self) -> None:
        self._db.close()

    # --- commands ----------------------------------------------------------------------------------

    def record(self, turns: list[TurnRecord]) -> tuple[int, int]:
        """Remember the turns not yet known; (how many were new, how many the batch's projects now hold)."""
        with self._lock:
            fresh = [t for t in dict((t.turn_id, t) for t in turns).values() if t.turn_id not in self._project_of]
        if fresh:
            vectors = self.embedder.embed([_text_of(t)[:_EMBED_CHARS] for t in fresh], kind="document")
            vectors = np.asarray(vectors, dtype=np.float32)
            with self._lock:
                keep = [(t, v) for t, v in zip(fresh, vectors, strict=True) if t.turn_id not in self._project_of]
                self._db.execute("BEGIN")
                try:
                    self._db.executemany(
                        "INSERT OR IGNORE INTO turns (turn_id, project_path, record, vector) VALUES (?, ?, ?, ?)",
                        [(t.turn_id, t.project_path, _encode(t), v.tobytes()) for t, v in keep])
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                for turn, vector in keep:
                    self._project(turn.project_path).add(turn, vector)
                    self._project_of[turn.turn_id] = turn.project_path
                fresh = [t for t, _ in keep]
        with self._lock:
            total = sum(len(self._project(p).turns) for p in {t.project_path for t in turns})
        return len(fresh), total

    # --- queries -----------------------------------------------------------------------------------

    def find(self, turn_id: str, project_path: str | None = None) -> TurnRecord | None:
        with self._lock:
            project = self._project_of.get(turn_id)
            if project is None or (project_path is not None and project != project_path):
                return None
            memory = self._projects[project]
            return memory.turns[memory.rows[turn_id]]

    def latest(self, project_path: str) -> TurnRecord | None:
        with self._lock:
            memory = self._projects.get(project_path)
            return None if memory is None else memory.latest

    def search(self, project_path: str, query: str, limit: int) -> list[TurnHit]:
        with self._lock:
            memory = self._projects.get(project_path)
            if memory is None or not memory.turns:
                return []
            vectors = memory.vectors
            lengths = memory.lengths_array()
            terms = memory.term_postings(query_terms(query))
            turns = memory.turns
        query_vector = self._query_vector(query)
        dense_scores = vectors @ query_vector
        # Only turns that are like the query at all (cosine > 0) are dense candidates: in a small memory the
        # whole project would otherwise be "ranked", and an unrelated turn's last place still adds to its fusion.
        dense_ranked = top_rows(dense_scores, _CANDIDATES)
        lexical = bm25_scores(terms, lengths=lengths, in_scope=np.ones(len(lengths), dtype=bool))
        lexical_ranked = top_rows(lexical, _CANDIDATES)
        fused = reciprocal_rank_fusion([dense_ranked, lexical_ranked], weights=_FUSION_WEIGHTS)[:limit]
        # Ranked by the fusion; the score is the cosine similarity to the query (clamped to 0..1), which means
        # the same thing from one query to the next: the anchor resolver compares it with a threshold.
        return [TurnHit(turn_id=turns[row].turn_id, session_id=turns[row].session_id,
                        score=round(float(min(1.0, max(0.0, dense_scores[row]))), 4), index=turns[row].index,
                        excerpt=_excerpt(turns[row].text)) for row, _ in fused]

    def _query_vector(self, query: str) -> np.ndarray:
        # A loop asks with its goal before every iteration: the same query, embedded once.
        with self._lock:
            cached = self._queries.get(query)
        if cached is None:
            cached = np.asarray(self.embedder.embed([query], kind="query")[0], dtype=np.float32)
            with self._lock:
                self._queries[query] = cached
                while len(self._queries) > _QUERY_CACHE:
                    self._queries.pop(next(iter(self._queries)))
        return cached

    def slice(self, turn_id: str, token_budget: int) -> SliceView | None:
        """The anchor and its neighbours in its session, nearest first (before, then after), within the budget."""
        with self._lock:
            project = self._project_of.get(turn_id)
            if project is None:
                return None
            memory = self._projects[project]
            turns = memory.turns
            anchor = turns[memory.rows[turn_id]]
            indexes, rows = memory.sessions[anchor.session_id]
            position = bisect.bisect_left(indexes, anchor.index)
            while turns[rows[position]].turn_id != turn_id:  # turns of one index: few, if any
                position += 1
            spent = anchor.tokens
            # Grow outwards one turn at a time, before then after; a side stops at the first turn that does not
            # fit, so the slice stays one contiguous stretch of the conversation. Only the turns looked at are
            # read: the slice costs the same in a session of 30,000 turns as in one of 30.
            first = last = position
            before_open, after_open = True, True
            while before_open or after_open:
                if before_open:
                    if first > 0 and spent + turns[rows[first - 1]].tokens <= token_budget:
                        first -= 1
                        spent += turns[rows[first]].tokens
                    else:
                        before_open = False
                if after_open:
                    if last + 1 < len(rows) and spent + turns[rows[last + 1]].tokens <= token_budget:
                        last += 1
                        spent += turns[rows[last]].tokens
                    else:
                        after_open = False
            picked = [turns[rows[i]] for i in range(first, last + 1)]
        ids = [t.turn_id for t in picked]
        digest = hashlib.sha256(f"{turn_id}|{token_budget}|{','.join(ids)}".encode()).hexdigest()[:24]
        return SliceView(slice_id=f"slice-{digest}", anchor_turn_id=turn_id, turn_ids=ids, node_count=len(picked),
                         tokens=sum(t.tokens for t in picked), depth=anchor.index, turns=picked)


def _excerpt(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"

