"""The storage interface of the index, and the records that cross it.

A store holds, per project: the chunks of every blob ever indexed (with their vectors), keyed by
git blob id; the scopes (the project's own index, one per worktree) each with its file manifest
(path -> blob id); and answers dense and lexical searches restricted to a set of blobs (a scope's).
Two implementations pass the same contract tests: :class:`~.embedded_store.EmbeddedStore`
(SQLite + numpy, the default) and :class:`~.weaviate_store.WeaviateStore` (scale-out).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from autarch.contracts.indexer import ScopeKind, ScopeState

__all__ = ["BlobChunks", "ChunkHit", "IndexStore", "ProjectRecord", "ScopeRecord", "StoredChunk", "text_hash"]


@dataclass(frozen=True)
class ProjectRecord:
    project: str
    root: str


@dataclass
class ScopeRecord:
    scope: str
    kind: ScopeKind
    """``project`` or ``worktree``."""
    root: str
    state: ScopeState = "indexing"
    """``indexing``, ``ready`` or ``failed``; a scope with ``indexed_at`` set is searchable in every state."""
    commit: str | None = None
    base: str | None = None
    files: int = 0
    chunks: int = 0
    indexed_at: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class StoredChunk:
    seq: int
    start_line: int
    end_line: int
    symbol: str
    text: str
    vector: np.ndarray

    @property
    def text_hash(self) -> str:
        """Names the text the vector was computed from: equal texts in other blobs reuse the vector."""
        return text_hash(self.symbol, self.text)


def text_hash(symbol: str, text: str) -> str:
    return hashlib.blake2b(f"{symbol}\n{text}".encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class BlobChunks:
    """Everything stored for one blob (zero chunks for an empty file: the blob is still known)."""

    blob_id: str
    chunks: Sequence[StoredChunk] = field(default_factory=tuple)


@dataclass(frozen=True)
class ChunkHit:
    blob_id: str
    seq: int
    start_line: int
    end_line: int
    symbol: str
    text: str
    score: float


class IndexStore(ABC):
    """Where chunks, vectors and scope manifests live. Methods are blocking (call them from a thread)."""

    #: Vector dimension this store was opened for.
    dim: int

    @abstractmethod
    def save_project(self, record: ProjectRecord) -> None: ...

    @abstractmethod
    def get_project(self, project: str) -> ProjectRecord | None: ...

    @abstractmethod
    def list_projects(self) -> list[ProjectRecord]: ...

    @abstractmethod
    def known_blobs(self, project: str, blob_ids: Collection[str]) -> dict[str, int]:
        """The blobs of ``blob_ids`` already stored for ``project``, with their number of chunks."""

    @abstractmethod
    def known_vectors(self, project: str, text_hashes: Collection[str]) -> dict[str, np.ndarray]:
        """Vectors already stored for chunks with these text hashes (a changed file re-embeds only new text)."""

    @abstractmethod
    def add_blobs(self, project: str, blobs: Sequence[BlobChunks]) -> None:
        """Store chunks and vectors of new blobs (a blob already stored is left as it is)."""

    @abstractmethod
    def save_scope(self, project: str, record: ScopeRecord, files: Mapping[str, str] | None = None) -> None:
        """Create or update a scope; with ``files`` its manifest (path -> blob id) is replaced atomically."""

    @abstractmethod
    def get_scope(self, project: str, scope: str) -> ScopeRecord | None: ...

    @abstractmethod
    def list_scopes(self, project: str) -> list[ScopeRecord]: ...

    @abstractmethod
    def scope_files(self, project: str, scope: str) -> dict[str, str]:
        """The scope's manifest: path -> blob id."""

    @abstractmethod
    def delete_scope(self, project: str, scope: str) -> None: ...

    @abstractmethod
    def prune_blobs(self, project: str) -> int:
        """Delete the chunks of blobs no scope refers to any more; returns how many blobs went."""

    @abstractmethod
    def dense_search(self, project: str, *, blobs: frozenset[str], vector: np.ndarray, limit: int) -> list[ChunkHit]:
        """Chunks of ``blobs`` nearest to ``vector`` (cosine similarity as score), best first."""

    @abstractmethod
    def lexical_search(
        self, project: str, *, blobs: frozenset[str], terms: Sequence[str], limit: int
    ) -> list[ChunkHit]:
        """Chunks of ``blobs`` ranked by BM25 over the index terms of :func:`~.lexical.tokenize`, best first."""

    def file_lexical_search(
        self, project: str, *, blobs: frozenset[str], terms: Sequence[str], limit: int
    ) -> list[ChunkHit]:
        """Blobs of ``blobs`` ranked by BM25 over their whole text, best first: one hit per blob, its
        best-matching chunk, with the blob's score.

        A file answers a question its chunks answer only together (the cookie parser in one function,
        the cookie class in another). This default approximates the file's score by the sum of its
        chunks' scores in a deep chunk search; a store that can aggregate term counts per blob does
        it exactly.
        """
        hits = self.lexical_search(project, blobs=blobs, terms=terms, limit=limit * 10)
        best: dict[str, ChunkHit] = {}
        totals: dict[str, float] = {}
        for hit in hits:
            best.setdefault(hit.blob_id, hit)
            totals[hit.blob_id] = totals.get(hit.blob_id, 0.0) + hit.score
        ranked = sorted(totals, key=lambda blob: -totals[blob])[:limit]
        return [replace(best[blob], score=totals[blob]) for blob in ranked]

    def file_dense_search(
        self, project: str, *, blobs: frozenset[str], vector: np.ndarray, limit: int
    ) -> list[tuple[str, float]]:
        """Blobs of ``blobs`` ranked by the cosine similarity of ``vector`` to the mean of their chunks'
        vectors (the file's centroid), best first, as ``(blob id, similarity)``.

        Beside a file's nearest chunk this is what the file as a whole is about: a small file on one
        topic sits near its topic; a large file touching many topics sits near none of them. A store
        that cannot average a blob's vectors cheaply returns nothing (the view is then left out).
        """
        return []

    @abstractmethod
    def close(self) -> None:
        """Release connections and caches."""
