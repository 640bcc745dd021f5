"""The grep engine: line-oriented regex search over a worktree, fast enough to stand next to ripgrep.

Why it is fast in pure Python:

- each file is read with one ``os.read`` of its first 64 KiB (most source files fit); binary
  files (a NUL byte or ≥ 10 % control characters in that chunk) are dropped right there;
- a *required literal* is extracted from the regex (``def __init__`` for ``def __init__``,
  ``error(`` for ``class \\w+Error\\(``) and found with C-speed ``bytes.find`` (over
  ``bytes.lower()`` when matching case-insensitively, far faster than ``re.IGNORECASE``); the
  regex then runs only on the lines that contain it;
- file contents, their lower-cased copies and line indexes are kept between calls
  (:class:`~.filecache.ContentCache`, checked against ``lstat`` each time): an agent greps the
  same worktree again and again;
- big trees are split across worker processes (:mod:`.grep_pool`; ``re`` holds the GIL).

Semantics match ripgrep's defaults: one result per matching line, a match never spans lines,
symlinks are not followed, hidden files are searched, ignore files are honoured. Lines whose
match only exists inside a secret (a token, a key) are dropped, so grep cannot be used as an
oracle to read secrets byte by byte.
"""

from __future__ import annotations

import os
import re
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .filecache import (
    BINARY_CONTROL_RATIO,
    MAX_GREP_FILE_BYTES,
    CachedFile,
    ContentCache,
    is_binary,
    read_text_file,
)
from .sensitivity import Redactor

__all__ = [
    "BINARY_CONTROL_RATIO",
    "MAX_GREP_FILE_BYTES",
    "CachedFile",
    "ContentCache",
    "GrepPattern",
    "compile_pattern",
    "is_binary",
    "search_file",
    "search_files",
]


@dataclass(frozen=True)
class GrepPattern:
    """A compiled search: the regex, and the literal every match must contain (if one exists)."""

    source: str
    case_sensitive: bool
    regex: re.Pattern[bytes] | re.Pattern[str]
    literal: bytes | None
    """Bytes every matching line contains; lower-cased when ``fold`` is set."""
    fold: bool
    """Test ``literal`` against the lower-cased content."""
    text_mode: bool
    """Non-ASCII pattern matched case-insensitively: decode files and use a ``str`` regex."""


_COMMON = frozenset("etaoinsrlcdumhETAOINSRLCDUMH")


def _rarity(text: str) -> tuple[int, int]:
    """How selective a literal is likely to be in source code: rare characters score higher."""
    score = 0
    for char in text:
        if char == " ":
            continue
        if char in _COMMON:
            score += 1
        elif char.isalnum() or char in "_.":
            score += 2
        else:
            score += 3
    return score, len(text)


def _required_literal(parsed: object) -> tuple[str, bool] | None:
    """The most selective run of literal characters every match must contain, and whether case flags appear.

    Among the runs (``class `` and ``error(`` in ``class \\w+Error\\(``) the one with the rarest
    characters wins: fewer candidate lines for the regex to check.
    """
    # No public API parses a regex (``sre_parse`` is deprecated since 3.11), so the prefilter reads
    # ``re._parser``/``re._constants`` (Python >= 3.11). If they move, grep stays correct but loses the
    # prefilter, and tests/architecture/test_private_names.py fails saying which name moved.
    try:
        # Ignored below: private module with no stubs; pinned by test_private_names
        from re import _constants as c  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - the names moved: search every line
        return None
    runs: list[str] = []
    flagged = False

    def visit(items: Iterable[tuple[Any, Any]]) -> None:
        nonlocal flagged
        run: list[str] = []
        for op, av in items:
            if op is c.LITERAL:
                run.append(chr(av))
                continue
            if run:
                runs.append("".join(run))
            run = []
            if op is c.SUBPATTERN:
                _group, add_flags, del_flags, sub = av
                if add_flags or del_flags:
                    flagged = True
                visit(sub)
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                low, _high, sub = av
                if low >= 1:
                    visit(sub)
            elif op is c.ATOMIC_GROUP:
                visit(av)
        if run:
            runs.append("".join(run))

    # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
    visit(parsed)  # type: ignore[arg-type]
    return (max(runs, key=_rarity), flagged) if runs else None


@lru_cache(maxsize=64)
def compile_pattern(source: str, case_sensitive: bool) -> GrepPattern:
    """Compile a grep pattern; raises :class:`re.error` for an invalid regex."""
    flags = re.MULTILINE
    if not case_sensitive:
        flags |= re.IGNORECASE
    text_mode = not source.isascii()
    regex: re.Pattern[bytes] | re.Pattern[str]
    regex = re.compile(source, flags) if text_mode else re.compile(source.encode(), flags)
    literal: bytes | None = None
    fold = not case_sensitive
    try:
        from re import _parser  # type: ignore[attr-defined]  # private: see _required_literal

        parsed = _parser.parse(source, 0)
        found = _required_literal(parsed)
        if parsed.state.flags & re.IGNORECASE:
            fold = True
    except Exception:  # the prefilter is an optimisation; without it every file is searched
        found = None
    if found is not None:
        text, flagged = found
        fold = fold or flagged
        if fold and not text.isascii():
            literal = None  # Unicode case folding is not what bytes.lower() does
        else:
            literal = (text.lower() if fold else text).encode()
    return GrepPattern(source, case_sensitive, regex, literal, fold, text_mode)


