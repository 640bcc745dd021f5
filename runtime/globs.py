"""Path globs, compiled to regexes: the one glob engine for tool filters and search pattern weights.

``glob_search``/``grep`` filters (ripgrep's flavour: ``**``, ``*``, ``?``, ``[...]``, ``{a,b}``) and the indexer's
``patternWeights`` both go through :func:`compile_glob`. Ignore files are not globs in this sense: they follow
git's rules in :mod:`autarch.runtime.ignore`.
"""

from __future__ import annotations

import re

__all__ = ["compile_glob", "glob_to_regex"]


def _class(pattern: str, i: int) -> tuple[str, int] | None:
    """Translate a ``[...]`` class starting at ``pattern[i]``; None when it is not closed."""
    j = i + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 1
    if j >= len(pattern):
        return None
    body = pattern[i + 1 : j]
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    body = body.replace("\\", "\\\\").replace("[", "\\[")
    return ("[^/" if negate else "[") + body + "]", j + 1


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
