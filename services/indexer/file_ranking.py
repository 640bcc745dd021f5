"""Ranking files, not only chunks: an agent asking where something lives wants the right file first.

The chunk retrievers (BM25, dense, path terms) are fused first. Files are then ranked by fusing four
views of each file, each a ranking by reciprocal rank:

- its best fused chunk (what the chunk-level search already says);
- BM25 over the whole file (a file answers a question its chunks answer only together: the words of a
  question are often spread over a class and the helpers beside it);
- its chunk nearest to the query in the dense space (meaning, when the words differ);
- the mean of its chunks' vectors nearest to the query (at half weight): what the file as a whole is
  about. A small file on one topic sits near it; a large file that touches the topic in one of its many
  chunks does not, so this view lifts the module devoted to the question above the hub that mentions it.

Test files are scaled down unless the question is about tests: they repeat the names and words of the
code they exercise, so every retriever likes them, but "where is X done" means the implementation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from .fusion import reciprocal_rank_fusion

__all__ = ["files_in_order", "fuse_files", "is_test_path"]

_TEST_DIRS = frozenset({"test", "tests", "__tests__", "spec", "specs"})
_TEST_FILE = re.compile(
    r"^(test_.+|.+_test|.+_tests|conftest|.+\.(test|spec)|.+_spec|.+Tests?)\.[A-Za-z0-9]+$"
)


def is_test_path(path: str) -> bool:
    """Whether ``path`` is a test: under a ``test(s)``/``spec(s)``/``__tests__`` folder or named like one
    (``test_x.py``, ``x_test.go``, ``x.test.ts``, ``x.spec.js``, ``XTest.java``, ``conftest.py``)."""
    *folders, name = path.split("/")
    return any(folder in _TEST_DIRS for folder in folders) or bool(_TEST_FILE.match(name))


def files_in_order(keys: Iterable[str], paths_of: Mapping[str, Sequence[str]]) -> list[str]:
    """The paths of a ranking of blobs, each path at its blob's first position."""
    seen: dict[str, None] = {}
    for blob in keys:
        for path in paths_of.get(blob, ()):
            seen.setdefault(path, None)
    return list(seen)


def fuse_files(
    rankings: Sequence[Sequence[str]],
    *,
    weights: Sequence[float],
    k: int,
    test_factor: float,
    asks_about_tests: bool,
) -> dict[str, float]:
    """Fused score (0..1) of each path in ``rankings`` (lists of paths, best first); test paths
    scaled by ``test_factor`` unless ``asks_about_tests``."""
    fused = dict(reciprocal_rank_fusion(rankings, weights=weights, k=k))
    if not asks_about_tests and test_factor != 1.0:
        for path in fused:
            if is_test_path(path):
                fused[path] *= test_factor
    return fused
