"""``autarch index PATH`` and ``autarch search PATH QUERY``: the semantic index, in-process, for people and scripts.

Both work without any service running: they open the index under the data dir directly (the same
store the indexer service uses), so a project indexed here is searchable by agents and vice versa.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

import msgspec

from autarch.contracts.indexer import DEFAULT_MAX_RESULTS, IndexProgress, SemanticSearch
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.settings import Settings, SettingsError, load_settings

__all__ = ["cmd_index", "cmd_search", "register"]

EXIT_FAILED = 1
EXIT_USAGE = 2

BACKENDS = ("minilm", "onnx", "static", "hosted")
"""The embedders' names (``embeddings.EMBEDDING_BACKENDS``, not imported: it would load numpy for every command)."""


def _settings(args: argparse.Namespace) -> Settings:
    try:
        return load_settings({"data_dir": args.data_dir, "embedding_backend": args.embedding_backend,
                              "embedding_model": args.embedding_model})
    except SettingsError as exc:
        print(f"autarch: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


class _ProgressLine:
    """Draws indexing progress: one updating line on a terminal, a line every few seconds otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._at = 0.0
        self._phase = ""
        self._width = 0

    def __call__(self, event: IndexProgress) -> None:
        now = time.monotonic()
        if event.phase == self._phase and now - self._at < (0.2 if self._tty else 5.0):
            return
        self._at, self._phase = now, event.phase
        if event.total:
            line = f"{event.phase}: {event.done}/{event.total} ({100 * event.done // event.total}%)"
        else:
            line = f"{event.phase}: {event.done}" if event.done else f"{event.phase}..."
        if self._tty:
            self._stream.write("\r" + line + " " * max(0, self._width - len(line)))
            self._width = len(line)
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._tty and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()


def _fail(prefix: str, failure: ServiceFailure, *, as_json: bool = False) -> int:
    if as_json:
        print(json.dumps({"error": failure.message, "code": failure.code}))
    else:
        print(f"{prefix}: {failure.message}", file=sys.stderr)
    return EXIT_FAILED


def cmd_index(args: argparse.Namespace) -> int:
    from autarch.services.indexer.embeddings import EmbeddingUnavailable
    from autarch.services.indexer.engine import Indexer

    settings = _settings(args)
    progress = _ProgressLine(sys.stderr)
    try:
        indexer = Indexer.from_settings(settings)
    except EmbeddingUnavailable as exc:
        print(f"autarch index: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        result = indexer.index_project(args.path, commit=args.commit, progress=progress)
    except ServiceFailure as failure:
        return _fail("autarch index", failure, as_json=args.json)
    finally:
        progress.close()
        indexer.close()
    if args.json:
        print(msgspec.json.encode(result).decode())
    else:
        reused = result.chunks - result.embedded_chunks
        print(
            f"indexed {result.root}: {result.files} files, {result.chunks} chunks "
            f"({result.embedded_chunks} embedded, {max(reused, 0)} reused) in {result.seconds:.1f}s "
            f"[project {result.project}]"
        )
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from autarch.services.indexer.embeddings import EmbeddingUnavailable
    from autarch.services.indexer.engine import Indexer

    settings = _settings(args)
    try:
        request = msgspec.convert(
            {
                "query": args.query,
                "root": args.path,
                "patternWeights": args.pattern_weight or None,
                "maxResults": args.max_results,
            },
            SemanticSearch,
        )
    except msgspec.ValidationError as exc:
        print(f"autarch search: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        indexer = Indexer.from_settings(settings)
    except EmbeddingUnavailable as exc:
        print(f"autarch search: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        found = indexer.search(request)
    except ServiceFailure as failure:
        return _fail("autarch search", failure, as_json=args.json)
    finally:
        indexer.close()
    if args.json:
        print(msgspec.json.encode(found.results).decode())
        return 0
    if not found.results:
        print("no results")
    for rank, hit in enumerate(found.results, start=1):
        print(f"{rank:>2}. {hit.file_path}:{hit.start_line}-{hit.end_line}  score {hit.score:.3f}", end="")
        print(f" (adjusted {hit.adjusted_score:.3f})" if hit.adjusted_score != hit.score else "")
        for line in hit.snippet.splitlines()[: args.lines]:
            print(f"      {line}")
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="data directory (env AUTARCH_DATA_DIR; default ~/.local/share/autarch)")
    parser.add_argument(
        "--embedding-backend",
        choices=BACKENDS,
        help="dense model (env AUTARCH_EMBEDDING_BACKEND)",
    )
    parser.add_argument(
        "--embedding-model",
        help="for onnx: the exported model's directory; static: a Model2Vec model's; hosted: the model name "
             "(env AUTARCH_EMBEDDING_MODEL)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def register(sub: argparse._SubParsersAction) -> None:
    index = sub.add_parser("index", help="index a git repository for semantic search (shows progress)")
    index.add_argument("path", help="the repository (any path inside it)")
    index.add_argument("--commit", help="index this commit's tree instead of the working tree")
    _common(index)
    index.set_defaults(handler=cmd_index)

    search = sub.add_parser("search", help="semantic search in an indexed repository or worktree")
    search.add_argument("path", help="the repository or worktree")
    search.add_argument("query", help="what to look for, in plain words")
    search.add_argument("--max-results", type=int, default=DEFAULT_MAX_RESULTS, help="default 10")
    search.add_argument(
        "--pattern-weight",
        action="append",
        metavar="GLOB:WEIGHT",
        help="scale scores by path, e.g. 'tests/**:2' or 'docs/**:0' (repeatable)",
    )
    search.add_argument("--lines", type=int, default=6, help="snippet lines shown per result (text output)")
    _common(search)
    search.set_defaults(handler=cmd_search)
