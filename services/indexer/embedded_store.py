"""The default store: one SQLite file in the data dir, vectors and BM25 scored with numpy in memory.

Chunks are rows keyed by (project, blob id, seq) with their vector (float16 on disk) and their BM25
postings. Searching loads a project's vectors once into a float32 matrix; adding blobs appends to it.
Exact search over a few hundred thousand chunks takes milliseconds, which is the scale one
machine indexes; past that the Weaviate store takes over.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .lexical import bm25_scores, term_frequencies, top_rows
from .store import BlobChunks, ChunkHit, IndexStore, ProjectRecord, ScopeRecord

__all__ = ["EmbeddedStore"]

SCHEMA_VERSION = 4
"""Bumped when the tables change or what the vectors are computed from does (3: the chunks' embedding text
names the symbol in plain words, 4: ``chunking.EMBEDDING_TEXT_VERSION`` 4); an index of another version is
rebuilt (it is derived data)."""

_TABLES = ("projects", "scopes", "scope_files", "blobs", "chunks", "postings")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS projects (project TEXT PRIMARY KEY, root TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS scopes (
    project TEXT NOT NULL, scope TEXT NOT NULL, kind TEXT NOT NULL, root TEXT NOT NULL, state TEXT NOT NULL,
    commit_id TEXT, base TEXT, files INTEGER NOT NULL DEFAULT 0, chunks INTEGER NOT NULL DEFAULT 0,
    indexed_at REAL, error TEXT, PRIMARY KEY (project, scope)
);
CREATE TABLE IF NOT EXISTS scope_files (
    project TEXT NOT NULL, scope TEXT NOT NULL, path TEXT NOT NULL, blob_id TEXT NOT NULL,
    PRIMARY KEY (project, scope, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blobs (project TEXT NOT NULL, blob_id TEXT NOT NULL, chunks INTEGER NOT NULL,
    PRIMARY KEY (project, blob_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY, project TEXT NOT NULL, blob_id TEXT NOT NULL, seq INTEGER NOT NULL,
    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, symbol TEXT NOT NULL, text TEXT NOT NULL,
    length INTEGER NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_blob ON chunks (project, blob_id);
CREATE INDEX IF NOT EXISTS chunks_by_text ON chunks (project, text_hash);
CREATE TABLE IF NOT EXISTS postings (term TEXT NOT NULL, chunk INTEGER NOT NULL, tf INTEGER NOT NULL,
    PRIMARY KEY (term, chunk)) WITHOUT ROWID;
"""


@dataclass
class _Matrix:
    """A project's chunks in memory: ids ascending, the blob of each row, vectors and lengths."""

    ids: np.ndarray
    blob_of_row: np.ndarray
    vectors: np.ndarray
    lengths: np.ndarray
    blob_index: dict[str, int] = field(default_factory=dict)
    centroids: np.ndarray | None = None
    """Each blob's mean chunk vector, L2-normalised (row = blob index); computed on first use."""
    has_chunks: np.ndarray | None = None
    """Whether each blob has a chunk (an empty file has no centroid)."""

    def blob_centroids(self) -> tuple[np.ndarray, np.ndarray]:
        if self.centroids is None or self.has_chunks is None:
            sums = np.zeros((len(self.blob_index), self.vectors.shape[1]), dtype=np.float32)
            if len(self.blob_of_row):
                order = np.argsort(self.blob_of_row, kind="stable")
                of_row = self.blob_of_row[order]
                starts = np.flatnonzero(np.r_[True, of_row[1:] != of_row[:-1]])
                sums[of_row[starts]] = np.add.reduceat(self.vectors[order], starts, axis=0)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            self.has_chunks = norms[:, 0] > 0
            norms[norms == 0] = 1.0
            self.centroids = sums / norms
        return self.centroids, self.has_chunks

    def scope_mask(self, blobs: frozenset[str]) -> np.ndarray:
        wanted = np.zeros(len(self.blob_index) + 1, dtype=bool)
        for blob in blobs:
            index = self.blob_index.get(blob)
            if index is not None:
                wanted[index] = True
        return wanted[self.blob_of_row]


