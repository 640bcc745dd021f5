"""Reciprocal rank fusion: combine rankings by position, not by their incomparable raw scores."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

__all__ = ["RRF_K", "reciprocal_rank_fusion"]

K = TypeVar("K", bound=Hashable)

RRF_K = 60
"""The constant of Cormack et al. (2009): damps the head so no single list dominates."""


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], *, weights: Sequence[float] | None = None, k: int = RRF_K
) -> list[tuple[K, float]]:
    """Fuse rankings (best first) into ``(item, score)`` pairs, best first.

    Scores are normalised to 0..1: an item ranked first in every list scores 1.0.
    """
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    best = sum(w / (k + 1) for w in weights) or 1.0
    fused: dict[K, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, item in enumerate(ranking):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank + 1)
    return sorted(((item, score / best) for item, score in fused.items()), key=lambda pair: -pair[1])
