"""The indexer in-process: index a project or a worktree, report status, search. Blocking; no NATS.

The service runs these methods in worker threads and publishes their progress; the CLI calls them
directly. Chunks are stored once per git blob id, so a scope only embeds blobs no scope had before.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autarch.contracts import subjects
from autarch.contracts.indexer import (
    PROJECT_SCOPE,
    IndexAccepted,
    IndexPhase,
    IndexProgress,
    IndexStatusReply,
    ScopeKind,
    ScopeStatus,
    SearchResult,
    SearchResults,
    SemanticSearch,
)
from autarch.runtime.git_admin import own_git_dir
from autarch.runtime.settings import IndexerSettings
from autarch.runtime.worktree_files import read_regular

from .blas import one_blas_thread
from .chunking import EMBEDDING_TEXT_VERSION, Chunk, chunk_file
from .embeddings import Embedder, load_embedder
from .errors import IndexerError
from .file_ranking import files_in_order, fuse_files
from .fusion import reciprocal_rank_fusion
from .lexical import query_terms, tokenize
from .pattern_weights import parse_pattern_weights, weight_for
from .repository import (
    RepoLocation,
    blob_id,
    iter_commit_files,
    locate_project,
    project_id_for,
    read_blobs,
    resolve_commit,
    scope_id_for,
    worktree_location,
)
from .store import BlobChunks, ChunkHit, IndexStore, ProjectRecord, ScopeRecord, StoredChunk, text_hash
from .walker import (
    DEFAULT_MAX_FILE_BYTES,
    IGNORE_FILES,
    IgnoreRules,
    SourceFile,
    StatCache,
    decode_source,
    skip_reason,
)
from .walker import walk_worktree as walk_files

__all__ = ["EMBED_BATCH", "Indexer", "JobCancelled", "Ranking", "ScopeRef", "open_store"]

log = logging.getLogger("indexer")

EMBED_BATCH = 64
"""Chunks per embedding call: large enough for the model to batch, small enough for steady progress."""
CANDIDATES = 60
"""How many chunks each retriever contributes to fusion (at least; more for large ``maxResults``)."""
FILE_CANDIDATES = 30
"""How many files whole-file BM25 contributes to the file fusion."""
SNIPPET_MAX_LINES = 60
SNIPPET_MAX_CHARS = 4000

Progress = Callable[[IndexProgress], None]


@dataclass
class Ranking:
    """How the retrievers' lists are fused (measured on tests/indexer/eval; see docs/indexer.md)."""

    lexical_weight: float = 1.0
    dense_weight: float = 1.0
    path_weight: float = 0.5
    """Weight of the list ranking candidates by query terms in their file path."""
    rrf_k: int = 10
    """Smaller than the classic 60: the head of each list is where the answer usually is."""
    file_chunk_weight: float = 1.0
    """File fusion (file_ranking.py): weight of the files' order by their best fused chunk,"""
    file_lexical_weight: float = 1.0
    """of BM25 over whole files,"""
    file_dense_weight: float = 1.0
    """of the files' chunk nearest to the query,"""
    file_centroid_weight: float = 0.5
    """and of the files' mean chunk vector nearest to the query (what the whole file is about)."""
    file_rrf_k: int = 20
    test_factor: float = 0.6
    """A test file's score is scaled by this unless the query is about tests."""
    per_file: int = 1
    """At most this many chunks of one file before chunks of other files (0: no limit): an agent
    asking where something lives is served better by ten files than by ten chunks of one."""


@dataclass(frozen=True)
class ScopeRef:
    """A resolved search/index target."""

    project: str
    scope: str
    root: str


class JobCancelled(Exception):
    """An indexing job stopped because its cancel event was set (the service is shutting down)."""