class EmbeddedStore(IndexStore):
    """SQLite + numpy; safe to share between threads, and between processes through SQLite's WAL."""

    def __init__(self, path: str | Path, *, dim: int) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=60, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            # Everything here can be recomputed from the repositories: start over rather than migrate.
            for table in _TABLES:
                self._db.execute(f"DROP TABLE IF EXISTS {table}")
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._db.executescript(_SCHEMA)
        self._lock = threading.RLock()
        self._matrices: dict[str, _Matrix] = {}
        # The last query's postings: a search reads them twice (chunks, then whole files). Keyed by a
        # generation that every write bumps, so they never outlive the chunks they point into.
        self._generation = 0
        self._last_postings: tuple[tuple, list[tuple[np.ndarray, np.ndarray]]] | None = None
        self._pending: dict[str, list[tuple[int, str, np.ndarray, int]]] = {}

    # projects and scopes --------------------------------------------------------------------------

    def save_project(self, record: ProjectRecord) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO projects (project, root) VALUES (?, ?)"
                " ON CONFLICT (project) DO UPDATE SET root = excluded.root",
                (record.project, record.root),
            )

    def get_project(self, project: str) -> ProjectRecord | None:
        with self._lock:
            row = self._db.execute("SELECT project, root FROM projects WHERE project = ?", (project,)).fetchone()
        return ProjectRecord(*row) if row else None

    def list_projects(self) -> list[ProjectRecord]:
        with self._lock:
            return [ProjectRecord(*row) for row in self._db.execute("SELECT project, root FROM projects ORDER BY 1")]

    def save_scope(self, project: str, record: ScopeRecord, files: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    """INSERT INTO scopes (project, scope, kind, root, state, commit_id, base, files, chunks,
                           indexed_at, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                       ON CONFLICT (project, scope) DO UPDATE SET kind = excluded.kind, root = excluded.root,
                           state = excluded.state, commit_id = excluded.commit_id, base = excluded.base,
                           files = excluded.files, chunks = excluded.chunks, indexed_at = excluded.indexed_at,
                           error = excluded.error""",
                    (
                        project,
                        record.scope,
                        record.kind,
                        record.root,
                        record.state,
                        record.commit,
                        record.base,
                        record.files,
                        record.chunks,
                        record.indexed_at,
                        record.error,
                    ),
                )
                if files is not None:
                    self._db.execute("DELETE FROM scope_files WHERE project = ? AND scope = ?", (project, record.scope))
                    self._db.executemany(
                        "INSERT INTO scope_files (project, scope, path, blob_id) VALUES (?, ?, ?, ?)",
                        ((project, record.scope, path, blob) for path, blob in files.items()),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get_scope(self, project: str, scope: str) -> ScopeRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT scope, kind, root, state, commit_id, base, files, chunks, indexed_at, error FROM scopes"
                " WHERE project = ? AND scope = ?",
                (project, scope),
            ).fetchone()
        return ScopeRecord(*row) if row else None

    def list_scopes(self, project: str) -> list[ScopeRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT scope, kind, root, state, commit_id, base, files, chunks, indexed_at, error FROM scopes"
                " WHERE project = ? ORDER BY kind, scope",
                (project,),
            ).fetchall()
        return [ScopeRecord(*row) for row in rows]

    def scope_files(self, project: str, scope: str) -> dict[str, str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT path, blob_id FROM scope_files WHERE project = ? AND scope = ?", (project, scope)
            ).fetchall()
        return dict(rows)

    def delete_scope(self, project: str, scope: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM scope_files WHERE project = ? AND scope = ?", (project, scope))
            self._db.execute("DELETE FROM scopes WHERE project = ? AND scope = ?", (project, scope))

    # blobs and chunks -----------------------------------------------------------------------------

    def known_blobs(self, project: str, blob_ids: Collection[str]) -> dict[str, int]:
        wanted = list(dict.fromkeys(blob_ids))
        found: dict[str, int] = {}
        with self._lock:
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT blob_id, chunks FROM blobs WHERE project = ? AND blob_id IN ({marks})", (project, *part)
                )
                found.update(rows.fetchall())
        return found

    def known_vectors(self, project: str, text_hashes: Collection[str]) -> dict[str, np.ndarray]:
        wanted = list(dict.fromkeys(text_hashes))
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT text_hash, vector FROM chunks WHERE project = ? AND text_hash IN ({marks})",
                    (project, *part),
                )
                for digest, vector in rows:
                    found[digest] = np.frombuffer(vector, dtype=np.float16).astype(np.float32)
        return found

    def add_blobs(self, project: str, blobs: Sequence[BlobChunks]) -> None:
        with self._lock:
            known = self.known_blobs(project, [b.blob_id for b in blobs])
            fresh = [b for b in dict((b.blob_id, b) for b in blobs).values() if b.blob_id not in known]
            if not fresh:
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                new_rows: list[tuple[int, str, np.ndarray, int]] = []
                for blob in fresh:
                    self._db.execute(
                        "INSERT INTO blobs (project, blob_id, chunks) VALUES (?, ?, ?)",
                        (project, blob.blob_id, len(blob.chunks)),
                    )
                    for chunk in blob.chunks:
                        tfs = term_frequencies(f"{chunk.symbol}\n{chunk.text}")
                        length = sum(tfs.values())
                        vector = np.asarray(chunk.vector, dtype=np.float32)
                        cursor = self._db.execute(
                            "INSERT INTO chunks (project, blob_id, seq, start_line, end_line, symbol, text, length,"
                            " text_hash, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (
                                project,
                                blob.blob_id,
                                chunk.seq,
                                chunk.start_line,
                                chunk.end_line,
                                chunk.symbol,
                                chunk.text,
                                length,
                                chunk.text_hash,
                                vector.astype(np.float16).tobytes(),
                            ),
                        )
                        chunk_id = int(cursor.lastrowid or 0)
                        self._db.executemany(
                            "INSERT INTO postings (term, chunk, tf) VALUES (?, ?, ?)",
                            ((term, chunk_id, tf) for term, tf in tfs.items()),
                        )
                        new_rows.append((chunk_id, blob.blob_id, vector, length))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._generation += 1
            if project in self._matrices:
                self._pending.setdefault(project, []).extend(new_rows)

    def prune_blobs(self, project: str) -> int:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                orphans = [
                    row[0]
                    for row in self._db.execute(
                        "SELECT blob_id FROM blobs b WHERE project = ? AND NOT EXISTS (SELECT 1 FROM scope_files f"
                        " WHERE f.project = b.project AND f.blob_id = b.blob_id)",
                        (project,),
                    )
                ]
                for blob in orphans:
                    ids = [
                        r[0]
                        for r in self._db.execute(
                            "SELECT id FROM chunks WHERE project = ? AND blob_id = ?", (project, blob)
                        )
                    ]
                    if ids:
                        marks = ",".join("?" * len(ids))
                        # The postings index is (term, chunk): deleting by chunk needs the terms, so re-tokenize.
                        texts = self._db.execute(f"SELECT id, symbol, text FROM chunks WHERE id IN ({marks})", ids)
                        self._db.executemany(
                            "DELETE FROM postings WHERE term = ? AND chunk = ?",
                            [
                                (term, cid)
                                for cid, symbol, text in texts.fetchall()
                                for term in term_frequencies(f"{symbol}\n{text}")
                            ],
                        )
                        self._db.execute(f"DELETE FROM chunks WHERE id IN ({marks})", ids)
                    self._db.execute("DELETE FROM blobs WHERE project = ? AND blob_id = ?", (project, blob))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if orphans:
                self._generation += 1
                self._matrices.pop(project, None)
                self._pending.pop(project, None)
            return len(orphans)

    # search ---------------------------------------------------------------------------------------

    def dense_search(self, project: str, *, blobs: frozenset[str], vector: np.ndarray, limit: int) -> list[ChunkHit]:
        with self._lock:
            matrix = self._matrix(project)
            if len(matrix.ids) == 0:
                return []
            mask = matrix.scope_mask(blobs)
            scores = matrix.vectors @ np.asarray(vector, dtype=np.float32)
            # Cosine can be negative; shift so that top_rows (positive scores only) sees every row in scope.
            rows = top_rows(scores + 2.0, limit, mask)
            return self._hits(matrix, rows, scores[rows])

    def lexical_search(
        self, project: str, *, blobs: frozenset[str], terms: Sequence[str], limit: int
    ) -> list[ChunkHit]:
        with self._lock:
            matrix = self._matrix(project)
            if len(matrix.ids) == 0 or not terms:
                return []
            mask = matrix.scope_mask(blobs)
            scores = bm25_scores(self._postings(matrix, terms), lengths=matrix.lengths, in_scope=mask)
            rows_ = top_rows(scores, limit, mask)
            return self._hits(matrix, rows_, scores[rows_])

    def file_lexical_search(
        self, project: str, *, blobs: frozenset[str], terms: Sequence[str], limit: int
    ) -> list[ChunkHit]:
        # Exact: a blob is one BM25 document whose term counts and length are its chunks' sums.
        with self._lock:
            matrix = self._matrix(project)
            if len(matrix.ids) == 0 or not terms:
                return []
            mask = matrix.scope_mask(blobs)
            postings = self._postings(matrix, terms)
            n_blobs = len(matrix.blob_index)
            of_row = matrix.blob_of_row
            blob_lengths = np.bincount(of_row[mask], weights=matrix.lengths[mask], minlength=n_blobs)
            blob_postings = []
            for rows, tfs in postings:
                keep = mask[rows]
                counts = np.bincount(of_row[rows[keep]], weights=tfs[keep], minlength=n_blobs)
                present = np.flatnonzero(counts)
                blob_postings.append((present, counts[present]))
            blob_scores = bm25_scores(blob_postings, lengths=blob_lengths, in_scope=blob_lengths > 0)
            top = top_rows(blob_scores, limit)
            if not len(top):
                return []
            # Each top blob's best chunk, in one pass: its rows ordered by (blob's rank, chunk score).
            rank_of = np.full(n_blobs, -1, dtype=np.int64)
            rank_of[top] = np.arange(len(top))
            rows = np.flatnonzero(rank_of[of_row] >= 0)
            chunk_scores = bm25_scores(postings, lengths=matrix.lengths, in_scope=mask)
            rows = rows[np.lexsort((-chunk_scores[rows], rank_of[of_row[rows]]))]
            first = np.ones(len(rows), dtype=bool)
            first[1:] = of_row[rows[1:]] != of_row[rows[:-1]]
            best_rows = rows[first].tolist()
            return self._hits(matrix, best_rows, blob_scores[of_row[best_rows]])

    def file_dense_search(
        self, project: str, *, blobs: frozenset[str], vector: np.ndarray, limit: int
    ) -> list[tuple[str, float]]:
        with self._lock:
            matrix = self._matrix(project)
            if len(matrix.ids) == 0:
                return []
            centroids, has_chunks = matrix.blob_centroids()
            wanted = np.asarray(sorted(i for b in blobs if (i := matrix.blob_index.get(b)) is not None), dtype=np.int64)
            wanted = wanted[has_chunks[wanted]]
            if not len(wanted):
                return []
            scores = centroids[wanted] @ np.asarray(vector, dtype=np.float32)
            # Cosine can be negative; shift so that top_rows (positive scores only) sees every blob.
            order = top_rows(scores + 2.0, limit)
            names = list(matrix.blob_index)
            return [(names[int(wanted[i])], float(scores[i])) for i in order]

    def _postings(self, matrix: _Matrix, terms: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each term's postings as (matrix rows, term frequencies)."""
        key = (id(matrix), len(matrix.ids), self._generation, tuple(dict.fromkeys(terms)))
        if self._last_postings is not None and self._last_postings[0] == key:
            return self._last_postings[1]
        postings = []
        for term in dict.fromkeys(terms):
            rows = self._db.execute("SELECT chunk, tf FROM postings WHERE term = ?", (term,)).fetchall()
            if not rows:
                continue
            data = np.asarray(rows, dtype=np.int64)
            positions = np.searchsorted(matrix.ids, data[:, 0])
            positions = np.minimum(positions, len(matrix.ids) - 1)
            ours = matrix.ids[positions] == data[:, 0]
            postings.append((positions[ours], data[ours, 1]))
        self._last_postings = (key, postings)
        return postings

    def _hits(self, matrix: _Matrix, rows: Sequence[int], scores: np.ndarray) -> list[ChunkHit]:
        if not len(rows):
            return []
        ids = [int(matrix.ids[r]) for r in rows]
        marks = ",".join("?" * len(ids))
        details = {
            row[0]: row[1:]
            for row in self._db.execute(
                f"SELECT id, blob_id, seq, start_line, end_line, symbol, text FROM chunks WHERE id IN ({marks})", ids
            )
        }
        return [
            ChunkHit(*details[chunk_id], score=float(score))  # type: ignore[misc]  # a row: the six fields before score
            for chunk_id, score in zip(ids, scores, strict=True)
            if chunk_id in details
        ]

    def _matrix(self, project: str) -> _Matrix:
        matrix = self._matrices.get(project)
        if matrix is None:
            self._pending.pop(project, None)
            rows = self._db.execute(
                "SELECT id, blob_id, length, vector FROM chunks WHERE project = ? ORDER BY id", (project,)
            ).fetchall()
            matrix = _Matrix(
                ids=np.zeros(0, dtype=np.int64),
                blob_of_row=np.zeros(0, dtype=np.int32),
                vectors=np.zeros((0, self.dim), dtype=np.float32),
                lengths=np.zeros(0, dtype=np.float32),
            )
            blob_names = list(dict.fromkeys(row[1] for row in rows))
            self._append(
                matrix,
                blob_names,
                [(row[0], row[1], np.frombuffer(row[3], dtype=np.float16), row[2]) for row in rows],
            )
            self._matrices[project] = matrix
        pending = self._pending.pop(project, None)
        if pending:
            # Blobs added since the matrix was loaded, appended in one go (not one copy per batch).
            self._append(matrix, [row[1] for row in pending], pending)
        return matrix

    def _append(
        self, matrix: _Matrix, blob_names: Sequence[str], rows: Sequence[tuple[int, str, np.ndarray, int]]
    ) -> None:
        for name in blob_names:
            matrix.blob_index.setdefault(name, len(matrix.blob_index))
        matrix.centroids = matrix.has_chunks = None
        if not rows:
            return
        matrix.ids = np.concatenate([matrix.ids, np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))])
        matrix.blob_of_row = np.concatenate(
            [matrix.blob_of_row, np.fromiter((matrix.blob_index[r[1]] for r in rows), dtype=np.int32, count=len(rows))]
        )
        matrix.vectors = np.concatenate([matrix.vectors, np.stack([np.asarray(r[2], dtype=np.float32) for r in rows])])
        matrix.lengths = np.concatenate(
            [matrix.lengths, np.fromiter((r[3] for r in rows), dtype=np.float32, count=len(rows))]
        )

    def close(self) -> None:
        with self._lock:
            self._matrices.clear()
            self._db.close()
