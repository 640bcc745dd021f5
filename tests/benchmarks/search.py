"""Benchmark: search quality (recall@10, MRR) on real open-source code bases we did not write.

Each set in ``tests/benchmarks/search_eval/*.json`` names a PyPI package at an exact version and holds
developer-style questions (half of them paraphrased, so their words are not the code's identifiers)
with the files that answer them, split into ``dev`` (ranking is tuned on these) and ``heldout``
(reported, never tuned on). The package is fetched with pip (``pip download --no-deps``, into a cache
dir, never into the venv), its ``.py``/``.pyi`` files are committed to a fresh git repository, and
the indexer indexes it in-process with the configured embedder (default: the local MiniLM model).

Figures per set and split:

- ``ours``: ``semantic_search`` as an agent gets it (hybrid), top 10 results.
- ``reference``: file-level BM25 (whole files, a plain identifier-splitting tokenizer, k1 1.2, b 0.75),
  the baseline the issue quotes beside ours.
- ``lexical`` / ``dense``: our two retrievers alone, to see which one moves.
- ``ours_by_style``: ours on the ``direct`` questions and on the ``paraphrase`` ones apart.

recall@10: share of a query's gold files among the files of its top 10 results, averaged.
MRR: 1 / rank of the first result in a gold file (0 when none is in the top 10), averaged.
The last line printed is JSON; its ``summary`` gives, per split, every set's figures, their mean and the sets
at or past the goal on both.

    .venv/bin/python tests/benchmarks/search.py [--sets falcon,tornado,celery] [--cache-dir DIR] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path

from autarch.contracts.indexer import SemanticSearch
from autarch.runtime.settings import load_settings
from autarch.services.indexer.engine import Indexer

EVAL_DIR = Path(__file__).with_name("search_eval")
GOAL = {"recall@10": 0.95, "mrr": 0.80}
K = 10
MODES = ("hybrid", "lexical", "dense")


# corpus ---------------------------------------------------------------------------------------------


def fetch_wheel(package: str, version: str, cache: Path) -> Path:
    """The package's wheel at ``version``, downloaded once into ``cache`` with pip (no dependencies)."""
    cache.mkdir(parents=True, exist_ok=True)
    name = package.replace("-", "_").lower()
    found = [p for p in cache.glob("*.whl") if p.name.lower().startswith(f"{name}-{version}-")]
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
             "-d", str(cache), f"{package}=={version}"],
            check=True,
        )
        found = [p for p in cache.glob("*.whl") if p.name.lower().startswith(f"{name}-{version}-")]
    if not found:
        raise SystemExit(f"pip did not leave a wheel of {package}=={version} in {cache}")
    return sorted(found)[0]


def make_corpus(wheel: Path, top: str, target: Path) -> Path:
    """Unpack the source files (``.py``/``.pyi``) of package ``top`` into a one-commit git repository."""
    repo = target / f"{wheel.name.split('-')[0]}-src"
    if (repo / ".git").exists():
        return repo
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.startswith(f"{top}/") and member.endswith((".py", ".pyi")):
                out = repo / member
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(archive.read(member))
    git = ["git", "-c", "user.name=eval", "-c", "user.email=eval@example.invalid", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "sources"], check=True)
    return repo


# reference: file-level BM25 -------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z]|[0-9]|$)|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_REFERENCE_STOP = frozenset(
    "a an and are as at be by can do does for from how i in is it of on or the to what when where which with".split()
)


def reference_terms(text: str) -> list[str]:
    """Plain tokenizer for the reference: words split at ``_`` and camelCase, lower-cased, no stemming."""
    terms = []
    for word in _WORD.findall(text):
        for piece in _CAMEL.findall(word) or [word]:
            low = piece.lower()
            if low not in _REFERENCE_STOP:
                terms.append(low)
    return terms