def _matching_lines(data: bytes | str, regex: re.Pattern[bytes] | re.Pattern[str]) -> list[tuple[int, int, int]]:
    """``(line number, start, end)`` of each line containing a match; a match may not span a line break."""
    nl = "\n" if isinstance(data, str) else b"\n"
    hits: list[tuple[int, int, int]] = []
    size = len(data)
    # A final line break ends the last line; nothing after it is a line of its own.
    limit = size - 1 if size and data[-1:] == nl else size
    pos = 0
    line_no = 1
    counted_to = 0
    search = regex.search
    while pos <= limit:
        # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
        match = search(data, pos)  # type: ignore[arg-type]
        if match is None:
            break
        start = match.start()
        if start > limit:
            break
        # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
        line_start = data.rfind(nl, 0, start) + 1  # type: ignore[arg-type]
        # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
        line_end = data.find(nl, start)  # type: ignore[arg-type]
        if line_end < 0:
            line_end = size
        # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
        if match.end() <= line_end or search(data, line_start, line_end) is not None:  # type: ignore[arg-type]
            # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
            line_no += data.count(nl, counted_to, line_start)  # type: ignore[arg-type]
            counted_to = line_start
            hits.append((line_no, line_start, line_end))
        pos = line_end + 1
    return hits


def _lines_with_literal(
    data: bytes,
    haystack: bytes,
    literal: bytes,
    regex: re.Pattern[bytes],
    *,
    first: int = 0,
    line_starts: array[int] | None = None,
) -> list[tuple[int, int, int]]:
    """Like :func:`_matching_lines`, but the regex only runs on lines that contain ``literal``.

    Every match contains the literal and no match spans lines, so no other line can match;
    finding the literal is a C-speed scan, the regex runs on a handful of lines. With the
    file's ``line_starts`` (cached files) a line number is a bisection, not a count.
    """
    hits: list[tuple[int, int, int]] = []
    find = haystack.find
    search = regex.search
    if line_starts is not None:
        at = first
        while at >= 0:
            index = bisect_right(line_starts, at) - 1
            line_start = line_starts[index]
            line_end = line_starts[index + 1] - 1
            if search(data, line_start, line_end) is not None:
                hits.append((index + 1, line_start, line_end))
            at = find(literal, line_end + 1)
        return hits
    size = len(data)
    pos = first
    line_no = 1
    counted_to = 0
    while True:
        at = find(literal, pos)
        if at < 0:
            break
        line_start = haystack.rfind(b"\n", 0, at) + 1
        line_end = find(b"\n", at)
        if line_end < 0:
            line_end = size
        if search(data, line_start, line_end) is not None:
            line_no += data.count(b"\n", counted_to, line_start)
            counted_to = line_start
            hits.append((line_no, line_start, line_end))
        pos = line_end + 1
    return hits


def _drop_secret_only_matches(
    data: bytes | str, hits: list[tuple[int, int, int]], pattern: GrepPattern, redactor: Redactor
) -> list[tuple[int, int, int]]:
    """Drop the lines that only match because of a secret in them (grep must not be a secret oracle)."""
    as_bytes = isinstance(data, bytes)
    # Ignored below: data and the marker are both str or both bytes; mypy cannot tie the two unions
    if (b"PRIVATE KEY-----" if as_bytes else "PRIVATE KEY-----") in data:  # type: ignore[operator]
        # Key blocks span lines: redact the whole file so the lines inside a block are blanked too.
        text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
        lines = redactor.redact(text).split("\n")
        redacted = [lines[number - 1] if number - 1 < len(lines) else "" for number, _, _ in hits]
    else:
        # Only the matching lines matter; redact them alone (far cheaper than the whole file).
        pieces = [data[start:end] for _, start, end in hits]
        if as_bytes:
            # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
            text = b"\n".join(pieces).decode("utf-8", "surrogateescape")  # type: ignore[arg-type]
        else:
            # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
            text = "\n".join(pieces)  # type: ignore[arg-type]
        cleaned = redactor.redact(text)
        if cleaned == text:
            return hits
        redacted = cleaned.split("\n")
    regex = pattern.regex
    text_regex = isinstance(regex.pattern, str)
    kept = []
    for hit, line in zip(hits, redacted, strict=True):
        subject = line if text_regex else line.encode("utf-8", "surrogateescape")
        # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
        if regex.search(subject) is not None:  # type: ignore[arg-type]
            kept.append(hit)
    return kept


