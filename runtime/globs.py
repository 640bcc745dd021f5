"""Path globs, compiled to regexes: the one glob engine for tool filters and search pattern weights.

``glob_search``/``grep`` filters (ripgrep's flavour: ``**``, ``*``, ``?``, ``[...]``, ``{a,b}``) and the indexer's
``patternWeights`` both go through :func:`compile_glob`; the file leases ask :func:`segments_overlap` whether two
globs can match one path. Ignore files are not globs in this sense: they follow git's rules in
:mod:`autarch.runtime.ignore`.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Literal

__all__ = ["Segment", "Token", "class_end", "compile_glob", "expand_braces", "glob_segments", "glob_to_regex",
           "literal_segment", "segments_overlap"]


def class_end(pattern: str, i: int) -> int | None:
    """The index after the ``]`` closing the ``[...]`` class at ``pattern[i]``; None when it is not closed."""
    j = i + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 1
    return j + 1 if j < len(pattern) else None


def _class(pattern: str, i: int) -> tuple[str, int] | None:
    """Translate a ``[...]`` class starting at ``pattern[i]``; None when it is not closed."""
    end = class_end(pattern, i)
    if end is None:
        return None
    body = pattern[i + 1 : end - 1]
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    body = body.replace("\\", "\\\\").replace("[", "\\[")
    return ("[^/" if negate else "[") + body + "]", end


def glob_to_regex(pattern: str) -> str:
    """Regex source for a slash-separated glob (``*``, ``?``, ``[...]``, ``**``, ``{a,b}``)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                before_ok = i == 0 or pattern[i - 1] == "/"
                after = i + 2
                if before_ok and after < n and pattern[after] == "/":
                    out.append("(?:.*/)?")
                    i = after + 1
                    continue
                if before_ok and after == n:
                    out.append(".*")
                    i = after
                    continue
                out.append("[^/]*")
                i = after
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            translated = _class(pattern, i)
            if translated is None:
                out.append("\\[")
            else:
                out.append(translated[0])
                i = translated[1]
                continue
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    out.extend(")" * depth)
    return "".join(out)


def compile_glob(pattern: str, *, basename_if_no_slash: bool = False) -> re.Pattern[str]:
    """Compile a glob matched against whole root-relative paths.

    With ``basename_if_no_slash`` a pattern without ``/`` (``*.py``) matches files at any depth,
    as ripgrep's ``--glob`` does; otherwise globs are anchored at the root (``*.py`` = top level).
    """
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    pattern = pattern.lstrip("/")
    source = glob_to_regex(pattern)
    if basename_if_no_slash and "/" not in pattern:
        source = "(?:.*/)?" + source
    return re.compile(source + r"\Z", re.DOTALL)


# --- overlap: whether two globs can match one path ------------------------------------------------------

Token = tuple[str, object]
"""``("lit", char)``, ``("any", None)``, ``("star", None)``, ``("class", compiled regex | None)``."""
Segment = tuple[Token, ...] | Literal["**"]
_EXPANSION_LIMIT = 64


def literal_segment(part: str) -> tuple[Token, ...]:
    """A path segment with no glob in it, as tokens."""
    return tuple(("lit", c) for c in part)


def glob_segments(pattern: str) -> list[tuple[Segment, ...]] | None:
    """The brace-free alternatives of a glob as segment tuples; None for what is not modelled (escapes, huge
    expansions)."""
    if "\\" in pattern:
        return None
    expanded = expand_braces(pattern)
    if expanded is None:
        return None
    result = []
    for text in expanded:
        segments: list[Segment] = []
        for part in text.split("/"):
            if part == "**":
                segments.append("**")
            elif part:
                tokens = _tokens(part)
                if tokens is None:
                    return None
                segments.append(tokens)
        result.append(tuple(segments))
    return result


