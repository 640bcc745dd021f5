"""The indexer service over a real nats-server: background jobs, progress events, typed errors."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.indexer import (
    NOT_INDEXED_MESSAGE,
    IndexAccepted,
    IndexerErrorCode,
    IndexProgress,
    IndexProject,
    IndexStatus,
    IndexStatusReply,
    IndexWorktree,
    SearchResults,
    SemanticSearch,
)
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.services.indexer import service as indexer_service
from autarch.services.indexer.service import start

from .conftest import git, write_files

VERB = {verb: subjects.request("indexer", verb) for verb in subjects.INDEXER_VERBS}


@pytest.fixture
async def service(nc, settings, embedder):
    stop = await start(nc, settings)
    yield
    await stop()


async def _error(call) -> RemoteError:
    with pytest.raises(RemoteError) as error:
        await call
    return error.value


async def test_index_in_background_with_progress_then_search(nc, service, repo: Path, tmp_path: Path) -> None:
    events: list[IndexProgress] = []
    done = asyncio.Event()

    async def on_progress(msg) -> None:
        event = msgspec.json.decode(msg.data, type=IndexProgress)
        events.append(event)
        if event.phase in ("done", "failed"):
            done.set()

    sub = await nc.subscribe(subjects.indexer_progress("*"), cb=on_progress)
    accepted = await request(nc, VERB["index_project"], IndexProject(path=str(repo)), IndexAccepted)
    assert accepted.state == "indexing" and accepted.progress_subject == subjects.indexer_progress(accepted.project)
    again = await request(nc, VERB["index_project"], IndexProject(path=str(repo)), IndexAccepted)
    assert again.job_id == accepted.job_id  # one job per scope
    await asyncio.wait_for(done.wait(), timeout=60)
    await sub.unsubscribe()
    assert events[-1].phase == "done" and events[-1].job_id == accepted.job_id and events[-1].files == 6
    assert {"scanning", "embedding"} <= {e.phase for e in events}

    found = await request(
        nc,
        VERB["semantic_search"],
        {"query": "open the orders database", "root": str(repo), "patternWeights": ["docs/**:0"], "maxResults": 3},
        SearchResults,
    )
    assert found.results[0].file_path == "app/storage.py" and len(found.results) <= 3
    raw = await nc.request(VERB["semantic_search"], msgspec.json.encode({"query": "router", "root": str(repo)}))
    first = msgspec.json.decode(raw.data)["results"][0]
    assert set(first) == {"file_path", "start_line", "end_line", "snippet", "score", "adjusted_score"}

    status = await request(nc, VERB["index_status"], IndexStatus(root=str(repo)), IndexStatusReply)
    assert status.scopes[0].state == "ready" and status.scopes[0].files == 6

    worktree = tmp_path / "pulse"
    git(repo, "worktree", "add", "-q", "-b", "pulse", str(worktree))
    write_files(worktree, {"app/refunds.py": "def refund_payment(order):\n    return -order.total\n"})
    indexed = await request(
        nc,
        VERB["index_worktree"],
        IndexWorktree(project=accepted.project, worktree=str(worktree), base="main", wait=True),
        IndexAccepted,
        timeout=60,
    )
    assert indexed.state == "ready" and indexed.embedded_chunks == 1
    hits = await request(nc, VERB["semantic_search"], SemanticSearch(query="refund", root=str(worktree)), SearchResults)
    assert hits.results[0].file_path == "app/refunds.py" and hits.scope == indexed.scope


async def test_bad_requests_are_typed_errors(nc, service, repo: Path, tmp_path: Path) -> None:
    not_indexed = await _error(request(nc, VERB["semantic_search"], SemanticSearch(query="x", root=str(repo)), dict))
    assert (not_indexed.code, not_indexed.message) == (IndexerErrorCode.NOT_INDEXED, NOT_INDEXED_MESSAGE)
    plain = tmp_path / "plain"
    plain.mkdir()
    not_repo = await _error(request(nc, VERB["index_project"], IndexProject(path=str(plain)), IndexAccepted))
    assert not_repo.code == IndexerErrorCode.NOT_A_REPOSITORY
    unknown = await _error(
        request(nc, VERB["index_worktree"], IndexWorktree(project="nope", worktree=str(repo)), IndexAccepted)
    )
    assert unknown.code == IndexerErrorCode.UNKNOWN_PROJECT
    bad_commit = await _error(
        request(nc, VERB["index_project"], IndexProject(path=str(repo), commit="nope"), IndexAccepted)
    )
    assert bad_commit.code == IndexerErrorCode.UNKNOWN_COMMIT
    await request(nc, VERB["index_project"], IndexProject(path=str(repo), wait=True), IndexAccepted, timeout=60)
    for payload, code in (
        ({"query": "", "root": str(repo)}, ErrorCode.BAD_REQUEST),
        ({"query": "  ", "root": str(repo)}, IndexerErrorCode.INVALID_QUERY),
        ({"query": "x", "root": str(repo), "patternWeights": ["**/*.py"]}, IndexerErrorCode.INVALID_PATTERN_WEIGHTS),
        (
            {"query": "x", "root": str(repo), "patternWeights": ["**/*.py:lots"]},
            IndexerErrorCode.INVALID_PATTERN_WEIGHTS,
        ),
        ({"query": "x", "root": str(repo), "patternWeights": "**/*.py:2"}, ErrorCode.BAD_REQUEST),
        ({"query": "x", "root": str(repo), "maxResults": 0}, ErrorCode.BAD_REQUEST),
        ({"query": "x", "project": "Not A Valid Id"}, ErrorCode.BAD_REQUEST),
        ({"query": "x", "project": "unknown-project"}, IndexerErrorCode.NOT_INDEXED),
    ):
        error = await _error(request(nc, VERB["semantic_search"], payload, SearchResults))
        assert error.code == code, payload
    # The service is still answering.
    ok = await request(nc, VERB["semantic_search"], SemanticSearch(query="router", root=str(repo)), SearchResults)
    assert ok.results


async def test_the_service_runs_as_its_own_process(nats_server, nc, repo: Path, data_dir: Path) -> None:
    import os
    import signal
    import sys

    env = {**os.environ, "AUTARCH_NATS_URL": nats_server.url, "AUTARCH_DATA_DIR": str(data_dir)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "autarch.services.indexer", env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        for _ in range(200):
            try:
                await nc.request("$SRV.PING.indexer", b"", timeout=0.2)
                break
            except Exception:
                await asyncio.sleep(0.1)
        error = await _error(request(nc, VERB["semantic_search"], SemanticSearch(query="x", root=str(repo)), dict))
        assert error.message == NOT_INDEXED_MESSAGE
        done = await request(
            nc, VERB["index_project"], IndexProject(path=str(repo), wait=True), IndexAccepted, timeout=60
        )
        assert done.state == "ready" and done.files == 6
    finally:
        process.send_signal(signal.SIGTERM)
        stderr = await asyncio.wait_for(process.stderr.read(), timeout=30)
        assert await process.wait() == 0, stderr.decode()


def test_importing_the_service_leaves_the_engines_heavy_imports_for_after_it_serves() -> None:
    """``autarch up`` starts every service at once on a small machine: the indexer's process serves before it imports
    numpy, onnxruntime and tokenizers (a second or more of CPU under that load), which the index's opening does."""
    code = ("import sys; import autarch.runtime.process, autarch.runtime.standby, autarch.services.indexer.service; "
            "print(sorted(m for m in ('numpy', 'onnxruntime', 'tokenizers', 'tree_sitter') if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert found.strip() == "[]"


async def test_the_indexer_answers_before_its_index_is_open_and_a_request_meanwhile_waits_for_it(
        nc, settings, embedder, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = await start(nc, settings)
    try:
        await request(nc, VERB["index_project"], IndexProject(path=str(repo), wait=True), IndexAccepted, timeout=60)
    finally:
        await stop()

    release = threading.Event()
    opened = indexer_service._open

    def held_open(*args, **kwargs):
        release.wait(30)  # the opening, in its worker thread, waits for the test
        return opened(*args, **kwargs)

    monkeypatch.setattr(indexer_service, "_open", held_open)
    starting = asyncio.create_task(start(nc, settings))
    asked: list[asyncio.Task] = []
    try:
        deadline = time.monotonic() + 10
        while True:  # the indexer answers its ping while its index is not open
            try:
                await nc.request("$SRV.PING.indexer", b"", timeout=0.5)
                break
            except Exception:
                assert time.monotonic() < deadline, "the indexer did not answer before its index was open"
                await asyncio.sleep(0.05)
        asked.append(asyncio.create_task(request(nc, VERB["index_status"], IndexStatus(root=str(repo)),
                                                 IndexStatusReply)))
        while True:
            stats = json.loads((await nc.request("$SRV.STATS.indexer", b"", timeout=2)).data)
            [status] = [e for e in stats["endpoints"] if e["name"] == "index_status"]
            if status["data"]["in_flight"] == 1:
                break
            assert time.monotonic() < deadline, "the request did not reach the indexer"
            await asyncio.sleep(0.01)
        assert not asked[0].done()  # received, and held until the index is open
    finally:
        release.set()
        stop = await starting
        try:
            [answer] = await asyncio.gather(*asked) if asked else [None]
        finally:
            await stop()
    assert isinstance(answer, IndexStatusReply)
    assert answer.scopes[0].state == "ready" and answer.scopes[0].files == 6
