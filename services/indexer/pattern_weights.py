"""Seed 004's ``patternWeights``: ``glob:weight`` entries that scale a result's score by its file path.

A weight above 1 boosts, below 1 penalizes, 0 excludes. Globs follow gitignore conventions: ``*`` stays
within one path segment, ``**`` crosses segments (``**/*.cs``, ``docs/**``), and a glob without a ``/``
matches the file name at any depth (``*.md``). When several entries match a path their weights multiply.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from autarch.runtime.globs import glob_to_regex as _glob_source

from .errors import IndexerError

__all__ = ["MAX_PATTERN_WEIGHTS", "PatternWeight", "glob_to_regex", "parse_pattern_weights", "weight_for"]

MAX_PATTERN_WEIGHTS = 50


@dataclass(frozen=True)
class PatternWeight:
    glob: str
    weight: float
    regex: re.Pattern[str]

    def matches(self, path: str) -> bool:
        return self.regex.fullmatch(path) is not None


def glob_to_regex(glob: str) -> re.Pattern[str]:
    """Compile a weight's glob with the one glob engine (:mod:`autarch.runtime.globs`), with gitignore's two
    conventions on top: a glob without a ``/`` matches the file name at any depth, and one ending in ``/`` matches
    everything under that directory."""
    body = glob.removeprefix("./").lstrip("/")
    directory = body.endswith("/")
    body = body.rstrip("/")
    source = _glob_source(body + "/**" if directory else body)
    if "/" not in body:
        source = "(?:.*/)?" + source
    return re.compile(source + r"\Z", re.DOTALL)


def parse_pattern_weights(entries: Sequence[str] | None) -> list[PatternWeight]:
    """Parse and validate ``patternWeights``; raises ``invalid_pattern_weights`` naming the bad entry."""
    if not entries:
        return []
    if len(entries) > MAX_PATTERN_WEIGHTS:
        raise IndexerError.invalid_pattern_weights(f"at most {MAX_PATTERN_WEIGHTS} pattern weights are allowed")
    parsed = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, str) or ":" not in entry:
            raise IndexerError.invalid_pattern_weights(
                f"patternWeights[{index}] = {entry!r} is not 'glob:weight' (e.g. '**/*.py:1.5')", entry=entry
            )
        glob, _, raw_weight = entry.rpartition(":")
        glob = glob.strip()
        if not glob:
            raise IndexerError.invalid_pattern_weights(f"patternWeights[{index}] = {entry!r} has an empty glob")
        try:
            weight = float(raw_weight.strip())
        except ValueError:
            raise IndexerError.invalid_pattern_weights(
                f"patternWeights[{index}] = {entry!r}: weight {raw_weight!r} is not a number", entry=entry
            ) from None
        if not math.isfinite(weight) or weight < 0:
            raise IndexerError.invalid_pattern_weights(
                f"patternWeights[{index}] = {entry!r}: weight must be a finite number >= 0", entry=entry
            )
        try:
            regex = glob_to_regex(glob)
        except re.error as exc:
            raise IndexerError.invalid_pattern_weights(
                f"patternWeights[{index}] = {entry!r}: bad glob ({exc})", entry=entry
            ) from None
        parsed.append(PatternWeight(glob=glob, weight=weight, regex=regex))
    return parsed


def weight_for(path: str, weights: Sequence[PatternWeight]) -> float:
    """The product of the weights of every entry matching ``path`` (1.0 when none does)."""
    factor = 1.0
    for entry in weights:
        if entry.matches(path):
            factor *= entry.weight
    return factor