def expand_braces(pattern: str) -> list[str] | None:
    """The brace-free spellings of a glob (``a{b,c}`` → ``ab``, ``ac``), read as :func:`glob_to_regex` reads its
    braces; None past 64 of them (too many to compare)."""

    def sequence(i: int, inside: bool) -> tuple[list[str], int] | None:
        results = [""]
        while i < len(pattern):
            c = pattern[i]
            if c == "[" and (end := class_end(pattern, i)) is not None:
                results, i = [r + pattern[i:end] for r in results], end
                continue
            if c == "{":
                group = alternatives(i + 1)
                if group is None:
                    return None
                options, i = group
                results = [r + o for r in results for o in options]
                if len(results) > _EXPANSION_LIMIT:
                    return None
                continue
            if inside and c in ",}":
                break
            results, i = [r + c for r in results], i + 1
        return results, i

    def alternatives(i: int) -> tuple[list[str], int] | None:
        options: list[str] = []
        while True:
            parsed = sequence(i, inside=True)
            if parsed is None:
                return None
            found, i = parsed
            options.extend(found)
            if len(options) > _EXPANSION_LIMIT:
                return None
            if i >= len(pattern):
                return options, i  # an unclosed group ends with the pattern, as in glob_to_regex
            if pattern[i] == ",":
                i += 1
                continue
            return options, i + 1

    parsed = sequence(0, inside=False)
    return None if parsed is None else parsed[0]


def _tokens(segment: str) -> tuple[Token, ...] | None:
    tokens: list[Token] = []
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            if not tokens or tokens[-1][0] != "star":
                tokens.append(("star", None))
            i += 1
        elif c == "?":
            tokens.append(("any", None))
            i += 1
        elif c == "[" and (end := class_end(segment, i)) is not None:
            tokens.append(("class", _class_matcher(segment[i:end])))
            i = end
        else:
            tokens.append(("lit", c))
            i += 1
    return tuple(tokens)


def _class_matcher(text: str) -> re.Pattern[str] | None:
    try:
        return compile_glob(text)
    except re.error:
        return None


def _chars_meet(x: Token, y: Token) -> bool:
    """Whether two single-character tokens can match the same character (True when unsure)."""
    if x[0] == "any" or y[0] == "any":
        return True
    if x[0] == "lit" and y[0] == "lit":
        return x[1] == y[1]
    if x[0] == "lit" or y[0] == "lit":
        lit, cls = (x, y) if x[0] == "lit" else (y, x)
        matcher = cls[1]
        # Ignored below: a class token's second item is a compiled pattern once it is not None
        return matcher is None or matcher.match(str(lit[1])) is not None  # type: ignore[attr-defined]
    return True  # two classes: not worth enumerating; overlapping is the safe answer


def _segment_tokens_overlap(a: tuple[Token, ...], b: tuple[Token, ...]) -> bool:
    @cache
    def meet(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i][0] == "star":
            # The star matches nothing more, or also the character b's next token matches.
            return meet(i + 1, j) or (j < len(b) and meet(i, j + 1))
        if j < len(b) and b[j][0] == "star":
            return meet(i, j + 1) or (i < len(a) and meet(i + 1, j))
        if i == len(a) or j == len(b):
            return False
        return _chars_meet(a[i], b[j]) and meet(i + 1, j + 1)

    return meet(0, 0)


def segments_overlap(a: tuple[Segment, ...], b: tuple[Segment, ...]) -> bool:
    """Whether some path matches both segment sequences (True when unsure)."""
    @cache
    def meet(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == "**":
            return meet(i + 1, j) or (j < len(b) and meet(i, j + 1))
        if j < len(b) and b[j] == "**":
            return meet(i, j + 1) or (i < len(a) and meet(i + 1, j))
        if i == len(a) or j == len(b):
            return False
        # Ignored below: segments past the '**' checks are token tuples, not the '**' string
        return _segment_tokens_overlap(a[i], b[j]) and meet(i + 1, j + 1)  # type: ignore[arg-type]

    return meet(0, 0)
