"""Benchmark: index the installed Python standard library, re-index after changing 10 files, query latency.

The standard library of the running interpreter (``sysconfig``'s stdlib dir, without site-packages
and caches) is copied into a fresh git repository and indexed in-process with the configured
embedder (default: the local MiniLM ONNX model) into the embedded store. Then 10 files get a new
function each and the project is indexed again: only their new blobs are chunked and embedded.
Finally ``--queries`` searches run (the first one, which loads the vectors, is reported apart).
The last line printed is JSON.

    .venv/bin/python tests/benchmarks/indexer.py [--backend minilm|static] [--max-files N] [--queries 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from autarch.contracts.indexer import SemanticSearch
from autarch.runtime.settings import load_settings
from autarch.services.indexer.engine import Indexer

QUERIES = [
    "parse a JSON document into Python objects",
    "send an HTTP request and read the response",
    "compress data with zlib or gzip",
    "where are command line arguments parsed",
    "format a datetime as an ISO string",
    "thread pool that runs callables concurrently",
    "read and write CSV files",
    "match a regular expression against a string",
    "copy a directory tree recursively",
    "compute a SHA-256 digest of bytes",
    "create a temporary directory that is removed afterwards",
    "event loop scheduling of coroutines",
    "serialize objects with pickle protocol",
    "configure logging handlers and formatters",
    "decode base64 encoded data",
    "open a SQLite database connection",
    "unit test assertion that raises an exception",
    "parse an email message with MIME parts",
    "resolve a host name to an IP address",
    "lazy evaluation with generators and itertools",
]


def copy_stdlib(target: Path, *, max_files: int | None) -> tuple[Path, int]:
    """Copy the stdlib (text and code, no caches, no site-packages) into ``target`` and ``git init`` it."""
    source = Path(sysconfig.get_paths()["stdlib"])
    repo = target / "stdlib"
    copied = 0
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(
            d for d in dirnames if d not in ("site-packages", "__pycache__", "config-3.11-x86_64-linux-gnu")
        )
        for name in sorted(filenames):
            if max_files is not None and copied >= max_files:
                break
            src = Path(dirpath, name)
            if src.is_symlink() or name.endswith((".pyc", ".so", ".a")):
                continue
            dst = repo / src.relative_to(source)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            copied += 1
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo, copied


def change_files(repo: Path, count: int) -> list[str]:
    """Append a new function to ``count`` Python files spread over the tree."""
    candidates = sorted(p for p in repo.rglob("*.py") if ".git" not in p.parts)
    step = max(1, len(candidates) // count)
    changed = []
    for i, path in enumerate(candidates[::step][:count]):
        with path.open("a") as f:
            f.write(f"\n\ndef benchmark_added_{i}(value):\n    '''Added by the benchmark.'''\n    return value * {i}\n")
        changed.append(str(path.relative_to(repo)))
    return changed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="minilm", help="embedding backend (minilm, static, hosted)")
    parser.add_argument("--model", default=None, help="embedding_model setting")
    parser.add_argument("--max-files", type=int, default=None, help="copy at most this many files (quick runs)")
    parser.add_argument("--queries", type=int, default=200, help="searches timed for p50/p99")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="autarch-bench-indexer-") as tmp:
        work = Path(tmp)
        repo, copied = copy_stdlib(work, max_files=args.max_files)
        settings = load_settings(
            {"data_dir": str(work / "data"), "embedding_backend": args.backend, "embedding_model": args.model}
        )
        indexer = Indexer.from_settings(settings)
        print(f"stdlib copy: {copied} files in {repo}; embedder {indexer.embedder.id}", flush=True)

        last = [0.0]

        def progress(event) -> None:
            if time.monotonic() - last[0] > 30:
                last[0] = time.monotonic()
                print(f"  {event.phase}: {event.done}/{event.total}", flush=True)

        started = time.perf_counter()
        full = indexer.index_project(str(repo), progress=progress)
        full_seconds = time.perf_counter() - started
        print(
            f"full index: {full.files} files, {full.chunks} chunks in {full_seconds:.1f}s "
            f"({full.files / full_seconds:.1f} files/s, {full.chunks / full_seconds:.1f} chunks/s)",
            flush=True,
        )

        changed = change_files(repo, 10)
        started = time.perf_counter()
        again = indexer.index_project(str(repo))
        reindex_seconds = time.perf_counter() - started
        print(f"re-index after changing {len(changed)} files: {reindex_seconds:.2f}s", end="")
        print(f", {again.embedded_chunks} chunks embedded")

        started = time.perf_counter()
        indexer.search(SemanticSearch(query="warm up: load vectors", root=str(repo)))
        first_query_ms = 1000 * (time.perf_counter() - started)
        latencies = []
        for i in range(args.queries):
            query = QUERIES[i % len(QUERIES)]
            started = time.perf_counter()
            indexer.search(SemanticSearch(query=query, root=str(repo)))
            latencies.append(1000 * (time.perf_counter() - started))
        p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
        print(
            f"queries: p50 {p50:.1f} ms, p99 {p99:.1f} ms over {len(latencies)} (first query {first_query_ms:.0f} ms)"
        )
        store_bytes = sum(f.stat().st_size for f in (work / "data").rglob("*") if f.is_file())
        indexer.close()
        print(
            json.dumps(
                {
                    "benchmark": "indexer_stdlib",
                    "python": sys.version.split()[0],
                    "embedder": indexer.embedder.id,
                    "files": full.files,
                    "chunks": full.chunks,
                    "full_index_s": round(full_seconds, 1),
                    "files_per_s": round(full.files / full_seconds, 1),
                    "chunks_per_s": round(full.chunks / full_seconds, 1),
                    "reindex_10_files_s": round(reindex_seconds, 2),
                    "reindex_embedded_chunks": again.embedded_chunks,
                    "query_p50_ms": round(p50, 1),
                    "query_p99_ms": round(p99, 1),
                    "first_query_ms": round(first_query_ms, 1),
                    "store_mb": round(store_bytes / 1e6, 1),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
