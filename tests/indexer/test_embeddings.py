"""Dense embedders: the local model for real, and the hosted adapter against a local OpenAI-style server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


def test_static_embedder_runs_a_model2vec_package_when_installed() -> None:
    try:
        embedder = StaticEmbedder()
    except EmbeddingUnavailable as exc:
        pytest.skip(f"static embedder not installed here: {exc}")
    vectors = embedder.embed(["parse the configuration", "read config settings", "zebra"])
    assert vectors.shape[0] == 3 and (vectors @ vectors.T)[0, 1] > (vectors @ vectors.T)[0, 2]


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
