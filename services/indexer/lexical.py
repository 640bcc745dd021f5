"""Lexical retrieval: a code-aware tokenizer and Okapi BM25 over a scope's chunks.

Identifiers are indexed whole and split into their words (``parseHTTPResponse`` ->
``parsehttpresponse``, ``parse``, ``http``, ``response``), so a question in plain words meets
code written in any naming style. A light suffix stripper folds ``parsing``/``parsed``/``parses``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["BM25_B", "BM25_K1", "bm25_scores", "query_terms", "term_frequencies", "tokenize", "top_rows"]

BM25_K1 = 1.2
BM25_B = 0.75

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+[A-Za-z_]+[A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z]|[0-9]|$)|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

# English function words and the keywords every file of a language repeats: they carry no topic.
_STOPWORDS = frozenset(
    """
    a an and are as at be but by can could do does for from how i if in into is it its me my no not of on or
    our should so than that the their then there these this those to was we what when where which who why will
    with would you your use used using find code implemented implement handle handles handled does done
    self cls def return none true false import elif else pass lambda var let const func fn pub mut impl
    public private protected static void new null nil this super
    """.split()
)


def _stem(word: str) -> str:
    # Enough to fold the common inflections of identifiers and prose; not a full Porter stemmer.
    if len(word) > 5 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed") and not word.endswith("eed"):
        word = word[:-2]
    elif len(word) > 4 and word.endswith("es") and word[-3] in "sxz":
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Index terms of ``text``: identifiers whole and split, lower-cased, stemmed, stopwords dropped."""
    terms: list[str] = []
    for match in _IDENTIFIER.finditer(text):
        word = match.group(0)
        parts = [p for p in re.split(r"_+", word) if p]
        pieces: list[str] = []
        for part in parts:
            pieces.extend(_CAMEL.findall(part) or [part])
        whole = word.lower().strip("_")
        if len(pieces) > 1 and len(whole) > 2 and whole not in _STOPWORDS:
            terms.append(_stem(whole.replace("_", "")))
        for piece in pieces:
            low = piece.lower()
            if len(low) > 1 and low not in _STOPWORDS and not low.isdigit():
                terms.append(_stem(low))
    return terms


def term_frequencies(text: str) -> Counter[str]:
    return Counter(tokenize(text))


def query_terms(query: str) -> list[str]:
    """Distinct terms of a query, in order of appearance."""
    return list(dict.fromkeys(tokenize(query)))


def bm25_scores(
    postings: Iterable[tuple[np.ndarray, np.ndarray]],
    *,
    lengths: np.ndarray,
    in_scope: np.ndarray,
    k1: float = BM25_K1,
    b: float = BM25_B,
) -> np.ndarray:
    """BM25 score of every row for a query whose terms have the given postings.

    Each posting is ``(rows, term frequencies)`` over the same row space as ``lengths``;
    only rows where ``in_scope`` is true count for document frequencies and get a score.
    """
    scores = np.zeros(len(lengths), dtype=np.float32)
    n_docs = int(in_scope.sum())
    if n_docs == 0:
        return scores
    avgdl = float(lengths[in_scope].mean()) or 1.0
    for rows, tfs in postings:
        keep = in_scope[rows]
        rows, tfs = rows[keep], tfs[keep].astype(np.float32)
        df = len(rows)
        if df == 0:
            continue
        idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
        norm = k1 * (1.0 - b + b * lengths[rows] / avgdl)
        scores[rows] += idf * tfs * (k1 + 1.0) / (tfs + norm)
    return scores


def top_rows(scores: np.ndarray, limit: int, mask: np.ndarray | None = None) -> Sequence[int]:
    """Indices of the ``limit`` highest positive scores, best first."""
    candidates = np.flatnonzero(scores > 0) if mask is None else np.flatnonzero((scores > 0) & mask)
    if len(candidates) > limit:
        part = np.argpartition(-scores[candidates], limit - 1)[:limit]
        candidates = candidates[part]
    return candidates[np.argsort(-scores[candidates], kind="stable")].tolist()