class FileBM25:
    """Okapi BM25 over whole files: the baseline a search that knows nothing of chunks or meaning gets."""

    def __init__(self, repo: Path, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs: dict[str, Counter[str]] = {}
        for path in sorted(repo.rglob("*")):
            if path.is_file() and ".git" not in path.relative_to(repo).parts:
                self.docs[str(path.relative_to(repo))] = Counter(reference_terms(path.read_text(errors="replace")))
        self.lengths = {p: sum(c.values()) for p, c in self.docs.items()}
        self.avgdl = sum(self.lengths.values()) / max(1, len(self.lengths))
        self.df: Counter[str] = Counter()
        for counts in self.docs.values():
            self.df.update(counts.keys())

    def search(self, query: str, k: int = K) -> list[str]:
        n = len(self.docs)
        scores: dict[str, float] = {}
        for term in dict.fromkeys(reference_terms(query)):
            df = self.df.get(term, 0)
            if not df:
                continue
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            for path, counts in self.docs.items():
                tf = counts.get(term, 0)
                if tf:
                    norm = self.k1 * (1 - self.b + self.b * self.lengths[path] / self.avgdl)
                    scores[path] = scores.get(path, 0.0) + idf * tf * (self.k1 + 1) / (tf + norm)
        return sorted(scores, key=lambda p: (-scores[p], p))[:k]


# scoring --------------------------------------------------------------------------------------------


def score(ranked_files: list[list[str]], queries: list[dict]) -> dict:
    """recall@10 and MRR of per-query file lists (in result order, may repeat) against the gold files."""
    recalls, reciprocal = [], []
    for files, item in zip(ranked_files, queries, strict=True):
        gold = set(item["gold"])
        top = files[:K]
        recalls.append(len(gold & set(top)) / len(gold))
        rank = next((i for i, f in enumerate(top, start=1) if f in gold), None)
        reciprocal.append(1.0 / rank if rank else 0.0)
    n = max(1, len(queries))
    return {"recall@10": round(sum(recalls) / n, 3), "mrr": round(sum(reciprocal) / n, 3)}


def run_set(spec: dict, indexer: Indexer, repo: Path, *, misses: bool) -> dict:
    reference = FileBM25(repo)
    out: dict = {}
    for split in ("dev", "heldout"):
        queries = [q for q in spec["queries"] if q["split"] == split]
        if not queries:  # a held-out-only set
            continue
        row: dict = {"queries": len(queries)}
        for mode in MODES:
            started = time.perf_counter()
            files = [
                [r.file_path for r in indexer.search(SemanticSearch(query=q["q"], root=str(repo), max_results=K),
                                                     mode=mode).results]
                for q in queries
            ]
            elapsed = time.perf_counter() - started
            row["ours" if mode == "hybrid" else mode] = {
                **score(files, queries), "ms_per_query": round(1000 * elapsed / max(1, len(queries)), 1)
            }
            if mode == "hybrid":
                # Direct questions and paraphrases apart: the second is where search is weak.
                row["ours_by_style"] = {
                    style: score([f for f, q in zip(files, queries, strict=True) if q.get("style") == style],
                                 [q for q in queries if q.get("style") == style])
                    for style in sorted({q.get("style") for q in queries if q.get("style")})
                }
            if misses and mode == "hybrid":
                for q, got in zip(queries, files, strict=True):
                    rank = next((i for i, f in enumerate(got, start=1) if f in q["gold"]), None)
                    if rank != 1:
                        seen = list(dict.fromkeys(got))[:4]
                        print(f"  [{split}] rank {rank}: {q['q']!r} gold {q['gold']} got {seen}")
        row["reference"] = score([reference.search(q["q"]) for q in queries], queries)
        out[split] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=None, help="comma-separated set names (default: every set)")
    parser.add_argument("--backend", default="minilm", help="embedding backend (minilm, static, hosted)")
    parser.add_argument("--model", default=None, help="embedding_model setting")
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "autarch-search-eval-cache"),
                        help="where the packages' wheels are downloaded (kept between runs)")
    parser.add_argument("--data-dir", default=None, help="keep corpora and index here (reused between runs)")
    parser.add_argument("--misses", action="store_true", help="print the queries whose first result is not gold")
    args = parser.parse_args(argv)

    specs = {p.stem: json.loads(p.read_text()) for p in sorted(EVAL_DIR.glob("*.json"))}
    wanted = args.sets.split(",") if args.sets else list(specs)
    work = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="autarch-bench-search-"))
    work.mkdir(parents=True, exist_ok=True)
    settings = load_settings(
        {"data_dir": str(work / "data"), "embedding_backend": args.backend, "embedding_model": args.model}
    )
    indexer = Indexer.from_settings(settings)
    report: dict = {"benchmark": "search", "embedder": indexer.embedder.id, "goal": GOAL, "sets": {}}
    try:
        for name in wanted:
            spec = specs[name]
            wheel = fetch_wheel(spec["package"], spec["version"], Path(args.cache_dir))
            repo = make_corpus(wheel, spec["top_level"], work)
            started = time.perf_counter()
            indexed = indexer.index_project(str(repo))
            index_seconds = time.perf_counter() - started
            print(f"{name} {spec['version']}: {indexed.files} files, {indexed.chunks} chunks, "
                  f"indexed in {index_seconds:.1f} s", flush=True)
            result = run_set(spec, indexer, repo, misses=args.misses)
            for split, row in result.items():
                print(f"  {split:<8} ({row['queries']} queries)  {'recall@10':>9} {'MRR':>6}")
                for label in ("ours", "lexical", "dense", "reference"):
                    print(f"    {label:<10} {row[label]['recall@10']:>15.3f} {row[label]['mrr']:>6.3f}")
                for style, figures in row["ours_by_style"].items():
                    print(f"    ours, {style:<12} {figures['recall@10']:>9.3f} {figures['mrr']:>6.3f}")
            report["sets"][name] = {
                "package": f"{spec['package']}=={spec['version']}",
                "files": indexed.files,
                "chunks": indexed.chunks,
                "index_s": round(index_seconds, 1),
                **{split: {"ours": row["ours"], "ours_by_style": row["ours_by_style"], "reference": row["reference"],
                           "lexical": row["lexical"], "dense": row["dense"]} for split, row in result.items()},
            }
    finally:
        indexer.close()
        if not args.data_dir:
            shutil.rmtree(work, ignore_errors=True)
    report["summary"] = summarize(report["sets"])
    for split, row in report["summary"].items():
        met = ", ".join(row["meet_goal"]) or "none"
        print(f"{split}: mean {row['mean']['recall@10']:.3f} / {row['mean']['mrr']:.3f} over {len(row['sets'])} sets; "
              f"at or past the goal: {met}")
    print(json.dumps(report))
    return 0


def summarize(sets: dict) -> dict:
    """Per split: each set's figures (ours), their unweighted mean, and the sets at or past the goal on both."""
    summary: dict = {}
    for split in ("dev", "heldout"):
        rows = {name: result[split]["ours"] for name, result in sets.items() if split in result}
        if not rows:
            continue
        mean = {key: round(sum(r[key] for r in rows.values()) / len(rows), 3) for key in GOAL}
        summary[split] = {
            "sets": {name: {key: r[key] for key in GOAL} for name, r in rows.items()},
            "mean": mean,
            "meet_goal": [name for name, r in rows.items() if all(r[key] >= GOAL[key] for key in GOAL)],
        }
    return summary


if __name__ == "__main__":
    sys.exit(main())
