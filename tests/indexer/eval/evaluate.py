"""Retrieval quality of the indexer on a real open-source tree: recall@10 and MRR per retrieval mode.

The corpus is the ``dulwich`` package installed in the venv (a pure-Python Git implementation we did
not write), copied into a fresh git repository. ``dulwich_queries.json`` holds questions phrased as
an agent would ask, each with the files that answer it.

    .venv/bin/python tests/indexer/eval/evaluate.py [--backend minilm|static] [--data-dir DIR] [--json]

recall@10: share of a query's gold files among the files of its top 10 results, averaged.
MRR: 1 / position of the first result in a gold file (0 when none is in the top 10), averaged.
The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dulwich

from autarch.contracts.indexer import SemanticSearch
from autarch.runtime.settings import load_settings
from autarch.services.indexer.engine import Indexer

QUERIES = Path(__file__).with_name("dulwich_queries.json")
MODES = ("lexical", "dense", "hybrid")


def make_corpus(target: Path) -> Path:
    """Copy the installed dulwich sources into ``target`` as a one-commit git repository."""
    source = Path(dulwich.__file__).parent
    repo = target / "dulwich-src"
    if (repo / ".git").exists():
        return repo
    shutil.copytree(source, repo / "dulwich", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    git = ["git", "-c", "user.name=eval", "-c", "user.email=eval@example.invalid", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "dulwich sources"], check=True)
    return repo


def evaluate(indexer: Indexer, repo: Path, queries: list[dict], mode: str, k: int = 10) -> dict:
    recalls, reciprocal_ranks, latencies = [], [], []
    for item in queries:
        gold = set(item["gold"])
        started = time.perf_counter()
        results = indexer.search(SemanticSearch(query=item["q"], root=str(repo), max_results=k), mode=mode).results
        latencies.append(time.perf_counter() - started)
        files = [r.file_path for r in results]
        recalls.append(len(gold & set(files)) / len(gold))
        rank = next((i for i, f in enumerate(files, start=1) if f in gold), None)
        reciprocal_ranks.append(1.0 / rank if rank else 0.0)
    n = len(queries)
    return {
        "recall@10": round(sum(recalls) / n, 3),
        "mrr": round(sum(reciprocal_ranks) / n, 3),
        "ms_per_query": round(1000 * sum(latencies) / n, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="minilm", help="embedding backend (minilm, static, hosted)")
    parser.add_argument("--model", default=None, help="embedding_model setting (static model dir, hosted model)")
    parser.add_argument("--data-dir", default=None, help="keep the corpus and index here (reused between runs)")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    queries = json.loads(QUERIES.read_text())["queries"]
    workdir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="autarch-eval-"))
    workdir.mkdir(parents=True, exist_ok=True)
    repo = make_corpus(workdir)
    settings = load_settings(
        {"data_dir": str(workdir / "data"), "embedding_backend": args.backend, "embedding_model": args.model}
    )
    indexer = Indexer.from_settings(settings)
    started = time.perf_counter()
    indexed = indexer.index_project(str(repo))
    index_seconds = time.perf_counter() - started
    report = {
        "corpus": "dulwich " + ".".join(str(part) for part in getattr(dulwich, "__version__", ())),
        "embedder": indexer.embedder.id,
        "queries": len(queries),
        "files": indexed.files,
        "chunks": indexed.chunks,
        "index_seconds": round(index_seconds, 1),
    }
    for mode in MODES:
        report[mode] = evaluate(indexer, repo, queries, mode)
    indexer.close()
    if not args.json:
        print(f"corpus: {report['corpus']} ({indexed.files} files, {indexed.chunks} chunks)")
        print(f"embedder: {report['embedder']}, full index: {report['index_seconds']} s")
        print(f"{'mode':<8} {'recall@10':>9} {'MRR':>6} {'ms/query':>9}")
        for mode in MODES:
            row = report[mode]
            print(f"{mode:<8} {row['recall@10']:>9.3f} {row['mrr']:>6.3f} {row['ms_per_query']:>9.1f}")  # type: ignore[index]  # a mode row is a dict
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
