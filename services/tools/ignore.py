"""``.gitignore`` / ``.autarchignore`` rules and glob patterns, compiled to regular expressions.

Git's semantics: the last matching rule of a file wins, ``!`` re-includes, a trailing ``/``
matches directories only, a pattern with a slash (other than a trailing one) is anchored to the
directory of its ignore file, and ``*`` never crosses ``/`` while ``**`` does. Rules of deeper
ignore files take precedence over shallower ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["IGNORE_FILES", "IgnoreFile", "compile_glob", "glob_to_regex"]

IGNORE_FILES = (".gitignore", ".autarchignore")


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


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool


class IgnoreFile:
    """The rules of one ignore file, matched against paths relative to its directory."""

    def __init__(self, text: str) -> None:
        self.rules: list[_Rule] = []
        for raw in text.splitlines():
            line = raw.rstrip("\r")
            if line.endswith(" ") and not line.endswith("\\ "):
                line = line.rstrip(" ")
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            if negated:
                line = line[1:]
            elif line.startswith("\\!") or line.startswith("\\#"):
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            anchored = "/" in line
            line = line.lstrip("/")
            source = glob_to_regex(line)
            if not anchored:
                source = "(?:.*/)?" + source
            self.rules.append(_Rule(re.compile(source + r"\Z", re.DOTALL), negated, dir_only))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def decide(self, rel: str, *, is_dir: bool) -> bool | None:
        """True (ignored), False (re-included) or None (no rule matches)."""
        for rule in reversed(self.rules):
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel):
                return not rule.negated
        return None