_REDACTOR = Redactor()


def _file_hits(
    path: str, pattern: GrepPattern, cache: ContentCache | None
) -> tuple[bytes | str, list[tuple[int, int, int]]] | None:
    """The searched text of one file and its matching lines, before the secret check."""
    entry = cache.load(path) if cache is not None else None
    data = entry.data if entry is not None else (None if cache is not None else read_text_file(path))
    if not data:
        return None
    literal = pattern.literal
    haystack = data
    if literal is not None:
        if b"\n" in literal:
            return None  # a match would span lines
        if pattern.fold:
            if entry is not None and cache is not None:
                before = entry.size
                haystack = entry.lowered()
                cache.account(entry, before)
            else:
                haystack = data.lower()
        if not pattern.text_mode:
            first = haystack.find(literal)
            if first < 0:
                return None
            line_starts = None
            if entry is not None and cache is not None:
                before = entry.size
                line_starts = entry.line_starts()
                cache.account(entry, before)
            hits = _lines_with_literal(
                data,
                haystack,
                literal,
                # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
                pattern.regex,  # type: ignore[arg-type]
                first=first,
                line_starts=line_starts,
            )
            return (data, hits) if hits else None
        if literal not in haystack:
            return None
    subject: bytes | str = data.decode("utf-8", "surrogateescape") if pattern.text_mode else data
    hits = _matching_lines(subject, pattern.regex)
    return (subject, hits) if hits else None


def _as_text(piece: bytes | str) -> str:
    return piece.decode("utf-8", "surrogateescape") if isinstance(piece, bytes) else piece


def _still_matching(line: str, pattern: GrepPattern) -> bool:
    regex = pattern.regex
    subject = line if isinstance(regex.pattern, str) else line.encode("utf-8", "surrogateescape")
    # Ignored below: data and its regex are both str or both bytes; mypy cannot tie the two unions
    return regex.search(subject) is not None  # type: ignore[arg-type]


def search_file(
    path: str, pattern: GrepPattern, redactor: Redactor = _REDACTOR, cache: ContentCache | None = None
) -> list[int]:
    """Matching line numbers of one file (empty for binary, oversized or non-regular files)."""
    found = _file_hits(path, pattern, cache)
    if found is None:
        return []
    subject, hits = found
    return [number for number, _, _ in _drop_secret_only_matches(subject, hits, pattern, redactor)]


def _inside(root: str, directory: str, checked: dict[str, bool]) -> bool:
    # The walk saw no symlink on the way; re-check (once per directory) for files that matched,
    # in case a directory was swapped for a symlink since. The file itself was opened O_NOFOLLOW.
    known = checked.get(directory)
    if known is None:
        real = os.path.realpath(f"{root}/{directory}" if directory else root)
        known = checked[directory] = real == root or real.startswith(root + os.sep)
    return known


def search_files(
    root: str,
    paths: Iterable[str],
    pattern: GrepPattern,
    *,
    literals: tuple[str, ...] = (),
    cache: ContentCache | None = None,
) -> list[tuple[str, list[int]]]:
    """``(path, line numbers)`` of each file of ``paths`` (relative to ``root``) that has a match.

    Lines that only match because of a secret are dropped. The matching lines of all files are
    redacted as one batch: one pass of the redactor instead of one per file.
    """
    redactor = Redactor(literals) if literals else _REDACTOR
    checked: dict[str, bool] = {}
    settled: list[tuple[str, list[int]]] = []
    pending: list[tuple[str, list[int]]] = []  # line numbers whose lines are in ``batch``, in order
    batch: list[str] = []
    for rel in paths:
        hits_of = _file_hits(f"{root}/{rel}", pattern, cache)
        if hits_of is None or not _inside(root, rel.rpartition("/")[0], checked):
            continue
        subject, hits = hits_of
        marker = b"PRIVATE KEY-----" if isinstance(subject, bytes) else "PRIVATE KEY-----"
        # Ignored below: data and the marker are both str or both bytes; mypy cannot tie the two unions
        if marker in subject:  # type: ignore[operator]
            # Key blocks span lines: this file is redacted whole, on its own.
            kept = _drop_secret_only_matches(subject, hits, pattern, redactor)
            if kept:
                settled.append((rel, [number for number, _, _ in kept]))
            continue
        pending.append((rel, [number for number, _, _ in hits]))
        batch.extend(_as_text(subject[start:end]) for _, start, end in hits)
    if batch:
        text = "\n".join(batch)
        cleaned = redactor.redact(text)
        if cleaned != text:
            lines = iter(zip(batch, cleaned.split("\n"), strict=True))
            filtered = []
            for rel, numbers in pending:
                kept_numbers = []
                for number in numbers:
                    original, redacted = next(lines)
                    if redacted == original or _still_matching(redacted, pattern):
                        kept_numbers.append(number)
                if kept_numbers:
                    filtered.append((rel, kept_numbers))
            pending = filtered
    return settled + pending
