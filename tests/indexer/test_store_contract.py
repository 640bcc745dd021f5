"""One contract for every store: the embedded one always, Weaviate's when ``WEAVIATE_URL`` is set."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from autarch.services.indexer.embedded_store import EmbeddedStore
from autarch.services.indexer.lexical import query_terms
from autarch.services.indexer.store import BlobChunks, IndexStore, ProjectRecord, ScopeRecord, StoredChunk

DIM = 8
WEAVIATE_URL = os.environ.get("WEAVIATE_URL")


def _vector(*hot: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[list(hot)] = 1.0
    return v / np.linalg.norm(v)


def _blob(blob_id: str, *texts: tuple[str, int]) -> BlobChunks:
    return BlobChunks(
        blob_id=blob_id,
        chunks=[
            StoredChunk(
                seq=i, start_line=1 + 10 * i, end_line=9 + 10 * i, symbol=f"def f{i}", text=text, vector=_vector(hot)
            )
            for i, (text, hot) in enumerate(texts)
        ],
    )


@pytest.fixture(params=["embedded", "weaviate"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IndexStore]:
    if request.param == "embedded":
        instance: IndexStore = EmbeddedStore(tmp_path / "index.sqlite", dim=DIM)
        yield instance
        instance.close()
        return
    if not WEAVIATE_URL:
        pytest.skip("Weaviate contract tests skipped: set WEAVIATE_URL (e.g. http://127.0.0.1:8080) to run them")
    from autarch.services.indexer.weaviate_store import WeaviateStore

    instance = WeaviateStore.connect(WEAVIATE_URL, dim=DIM, namespace=f"test-{uuid.uuid4().hex[:8]}")
    yield instance
    instance.delete_namespace()
    instance.close()


def test_projects_and_scopes_round_trip(store: IndexStore) -> None:
    store.save_project(ProjectRecord(project="p1", root="/repo"))
    assert store.get_project("p1") == ProjectRecord(project="p1", root="/repo")
    assert store.get_project("nope") is None
    assert [p.project for p in store.list_projects()] == ["p1"]
    record = ScopeRecord(scope="project", kind="project", root="/repo", state="indexing")
    store.save_scope("p1", record)
    assert store.get_scope("p1", "project") == record and store.scope_files("p1", "project") == {}
    record.state, record.indexed_at, record.files = "ready", 123.0, 2
    store.save_scope("p1", record, {"a.py": "b1", "b.py": "b2"})
    assert store.get_scope("p1", "project") == record
    assert store.scope_files("p1", "project") == {"a.py": "b1", "b.py": "b2"}
    record.state = "indexing"
    store.save_scope("p1", record)  # without files the manifest stays
    assert store.scope_files("p1", "project") == {"a.py": "b1", "b.py": "b2"}
    store.save_scope("p1", ScopeRecord(scope="wt-1", kind="worktree", root="/wt"), {"a.py": "b3"})
    assert [s.scope for s in store.list_scopes("p1")] == ["project", "wt-1"]
    store.delete_scope("p1", "wt-1")
    assert store.get_scope("p1", "wt-1") is None and store.scope_files("p1", "wt-1") == {}


def test_blobs_are_stored_once_and_known_with_their_chunk_counts(store: IndexStore) -> None:
    store.add_blobs("p1", [_blob("b1", ("alpha parser", 0), ("beta writer", 1)), _blob("empty")])
    store.add_blobs("p1", [_blob("b1", ("changed text is ignored", 2))])
    assert store.known_blobs("p1", ["b1", "empty", "b9"]) == {"b1": 2, "empty": 0}
    assert store.known_blobs("p2", ["b1"]) == {}
    hits = store.lexical_search("p1", blobs=frozenset({"b1"}), terms=query_terms("parser"), limit=5)
    assert [(h.blob_id, h.seq, h.start_line, h.end_line, h.symbol, h.text) for h in hits] == [
        ("b1", 0, 1, 9, "def f0", "alpha parser")
    ]


def test_vectors_are_found_by_chunk_text(store: IndexStore) -> None:
    blob = _blob("b1", ("same text", 3))
    store.add_blobs("p1", [blob])
    digest = blob.chunks[0].text_hash
    found = store.known_vectors("p1", [digest, "0" * 32])
    assert list(found) == [digest] and np.allclose(found[digest], _vector(3), atol=1e-3)
    assert store.known_vectors("p2", [digest]) == {}


def test_dense_and_lexical_search_stay_inside_the_given_blobs(store: IndexStore) -> None:
    store.add_blobs(
        "p1",
        [
            _blob("b1", ("open the database connection", 0), ("render html template", 1)),
            _blob("b2", ("database migration runner", 0)),
            _blob("b3", ("unrelated sorting helper", 2)),
        ],
    )
    store.add_blobs("p2", [_blob("b9", ("database of another project", 0))])
    everything = frozenset({"b1", "b2", "b3"})
    dense = store.dense_search("p1", blobs=everything, vector=_vector(0), limit=2)
    assert {(h.blob_id, h.seq) for h in dense} == {("b1", 0), ("b2", 0)}
    assert dense[0].score == pytest.approx(1.0, abs=1e-2)
    only_b2 = store.dense_search("p1", blobs=frozenset({"b2", "b3"}), vector=_vector(0), limit=5)
    assert only_b2[0].blob_id == "b2" and all(h.blob_id in {"b2", "b3"} for h in only_b2)
    lexical = store.lexical_search("p1", blobs=everything, terms=query_terms("database"), limit=10)
    assert {h.blob_id for h in lexical} == {"b1", "b2"} and all(h.score > 0 for h in lexical)
    assert store.lexical_search("p1", blobs=frozenset({"b3"}), terms=query_terms("database"), limit=10) == []
    assert store.lexical_search("p1", blobs=everything, terms=[], limit=10) == []


def test_prune_drops_only_blobs_no_scope_uses(store: IndexStore) -> None:
    store.add_blobs("p1", [_blob("keep", ("kept chunk text", 0)), _blob("gone", ("orphan chunk text", 1))])
    store.save_scope("p1", ScopeRecord(scope="project", kind="project", root="/r", indexed_at=1.0), {"k.py": "keep"})
    assert store.prune_blobs("p1") == 1
    assert store.known_blobs("p1", ["keep", "gone"]) == {"keep": 1}
    assert store.lexical_search("p1", blobs=frozenset({"gone", "keep"}), terms=["orphan"], limit=5) == []
    assert store.dense_search("p1", blobs=frozenset({"gone", "keep"}), vector=_vector(1), limit=5)[0].blob_id == "keep"


def test_whole_file_search_ranks_a_file_whose_chunks_share_the_words(store: IndexStore) -> None:
    # b1 holds both words of the question, in two chunks; b2 has one chunk with one word, b3 neither.
    store.add_blobs(
        "p1",
        [
            _blob("b1", ("cookie header parsing", 0), ("signature check with the secret", 1), ("unrelated", 2)),
            _blob("b2", ("cookie jar", 0)),
            _blob("b3", ("template loader", 1)),
        ],
    )
    everything = frozenset({"b1", "b2", "b3"})
    files = store.file_lexical_search("p1", blobs=everything, terms=query_terms("cookie signature"), limit=5)
    assert [h.blob_id for h in files] == ["b1", "b2"]
    assert files[0].score > files[1].score > 0
    assert files[0].seq in (0, 1) and files[0].text in ("cookie header parsing", "signature check with the secret")
    scoped = store.file_lexical_search("p1", blobs=frozenset({"b2", "b3"}), terms=query_terms("cookie"), limit=5)
    assert [h.blob_id for h in scoped] == ["b2"]
    assert store.file_lexical_search("p1", blobs=everything, terms=[], limit=5) == []


def test_file_centroid_search_ranks_files_by_what_they_are_about_as_a_whole(tmp_path: Path) -> None:
    # The embedded store's exact file view (the base class's default returns nothing: the view is left out).
    store = EmbeddedStore(tmp_path / "index.sqlite", dim=DIM)
    try:
        # b1 is half about topic 0, half about topic 1; b2 only about topic 0; b3 about topic 2.
        store.add_blobs(
            "p1",
            [
                _blob("b1", ("open the database", 0), ("render a page", 1)),
                _blob("b2", ("database migration", 0)),
                _blob("b3", ("sorting helper", 2)),
            ],
        )
        everything = frozenset({"b1", "b2", "b3"})
        files = store.file_dense_search("p1", blobs=everything, vector=_vector(0), limit=5)
        assert [blob for blob, _ in files] == ["b2", "b1", "b3"]
        assert files[0][1] == pytest.approx(1.0, abs=1e-2) and files[1][1] == pytest.approx(2**-0.5, abs=1e-2)
        scoped = store.file_dense_search("p1", blobs=frozenset({"b1", "b3"}), vector=_vector(0), limit=1)
        assert [blob for blob, _ in scoped] == ["b1"]
        # Blobs added after the first search have centroids too, and an unknown blob is no result.
        store.add_blobs("p1", [_blob("b4", ("database pool", 0), ("connection pool", 0))])
        ranked = store.file_dense_search("p1", blobs=everything | {"b4", "nope"}, vector=_vector(0), limit=5)
        assert [blob for blob, _ in ranked][:2] in (["b2", "b4"], ["b4", "b2"]) and len(ranked) == 4
        assert store.file_dense_search("p2", blobs=everything, vector=_vector(0), limit=5) == []
    finally:
        store.close()
