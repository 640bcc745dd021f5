"""Dense embedders: the local model for real, and the hosted adapter against a local OpenAI-style server."""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from autarch.services.indexer.embeddings import EmbeddingUnavailable, HostedEmbedder, StaticEmbedder, load_embedder


def test_local_model_embeds_meaning(embedder) -> None:
    texts = [
        "def read_config(path):\n    return tomllib.load(open(path, 'rb'))",
        "load settings from a configuration file",
        "the cat sat on the mat",
    ]
    vectors = embedder.embed(texts)
    assert vectors.shape == (3, embedder.dim) == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 2] + 0.2
    assert np.allclose(embedder.embed(texts[:1]), vectors[:1], atol=1e-5)  # batching does not change vectors
    assert embedder.embed([]).shape == (0, 384)
    assert load_embedder("minilm") is embedder  # built once per process


def test_unknown_backend_and_incomplete_hosted_settings_are_refused() -> None:
    with pytest.raises(EmbeddingUnavailable, match="unknown embedding backend"):
        load_embedder("word2vec")
    with pytest.raises(EmbeddingUnavailable, match="embedding_url"):
        load_embedder("hosted")


def _write_static_model(model_dir: Path, vocab: list[str], table: np.ndarray, weights: np.ndarray) -> None:
    """A Model2Vec-format model: a word-level tokenizer and a safetensors file of token vectors and weights."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tokenizer = Tokenizer(WordLevel({word: i for i, word in enumerate(vocab)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    model_dir.mkdir(parents=True)
    tokenizer.save(str(model_dir / "tokenizer.json"))
    tensors = {"embeddings": table.astype(np.float32), "weights": weights.astype(np.float32)}
    header, offset, body = {}, 0, b""
    for name, array in tensors.items():
        data = array.tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        body += data
    encoded = json.dumps(header).encode()
    (model_dir / "model.safetensors").write_bytes(struct.pack("<Q", len(encoded)) + encoded + body)


def test_static_embedder_averages_weighted_token_vectors_of_a_model_dir(tmp_path: Path) -> None:
    vocab = ["[UNK]", "parse", "read", "config", "settings", "zebra"]
    table = np.array([[0, 0, 0], [1, 0, 0], [1, 0.2, 0], [0, 1, 0], [0, 1, 0.1], [0, 0, 1]], dtype=np.float32)
    weights = np.array([0.0, 1.0, 1.0, 3.0, 1.0, 1.0])
    _write_static_model(tmp_path / "m2v" / "model", vocab, table, weights)
    embedder = StaticEmbedder(tmp_path / "m2v" / "model")
    assert embedder.dim == 3 and embedder.id == "static-m2v-3"
    vectors = embedder.embed(["parse config", "read settings", "zebra", ""])
    # "parse config" = mean(1*[1,0,0], 3*[0,1,0]) normalised; an empty text stays a zero vector.
    expected = np.array([0.5, 1.5, 0.0]) / np.linalg.norm([0.5, 1.5, 0.0])
    assert np.allclose(vectors[0], expected, atol=1e-6)
    assert (vectors @ vectors.T)[0, 1] > (vectors @ vectors.T)[0, 2]
    assert not vectors[3].any()


def test_static_embedder_without_a_model_says_what_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(EmbeddingUnavailable, match="tokenlearn-static-model or a model dir"):
        StaticEmbedder()


def test_static_embedder_runs_the_packaged_model() -> None:
    """``embedding_backend=static`` without a model dir: the model of ``tokenlearn-static-model`` (the
    ``indexer-static`` extra, part of ``all``), 64 dimensions, close texts closer than unrelated ones."""
    embedder = StaticEmbedder()
    assert embedder.dim == 64
    vectors = embedder.embed(["read the configuration file", "load the config file from disk", "a zebra grazes"])
    similarity = vectors @ vectors.T
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert similarity[0, 1] > similarity[0, 2]


class _EmbeddingsAPI(BaseHTTPRequestHandler):
    """A stand-in for a hosted embeddings API: deterministic 4-d vectors, Bearer auth checked."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer k3y" or self.path != "/v1/embeddings":
            self.send_response(401)
            self.end_headers()
            return
        data = [
            {"index": i, "embedding": [float(len(text)), 1.0, float(text.count("a")), 0.0]}
            for i, text in enumerate(body["input"])
        ]
        payload = json.dumps({"data": list(reversed(data)), "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def embeddings_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingsAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_hosted_embedder_speaks_the_openai_embeddings_api(embeddings_api: str) -> None:
    hosted = HostedEmbedder(url=embeddings_api, model="text-embedding-test", api_key="k3y")
    vectors = hosted.embed(["aaa", "b"])
    assert vectors.shape == (2, 4) and hosted.dim == 4 and hosted.id == "hosted-text-embedding-test"
    assert vectors[0] @ vectors[1] < 1.0 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert vectors[0][2] > 0  # rows come back in input order even when the API reorders them
    with pytest.raises(EmbeddingUnavailable, match="embeddings API failed"):
        HostedEmbedder(url=embeddings_api, model="m", api_key="wrong").embed(["x"])


def test_a_local_onnx_model_dir_embeds_as_the_same_model_packaged(embedder, export_minilm, tmp_path: Path) -> None:
    from autarch.services.indexer.embeddings import LocalOnnxEmbedder

    folder = export_minilm(tmp_path / "my-minilm")
    local = load_embedder("onnx", model=str(folder))
    assert isinstance(local, LocalOnnxEmbedder) and local.dim == 384
    assert local.id.startswith("onnx-my-minilm-") and local.id.endswith("-128") and local.id != embedder.id
    texts = ["def read_config(path):\n    return tomllib.load(open(path, 'rb'))", "the cat sat on the mat", ""]
    assert np.allclose(local.embed(texts), embedder.embed(texts), atol=1e-5)


def test_a_local_onnx_model_dir_that_is_not_one_says_what_is_missing(tmp_path: Path) -> None:
    from autarch.services.indexer.embeddings import LocalOnnxEmbedder

    with pytest.raises(EmbeddingUnavailable, match="needs embedding_model"):
        load_embedder("onnx")
    with pytest.raises(EmbeddingUnavailable, match=r"no model\.onnx in"):
        LocalOnnxEmbedder(tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"not a graph")
    with pytest.raises(EmbeddingUnavailable, match=r"no tokenizer\.json in"):
        LocalOnnxEmbedder(tmp_path)
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]")).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(EmbeddingUnavailable, match="onnxruntime cannot load"):
        LocalOnnxEmbedder(tmp_path)


def test_the_command_line_offers_every_embedder() -> None:
    from autarch.cli.indexer_cmd import BACKENDS
    from autarch.services.indexer.embeddings import EMBEDDING_BACKENDS

    assert BACKENDS == EMBEDDING_BACKENDS