@dataclass
class _Job:
    project: str
    scope: str
    job_id: str
    progress: Progress | None
    cancel: threading.Event | None = None
    files: int = 0
    chunks: int = 0
    embedded: int = 0

    def check(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise JobCancelled(f"job {self.job_id} cancelled")

    def report(self, phase: IndexPhase, done: int = 0, total: int = 0, error: str | None = None) -> None:
        if self.progress is None:
            return
        self.progress(
            IndexProgress(
                project=self.project,
                scope=self.scope,
                job_id=self.job_id,
                phase=phase,
                done=done,
                total=total,
                files=self.files,
                chunks=self.chunks,
                embedded_chunks=self.embedded,
                error=error,
            )
        )


def open_store(settings: IndexerSettings, embedder: Embedder) -> IndexStore:
    """The store the settings name: Weaviate when ``weaviate_url`` is set, else the embedded one."""
    weaviate_url = settings.weaviate_url
    if weaviate_url:
        from .weaviate_store import WeaviateStore

        # Collections per embedder and embedding text: a new way of reading chunks starts new collections
        # rather than mixing its vectors with the old ones (the old collections can be dropped).
        namespace = f"{embedder.id}-text{EMBEDDING_TEXT_VERSION}"
        return WeaviateStore.connect(
            weaviate_url, dim=embedder.dim, namespace=namespace, api_key=settings.weaviate_api_key
        )
    from .embedded_store import EmbeddedStore

    return EmbeddedStore(settings.data_path / "indexer" / embedder.id / "index.sqlite", dim=embedder.dim)


@dataclass
class Indexer:
    """Index projects and worktrees into a store; answer ``semantic_search``."""

    store: IndexStore
    embedder: Embedder
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    ranking: Ranking = field(default_factory=Ranking)
    _stat_caches: dict[str, StatCache] = field(default_factory=dict)
    _locks: defaultdict[tuple[str, str], threading.Lock] = field(default_factory=lambda: defaultdict(threading.Lock))
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        one_blas_thread()  # its searches multiply a matrix of every chunk's vector (blas.py)

    @classmethod
    def from_settings(cls, settings: IndexerSettings) -> Indexer:
        embedder = load_embedder(settings.embedding_backend, url=settings.embedding_url, model=settings.embedding_model,
                                 api_key=settings.embedding_api_key)
        return cls(
            store=open_store(settings, embedder), embedder=embedder, max_file_bytes=settings.index_max_file_bytes
        )

    def close(self) -> None:
        self.store.close()

    # targets --------------------------------------------------------------------------------------

    def project_target(self, path: str) -> ScopeRef:
        """The project scope of the repository containing ``path`` (raises ``not_a_repository``)."""
        root = locate_project(path).root
        return ScopeRef(project=project_id_for(root), scope=PROJECT_SCOPE, root=str(root))

    def worktree_target(self, project: str, worktree: str) -> ScopeRef:
        """The scope of a pulse's worktree (raises ``unknown_project`` / ``not_a_repository`` / ``bad_request``)."""
        location = worktree_location(self._project_location(project), worktree)
        return ScopeRef(project=project, scope=scope_id_for(location.root), root=str(location.root))

    def _project_location(self, project: str) -> RepoLocation:
        record = self.store.get_project(project)
        if record is None:
            raise IndexerError.unknown_project(project)
        return locate_project(record.root)

    def _location(self, ref: ScopeRef) -> RepoLocation:
        """Where ``ref``'s repository is: a worktree's from its project's repository, never from its ``.git`` file
        (docs/security.md)."""
        if ref.scope == PROJECT_SCOPE:
            return locate_project(ref.root)
        return worktree_location(self._project_location(ref.project), ref.root)

    def _root_ref(self, root: str, project: str | None) -> ScopeRef:
        """The scope whose root holds ``root``: a repository's own checkout (its ``.git`` a directory) is its
        project's scope; a worktree is known by the scope :meth:`index_worktree` recorded for it, once it checked
        the worktree against its project's repository. Raises ``not_a_repository``, or ``not_indexed`` for a
        worktree no index was made of."""
        start = Path(root).expanduser()
        if not start.is_absolute() or not start.exists():
            raise IndexerError.not_a_repository(f"{start} does not exist", path=str(start))
        start = start.resolve()
        for candidate in (start, *start.parents):
            if own_git_dir(str(candidate)) is not None and (candidate / ".git" / "HEAD").is_file():
                return ScopeRef(project=project or project_id_for(candidate), scope=PROJECT_SCOPE, root=str(candidate))
            scope = scope_id_for(candidate)
            projects = [project] if project else [p.project for p in self.store.list_projects()]
            for name in projects:
                record = self.store.get_scope(name, scope)
                if record is not None and record.kind == "worktree" and record.root == str(candidate):
                    return ScopeRef(project=name, scope=scope, root=str(candidate))
            if os.path.lexists(candidate / ".git"):
                # A worktree nobody indexed (or a .git an agent made): not a parent directory's repository.
                raise IndexerError.not_indexed(project=project, scope=scope)
        raise IndexerError.not_a_repository(f"{start} is not inside a git repository", path=str(start))

    def search_target(self, *, project: str | None, root: str | None) -> ScopeRef:
        """The scope a search addresses: a worktree or project root, else the project's own scope."""
        if root is None and project is None:
            raise IndexerError.bad_request("semantic_search needs 'root' (a repository or worktree path) or 'project'")
        if root is not None:
            ref = self._root_ref(root, project)
        else:
            assert project is not None
            record = self.store.get_project(project)
            ref = ScopeRef(project=project, scope=PROJECT_SCOPE, root=record.root if record else "")
        scope = self.store.get_scope(ref.project, ref.scope)
        if scope is None or scope.indexed_at is None:
            raise IndexerError.not_indexed(project=ref.project, scope=ref.scope)
        return ref

    # indexing -------------------------------------------------------------------------------------

    def resolve_commit(self, ref: ScopeRef, commit: str) -> str:
        """The full sha of ``commit`` in the project's repository (raises ``unknown_commit``)."""
        return resolve_commit(locate_project(ref.root), commit)

    def mark_interrupted(self) -> int:
        """Mark scopes a previous process left ``indexing`` as failed; returns how many there were."""
        count = 0
        for project in self.store.list_projects():
            for scope in self.store.list_scopes(project.project):
                if scope.state == "indexing":
                    scope.state, scope.error = "failed", "interrupted: the indexer stopped during this job"
                    self.store.save_scope(project.project, scope)
                    count += 1
        return count

    def index_project(
        self,
        path: str,
        *,
        commit: str | None = None,
        progress: Progress | None = None,
        job_id: str | None = None,
        cancel: threading.Event | None = None,
    ) -> IndexAccepted:
        """Index the working tree of the repository at ``path`` (or ``commit``'s tree)."""
        ref = self.project_target(path)
        location = locate_project(ref.root)
        commit_sha = resolve_commit(location, commit) if commit else None
        self.store.save_project(ProjectRecord(project=ref.project, root=ref.root))
        return self._index(
            ref,
            kind="project",
            files=lambda job: (
                self._commit_files(location, commit_sha, job) if commit_sha else self._worktree_files(location, job)
            ),
            commit=commit_sha,
            base=None,
            progress=progress,
            job_id=job_id,
            cancel=cancel,
        )

    def index_worktree(
        self,
        project: str,
        worktree: str,
        *,
        base: str | None = None,
        progress: Progress | None = None,
        job_id: str | None = None,
        cancel: threading.Event | None = None,
    ) -> IndexAccepted:
        """Index a pulse's worktree; blobs the project already has are reused, not re-embedded."""
        ref = self.worktree_target(project, worktree)
        location = self._location(ref)
        return self._index(
            ref,
            kind="worktree",
            files=lambda job: self._worktree_files(location, job),
            commit=None,
            base=base,
            progress=progress,
            job_id=job_id,
            cancel=cancel,
        )

    def refresh_worktree(self, ref: ScopeRef) -> bool:
        """Bring a worktree's index up to date with its files before a search; True when something changed.

        Seed 000: a pulse's searches see its working copy. The walk only stats files that did not change
        since the last one, and only new chunk texts are embedded. Skipped while a job indexes the scope.
        """
        lock = self._lock(ref)
        if not lock.acquire(blocking=False):
            return False
        try:
            location = self._location(ref)
            job = _Job(project=ref.project, scope=ref.scope, job_id="refresh", progress=None)
            files = self._worktree_files(location, job)
            if {f.path: f.blob_id for f in files} == self.store.scope_files(ref.project, ref.scope):
                return False
        finally:
            lock.release()
        self.index_worktree(ref.project, ref.root)
        return True

    def _lock(self, ref: ScopeRef) -> threading.Lock:
        with self._locks_guard:
            return self._locks[(ref.project, ref.scope)]

    def _index(
        self,
        ref: ScopeRef,
        *,
        kind: ScopeKind,
        files: Callable[[_Job], list[SourceFile]],
        commit: str | None,
        base: str | None,
        progress: Progress | None,
        job_id: str | None,
        cancel: threading.Event | None,
    ) -> IndexAccepted:
        job = _Job(
            project=ref.project,
            scope=ref.scope,
            job_id=job_id or uuid.uuid4().hex[:12],
            progress=progress,
            cancel=cancel,
        )
        started = time.perf_counter()
        with self._lock(ref):
            previous = self.store.get_scope(ref.project, ref.scope)
            record = ScopeRecord(
                scope=ref.scope,
                kind=kind,
                root=ref.root,
                state="indexing",
                commit=commit,
                base=base or (previous.base if previous else None),
                files=previous.files if previous else 0,
                chunks=previous.chunks if previous else 0,
                indexed_at=previous.indexed_at if previous else None,
            )
            self.store.save_scope(ref.project, record)
            try:
                manifest = self._build(job, files(job))
            except BaseException as exc:
                record.state, record.error = "failed", f"{type(exc).__name__}: {exc}"
                self.store.save_scope(ref.project, record)
                job.report("failed", error=record.error)
                raise
            record.state, record.error = "ready", None
            record.files, record.chunks, record.indexed_at = job.files, job.chunks, time.time()
            job.report("storing")
            self.store.save_scope(ref.project, record, manifest)
            for scope in self.store.list_scopes(ref.project):
                if scope.kind == "worktree" and not Path(scope.root).exists():
                    # The pulse's worktree was removed: its scope goes, and with it the blobs only it used.
                    self.store.delete_scope(ref.project, scope.scope)
                    self._stat_caches.pop(scope.root, None)
            pruned = self.store.prune_blobs(ref.project)
            if pruned:
                log.info("%s: pruned %d blobs no scope uses", ref.project, pruned)
        seconds = time.perf_counter() - started
        job.report("done", done=job.files, total=job.files)
        return IndexAccepted(
            project=ref.project,
            scope=ref.scope,
            job_id=job.job_id,
            root=ref.root,
            state="ready",
            progress_subject=subjects.indexer_progress(ref.project),
            files=job.files,
            chunks=job.chunks,
            embedded_chunks=job.embedded,
            seconds=round(seconds, 3),
        )

    def _worktree_files(self, location: RepoLocation, job: _Job) -> list[SourceFile]:
        job.report("scanning")
        result = walk_files(
            location,
            max_file_bytes=self.max_file_bytes,
            on_file=lambda n: job.report("scanning", done=n) if n % 500 == 0 else None,
            stat_cache=self._stat_caches.setdefault(str(location.root), {}),
        )
        if result.skipped:
            log.info("%s: skipped %s", job.project, dict(result.skipped))
        return result.files

    def _commit_files(self, location: RepoLocation, commit: str, job: _Job) -> list[SourceFile]:
        job.report("scanning")
        entries = list(iter_commit_files(location, commit))
        # Ignore files committed in the tree apply to it as they would to a checkout.
        rules = IgnoreRules()
        ignore_blobs = {path: blob for path, blob in entries if path.rsplit("/", 1)[-1] in IGNORE_FILES}
        texts = dict(read_blobs(location, list(set(ignore_blobs.values()))))
        by_dir: defaultdict[str, dict[str, str]] = defaultdict(dict)
        for path, blob in ignore_blobs.items():
            directory, _, name = path.rpartition("/")
            by_dir[directory][name] = texts[blob].decode("utf-8", "replace")
        for directory in sorted(by_dir, key=lambda d: d.count("/")):
            rules.add_directory(directory, by_dir[directory])
        kept = []
        for path, blob in entries:
            parts = path.split("/")
            if any(rules.is_ignored("/".join(parts[:i]), is_dir=True) for i in range(1, len(parts))):
                continue
            if not rules.is_ignored(path):
                kept.append(SourceFile(path=path, blob_id=blob))
        known = self.store.known_blobs(job.project, [f.blob_id for f in kept])
        missing = list({f.blob_id for f in kept if f.blob_id not in known})
        contents = dict(read_blobs(location, missing))
        return [
            SourceFile(path=f.path, blob_id=f.blob_id, content=contents.get(f.blob_id))
            for f in kept
            if f.blob_id in known or skip_reason(contents[f.blob_id], max_file_bytes=self.max_file_bytes) is None
        ]

    def _build(self, job: _Job, files: list[SourceFile]) -> dict[str, str]:
        """Chunk and embed the blobs this project does not have yet; return the scope's manifest."""
        manifest = {f.path: f.blob_id for f in files}
        known = self.store.known_blobs(job.project, set(manifest.values()))
        todo: dict[str, SourceFile] = {}
        for f in files:
            if f.blob_id not in known and f.blob_id not in todo and (f.content is not None or f.disk_path):
                todo[f.blob_id] = f
        job.report("chunking", done=0, total=len(todo))
        pending: list[tuple[str, list[Chunk]]] = []
        for n, f in enumerate(todo.values(), start=1):
            job.check()
            content = f.content if f.content is not None else _read(f.disk_path, self.max_file_bytes)
            if content is None or blob_id(content) != f.blob_id:
                # Changed (or gone) since the walk: leave it out; the next index picks it up.
                manifest = {path: blob for path, blob in manifest.items() if blob != f.blob_id}
                continue
            pending.append((f.blob_id, chunk_file(f.path, decode_source(content))))
            if n % 200 == 0:
                job.report("chunking", done=n, total=len(todo))
        total_new = sum(len(chunks) for _, chunks in pending)
        job.report("embedding", done=0, total=total_new)
        processed = 0
        for group in _batches(pending, EMBED_BATCH):
            job.check()
            flat = [(chunk, text_hash(chunk.symbol, chunk.text)) for _, chunks in group for chunk in chunks]
            # A changed file mostly holds chunks whose text some stored blob already has: reuse their vectors.
            vectors = self.store.known_vectors(job.project, {digest for _, digest in flat})
            missing = {digest: chunk.embedding_text for chunk, digest in flat if digest not in vectors}
            if missing:
                embedded = self.embedder.embed(list(missing.values()), kind="document")
                vectors.update(zip(missing, embedded, strict=True))
                job.embedded += len(missing)
            stored = [
                BlobChunks(
                    blob_id=blob,
                    chunks=[
                        StoredChunk(
                            seq=seq,
                            start_line=chunk.start_line,
                            end_line=chunk.end_line,
                            symbol=chunk.symbol,
                            text=chunk.text,
                            vector=vectors[text_hash(chunk.symbol, chunk.text)],
                        )
                        for seq, chunk in enumerate(chunks)
                    ],
                )
                for blob, chunks in group
            ]
            self.store.add_blobs(job.project, stored)
            processed += len(flat)
            job.report("embedding", done=processed, total=total_new)
        counts = self.store.known_blobs(job.project, set(manifest.values()))
        job.files = len(manifest)
        job.chunks = sum(counts.get(blob, 0) for blob in manifest.values())
        return manifest

    # status and search ----------------------------------------------------------------------------

    def status(self, *, project: str | None = None, root: str | None = None) -> IndexStatusReply:
        wanted = None
        if root is not None:
            ref = self._root_ref(root, project)
            project, wanted = ref.project, ref.scope
        if project is None:
            raise IndexerError.bad_request("index_status needs 'project' or 'root'")
        record = self.store.get_project(project)
        if record is None:
            raise IndexerError.unknown_project(project)
        scopes = [s for s in self.store.list_scopes(project) if wanted is None or s.scope == wanted]
        return IndexStatusReply(
            project=project,
            root=record.root,
            embedder=self.embedder.id,
            scopes=[
                ScopeStatus(
                    scope=s.scope,
                    kind=s.kind,
                    root=s.root,
                    state=s.state,
                    commit=s.commit,
                    base=s.base,
                    files=s.files,
                    chunks=s.chunks,
                    indexed_at=s.indexed_at,
                    error=s.error,
                )
                for s in scopes
            ],
        )

    def search(self, request: SemanticSearch, *, mode: str = "hybrid") -> SearchResults:
        """Seed 004's ``semantic_search``; ``mode`` ``lexical`` or ``dense`` is for evaluation."""
        query = request.query.strip()
        if not query:
            raise IndexerError.invalid_query("query must not be empty")
        weights = parse_pattern_weights(request.pattern_weights)
        ref = self.search_target(project=request.project, root=request.root)
        if ref.scope != PROJECT_SCOPE:
            self.refresh_worktree(ref)
        files = self.store.scope_files(ref.project, ref.scope)
        paths_of: defaultdict[str, list[str]] = defaultdict(list)
        for path, blob in sorted(files.items()):
            if weight_for(path, weights) > 0:  # weight 0 excludes before retrieval, so it costs no result slots
                paths_of[blob].append(path)
        blobs = frozenset(paths_of)
        limit = max(CANDIDATES, request.max_results * 4)
        rankings: list[list[tuple[str, int]]] = []
        fusion_weights: list[float] = []
        hits: dict[tuple[str, int], ChunkHit] = {}
        dense: list[ChunkHit] = []
        vector = None
        if mode in ("hybrid", "lexical"):
            lexical = self.store.lexical_search(ref.project, blobs=blobs, terms=query_terms(query), limit=limit)
            rankings.append(_keys(lexical, hits))
            fusion_weights.append(self.ranking.lexical_weight)
        if mode in ("hybrid", "dense"):
            vector = self.embedder.embed([query], kind="query")[0]
            dense = self.store.dense_search(ref.project, blobs=blobs, vector=vector, limit=limit)
            rankings.append(_keys(dense, hits))
            fusion_weights.append(self.ranking.dense_weight)
        if mode == "hybrid" and hits and self.ranking.path_weight:
            rankings.append(_path_ranking(query, hits, paths_of))
            fusion_weights.append(self.ranking.path_weight)
        fused = reciprocal_rank_fusion(rankings, weights=fusion_weights, k=self.ranking.rrf_k)
        if mode == "hybrid" and fused:
            scored = self._rank_files(
                query, fused, hits, dense, paths_of, project=ref.project, blobs=blobs, vector=vector
            )
        else:
            scored = [(hits[key], path, score) for key, score in fused for path in paths_of.get(key[0], ())]
        results: list[SearchResult] = []
        for hit, path, score in scored:
            factor = weight_for(path, weights)
            results.append(
                SearchResult(
                    file_path=path,
                    start_line=hit.start_line,
                    end_line=hit.end_line,
                    snippet=_snippet(hit.text),
                    score=round(score, 4),
                    adjusted_score=round(score * factor, 4),
                )
            )
        results.sort(key=lambda r: (-r.adjusted_score, -r.score, r.file_path, r.start_line))
        if self.ranking.per_file:
            results = _diversify(results, self.ranking.per_file)
        return SearchResults(results=results[: request.max_results], project=ref.project, scope=ref.scope)


    def _rank_files(
        self,
        query: str,
        fused: list[tuple[tuple[str, int], float]],
        hits: dict[tuple[str, int], ChunkHit],
        dense: Sequence[ChunkHit],
        paths_of: dict[str, list[str]],
        *,
        project: str,
        blobs: frozenset[str],
        vector: np.ndarray | None,
    ) -> list[tuple[ChunkHit, str, float]]:
        """``(chunk, path, score)`` for the fused chunks (and the best chunk of files only whole-file BM25
        found): a file's best chunk scores the file's fused score, its other chunks that scaled by how
        far below its best they fused (see file_ranking.py)."""
        terms = query_terms(query)
        whole_files = self.store.file_lexical_search(project, blobs=blobs, terms=terms, limit=FILE_CANDIDATES)
        ranking = self.ranking
        centroids = (
            self.store.file_dense_search(project, blobs=blobs, vector=vector, limit=FILE_CANDIDATES)
            if vector is not None and ranking.file_centroid_weight
            else []
        )
        file_score = fuse_files(
            [
                files_in_order((key[0] for key, _ in fused), paths_of),
                files_in_order((hit.blob_id for hit in whole_files), paths_of),
                files_in_order((hit.blob_id for hit in dense), paths_of),
                files_in_order((blob for blob, _ in centroids), paths_of),
            ],
            weights=[
                ranking.file_chunk_weight,
                ranking.file_lexical_weight,
                ranking.file_dense_weight,
                ranking.file_centroid_weight,
            ],
            k=ranking.file_rrf_k,
            test_factor=ranking.test_factor,
            asks_about_tests="test" in terms,
        )
        best: dict[str, float] = {}
        scored = []
        for key, score in fused:
            for path in paths_of.get(key[0], ()):
                top = best.setdefault(path, score)
                scored.append((hits[key], path, file_score[path] * score / top))
        for hit in whole_files:
            for path in paths_of.get(hit.blob_id, ()):
                if path not in best:
                    best[path] = hit.score
                    scored.append((hit, path, file_score[path]))
        return scored


def _keys(hits: Sequence[ChunkHit], into: dict[tuple[str, int], ChunkHit]) -> list[tuple[str, int]]:
    keys = []
    for hit in hits:
        key = (hit.blob_id, hit.seq)
        into.setdefault(key, hit)
        keys.append(key)
    return keys


def _path_ranking(
    query: str, hits: dict[tuple[str, int], ChunkHit], paths_of: dict[str, list[str]]
) -> list[tuple[str, int]]:
    """Candidates ranked by how many query terms their file's path contains (file names carry topic)."""
    terms = set(tokenize(query))
    scored = []
    for key, hit in hits.items():
        best = 0
        for path in paths_of.get(hit.blob_id, ()):
            best = max(best, len(terms & set(tokenize(path.replace("/", " ").replace(".", " ")))))
        if best:
            scored.append((best, key))
    scored.sort(key=lambda pair: -pair[0])
    return [key for _, key in scored]


def _read(path: str | None, max_bytes: int) -> bytes | None:
    # The file was regular when walked; an agent may have put a FIFO, a link or a huge file there since.
    try:
        return read_regular(path, max_bytes=max_bytes) if path else None
    except OSError:
        return None


def _diversify(results: list[SearchResult], per_file: int) -> list[SearchResult]:
    """Keep the order, but move a file's chunks beyond the first ``per_file`` after everything else."""
    seen: defaultdict[str, int] = defaultdict(int)
    head: list[SearchResult] = []
    tail: list[SearchResult] = []
    for result in results:
        seen[result.file_path] += 1
        (head if seen[result.file_path] <= per_file else tail).append(result)
    return head + tail


def _snippet(text: str) -> str:
    lines = text.splitlines()
    if len(lines) > SNIPPET_MAX_LINES:
        lines = [*lines[:SNIPPET_MAX_LINES], "..."]
    snippet = "\n".join(lines)
    return snippet if len(snippet) <= SNIPPET_MAX_CHARS else snippet[:SNIPPET_MAX_CHARS] + "..."


def _batches(items: list[tuple[str, list[Chunk]]], size: int) -> Iterator[list[tuple[str, list[Chunk]]]]:
    """Groups of whole blobs holding about ``size`` chunks each (a blob's chunks are stored together)."""
    group: list[tuple[str, list[Chunk]]] = []
    count = 0
    for item in items:
        group.append(item)
        count += len(item[1])
        if count >= size:
            yield group
            group, count = [], 0
    if group:
        yield group
