"""The scale-out store: Weaviate through weaviate-client v4, shared by any number of indexer replicas.

Collections (one set per embedder, so vectors of different models never mix), ``<Prefix>`` being
``Autarch`` plus the embedder id:

- ``<Prefix>Chunk``: one object per chunk with its vector (self-provided, cosine HNSW) and a ``terms``
  property holding our code-aware tokens (whitespace tokenization), so Weaviate's BM25 matches the
  embedded store's.
- ``<Prefix>Blob``: which blobs a project has, with their chunk counts (deterministic UUIDs).
- ``<Prefix>Scope``: scope records; the manifest (path -> blob) is one unindexed JSON property, so
  replacing it is a single atomic object update.
- ``<Prefix>Project``: project records.

Searches filter by project in Weaviate and by the scope's blobs here, over-fetching as needed: a
worktree differs from its project in a handful of blobs, so little is thrown away.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

import numpy as np

from .lexical import tokenize
from .store import BlobChunks, ChunkHit, IndexStore, ProjectRecord, ScopeRecord

__all__ = ["WeaviateStore"]

_NAMESPACE = uuid.UUID("6f1d3a52-5a0e-4a47-9f8f-3b8f1c1f0a11")
_PAGE = 500
_MAX_FETCH = 5000


def _uid(*parts: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join(parts)))


class WeaviateStore(IndexStore):
    """An :class:`IndexStore` on a Weaviate server (v1.25+)."""

    def __init__(self, client: Any, *, dim: int, namespace: str, owns_client: bool = True) -> None:
        self._client = client
        self._owns_client = owns_client
        self.dim = dim
        prefix = "Autarch" + "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", namespace) if part)
        self.prefix = prefix
        self._lock = threading.Lock()
        self._ensure_schema()
        self.chunks = client.collections.use(f"{prefix}Chunk")
        self.blobs = client.collections.use(f"{prefix}Blob")
        self.scopes = client.collections.use(f"{prefix}Scope")
        self.projects = client.collections.use(f"{prefix}Project")

    @classmethod
    def connect(cls, url: str, *, dim: int, namespace: str, api_key: str | None = None) -> WeaviateStore:
        """Connect to ``http(s)://host:port`` (gRPC on 50051, or the port of ``?grpc=``)."""
        import weaviate
        from weaviate.auth import AuthApiKey

        parsed = urlparse(url)
        secure = parsed.scheme == "https"
        host = parsed.hostname or "localhost"
        port = parsed.port or (443 if secure else 8080)
        grpc_port = 50051
        for pair in parsed.query.split("&"):
            if pair.startswith("grpc="):
                grpc_port = int(pair.split("=", 1)[1])
        client = weaviate.connect_to_custom(
            http_host=host,
            http_port=port,
            http_secure=secure,
            grpc_host=host,
            grpc_port=grpc_port,
            grpc_secure=secure,
            auth_credentials=AuthApiKey(api_key) if api_key else None,
        )
        return cls(client, dim=dim, namespace=namespace)

    def _ensure_schema(self) -> None:
        from weaviate.classes.config import Configure, DataType, Property, Tokenization, VectorDistances

        def text(name: str, *, searchable: bool = False, filterable: bool = True) -> Property:
            return Property(
                name=name,
                data_type=DataType.TEXT,
                index_searchable=searchable,
                index_filterable=filterable,
                tokenization=Tokenization.FIELD if not searchable else Tokenization.WHITESPACE,
            )

        def number(name: str, kind: Any = DataType.INT) -> Property:
            return Property(name=name, data_type=kind, index_filterable=False, index_searchable=False)

        none = Configure.Vectors.self_provided
        wanted = {
            f"{self.prefix}Chunk": dict(
                properties=[
                    text("project"),
                    text("blob_id"),
                    number("seq"),
                    number("start_line"),
                    number("end_line"),
                    Property(name="symbol", data_type=DataType.TEXT, index_searchable=False, index_filterable=False),
                    Property(name="text", data_type=DataType.TEXT, index_searchable=False, index_filterable=False),
                    text("terms", searchable=True, filterable=False),
                    text("text_hash"),
                ],
                vector_config=none(
                    vector_index_config=Configure.VectorIndex.hnsw(distance_metric=VectorDistances.COSINE)
                ),
            ),
            f"{self.prefix}Blob": dict(
                properties=[text("project"), text("blob_id"), number("chunks")], vector_config=none()
            ),
            f"{self.prefix}Scope": dict(
                properties=[
                    text("project"),
                    text("scope"),
                    text("record", filterable=False),
                    text("manifest", filterable=False),
                ],
                vector_config=none(),
            ),
            # Records without vectors: self-provided, so a server-wide default vectorizer never touches them.
            f"{self.prefix}Project": dict(
                properties=[text("project"), text("root", filterable=False)], vector_config=none()
            ),
        }
        for name, config in wanted.items():
            if not self._client.collections.exists(name):
                try:
                    self._client.collections.create(name, **config)
                except Exception:
                    # Another replica created it between our check and create.
                    if not self._client.collections.exists(name):
                        raise

    # projects and scopes --------------------------------------------------------------------------

    def save_project(self, record: ProjectRecord) -> None:
        self._upsert(self.projects, _uid(record.project), {"project": record.project, "root": record.root})

    def get_project(self, project: str) -> ProjectRecord | None:
        obj = self.projects.query.fetch_object_by_id(_uid(project))
        return ProjectRecord(project=obj.properties["project"], root=obj.properties["root"]) if obj else None

    def list_projects(self) -> list[ProjectRecord]:
        return sorted(
            (
                ProjectRecord(project=o.properties["project"], root=o.properties["root"])
                for o in self.projects.iterator()
            ),
            key=lambda r: r.project,
        )

    def save_scope(self, project: str, record: ScopeRecord, files: Mapping[str, str] | None = None) -> None:
        uid = _uid(project, record.scope)
        with self._lock:
            if files is None:
                current = self.scopes.query.fetch_object_by_id(uid)
                manifest = current.properties.get("manifest", "{}") if current else "{}"
            else:
                manifest = json.dumps(dict(files), separators=(",", ":"))
            self._upsert(
                self.scopes,
                uid,
                {
                    "project": project,
                    "scope": record.scope,
                    "record": json.dumps(record.__dict__),
                    "manifest": manifest,
                },
            )

    def get_scope(self, project: str, scope: str) -> ScopeRecord | None:
        obj = self.scopes.query.fetch_object_by_id(_uid(project, scope), return_properties=["record"])
        return ScopeRecord(**json.loads(obj.properties["record"])) if obj else None

    def list_scopes(self, project: str) -> list[ScopeRecord]:
        from weaviate.classes.query import Filter

        found = self.scopes.query.fetch_objects(
            filters=Filter.by_property("project").equal(project), limit=10_000, return_properties=["record"]
        )
        records = [ScopeRecord(**json.loads(o.properties["record"])) for o in found.objects]
        return sorted(records, key=lambda r: (r.kind, r.scope))

    def scope_files(self, project: str, scope: str) -> dict[str, str]:
        obj = self.scopes.query.fetch_object_by_id(_uid(project, scope), return_properties=["manifest"])
        return json.loads(obj.properties.get("manifest") or "{}") if obj else {}

    def delete_scope(self, project: str, scope: str) -> None:
        self.scopes.data.delete_by_id(_uid(project, scope))

    # blobs and chunks -----------------------------------------------------------------------------

    def known_blobs(self, project: str, blob_ids: Collection[str]) -> dict[str, int]:
        from weaviate.classes.query import Filter

        wanted = list(dict.fromkeys(blob_ids))
        found: dict[str, int] = {}
        for start in range(0, len(wanted), _PAGE):
            part = [_uid(project, blob) for blob in wanted[start : start + _PAGE]]
            result = self.blobs.query.fetch_objects(
                filters=Filter.by_id().contains_any(part), limit=len(part), return_properties=["blob_id", "chunks"]
            )
            found.update((o.properties["blob_id"], int(o.properties["chunks"])) for o in result.objects)
        return found

    def known_vectors(self, project: str, text_hashes: Collection[str]) -> dict[str, np.ndarray]:
        from weaviate.classes.query import Filter

        wanted = list(dict.fromkeys(text_hashes))
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(wanted), _PAGE):
            part = wanted[start : start + _PAGE]
            result = self.chunks.query.fetch_objects(
                filters=Filter.by_property("project").equal(project)
                & Filter.by_property("text_hash").contains_any(part),
                limit=len(part) * 2,
                include_vector=True,
                return_properties=["text_hash"],
            )
            for obj in result.objects:
                vector = obj.vector.get("default") if isinstance(obj.vector, dict) else obj.vector
                if vector is not None:
                    found[obj.properties["text_hash"]] = np.asarray(vector, dtype=np.float32)
        return found

    def add_blobs(self, project: str, blobs: Sequence[BlobChunks]) -> None:
        from weaviate.classes.data import DataObject

        known = self.known_blobs(project, [b.blob_id for b in blobs])
        fresh = [b for b in dict((b.blob_id, b) for b in blobs).values() if b.blob_id not in known]
        if not fresh:
            return
        objects = [
            DataObject(
                uuid=_uid(project, blob.blob_id, str(chunk.seq)),
                properties={
                    "project": project,
                    "blob_id": blob.blob_id,
                    "seq": chunk.seq,
                    "start_line": chunk.start_line,
                    "end_line": chunk.end_line,
                    "symbol": chunk.symbol,
                    "text": chunk.text,
                    "terms": " ".join(tokenize(f"{chunk.symbol}\n{chunk.text}")),
                    "text_hash": chunk.text_hash,
                },
                vector=np.asarray(chunk.vector, dtype=np.float32).tolist(),
            )
            for blob in fresh
            for chunk in blob.chunks
        ]
        for start in range(0, len(objects), _PAGE):
            self._check(self.chunks.data.insert_many(objects[start : start + _PAGE]))
        # Blob markers last: a blob counts as known only once all its chunks are in.
        markers = [
            DataObject(
                uuid=_uid(project, blob.blob_id),
                properties={"project": project, "blob_id": blob.blob_id, "chunks": len(blob.chunks)},
            )
            for blob in fresh
        ]
        for start in range(0, len(markers), _PAGE):
            self._check(self.blobs.data.insert_many(markers[start : start + _PAGE]))

    def prune_blobs(self, project: str) -> int:
        from weaviate.classes.query import Filter

        referenced: set[str] = set()
        found = self.scopes.query.fetch_objects(
            filters=Filter.by_property("project").equal(project), limit=10_000, return_properties=["manifest"]
        )
        for obj in found.objects:
            referenced.update(json.loads(obj.properties.get("manifest") or "{}").values())
        orphans = [
            o.properties["blob_id"]
            for o in self.blobs.iterator(return_properties=["project", "blob_id"])
            if o.properties["project"] == project and o.properties["blob_id"] not in referenced
        ]
        for start in range(0, len(orphans), _PAGE):
            part = orphans[start : start + _PAGE]
            self.blobs.data.delete_many(where=Filter.by_id().contains_any([_uid(project, b) for b in part]))
            self.chunks.data.delete_many(
                where=Filter.by_property("project").equal(project) & Filter.by_property("blob_id").contains_any(part)
            )
        return len(orphans)

    # search ---------------------------------------------------------------------------------------

    def dense_search(self, project: str, *, blobs: frozenset[str], vector: np.ndarray, limit: int) -> list[ChunkHit]:
        from weaviate.classes.query import MetadataQuery

        def run(fetch: int) -> list[Any]:
            return self.chunks.query.near_vector(
                near_vector=np.asarray(vector, dtype=np.float32).tolist(),
                limit=fetch,
                filters=self._filter(project, blobs),
                return_metadata=MetadataQuery(distance=True),
            ).objects

        return self._collect(run, blobs, limit, score=lambda o: 1.0 - float(o.metadata.distance or 0.0))

    def lexical_search(
        self, project: str, *, blobs: frozenset[str], terms: Sequence[str], limit: int
    ) -> list[ChunkHit]:
        from weaviate.classes.query import MetadataQuery

        if not terms:
            return []
        query = " ".join(dict.fromkeys(terms))

        def run(fetch: int) -> list[Any]:
            return self.chunks.query.bm25(
                query=query,
                query_properties=["terms"],
                limit=fetch,
                filters=self._filter(project, blobs),
                return_metadata=MetadataQuery(score=True),
            ).objects

        return self._collect(run, blobs, limit, score=lambda o: float(o.metadata.score or 0.0))

    def _filter(self, project: str, blobs: frozenset[str]) -> Any:
        from weaviate.classes.query import Filter

        where = Filter.by_property("project").equal(project)
        if len(blobs) <= _PAGE:
            # Small scopes filter exactly in Weaviate; large ones are filtered here after over-fetching.
            where = where & Filter.by_property("blob_id").contains_any(sorted(blobs) or [""])
        return where

    def _collect(self, run: Any, blobs: frozenset[str], limit: int, *, score: Any) -> list[ChunkHit]:
        fetch = limit * 2
        while True:
            objects = run(fetch)
            hits = [
                ChunkHit(
                    blob_id=o.properties["blob_id"],
                    seq=int(o.properties["seq"]),
                    start_line=int(o.properties["start_line"]),
                    end_line=int(o.properties["end_line"]),
                    symbol=o.properties.get("symbol") or "",
                    text=o.properties.get("text") or "",
                    score=score(o),
                )
                for o in objects
                if o.properties["blob_id"] in blobs
            ]
            if len(hits) >= limit or len(objects) < fetch or fetch >= _MAX_FETCH:
                return hits[:limit]
            fetch = min(fetch * 4, _MAX_FETCH)

    # plumbing -------------------------------------------------------------------------------------

    def _upsert(self, collection: Any, uid: str, properties: dict[str, Any]) -> None:
        if collection.data.exists(uid):
            collection.data.replace(uuid=uid, properties=properties)
        else:
            try:
                collection.data.insert(properties=properties, uuid=uid)
            except Exception:
                # Inserted concurrently by another replica: replace instead.
                collection.data.replace(uuid=uid, properties=properties)

    @staticmethod
    def _check(result: Any) -> None:
        errors = getattr(result, "errors", None)
        if errors:
            first = next(iter(errors.values()))
            raise RuntimeError(f"weaviate rejected {len(errors)} objects: {getattr(first, 'message', first)}")

    def delete_namespace(self) -> None:
        """Drop this store's collections (tests)."""
        for suffix in ("Chunk", "Blob", "Scope", "Project"):
            self._client.collections.delete(f"{self.prefix}{suffix}")

    def close(self) -> None:
        if self._owns_client:
            self._client.close()
