"""Baseline issue filtering (seed 000): a failed command whose errors are all known issues is not the pulse's.

Preflight records the issues the project already had (``Baseline``: a ``pattern`` such as ``CS0618`` or part
of a message, optionally a ``file_path``). A failed ``shell`` command is explained by them when every *error
line* of its output matches a baseline, and there is at least one such line. Anything we cannot see or
classify keeps the failure a failure: the cost of a wrong "explained" is a broken build accepted silently,
while a wrong "unexplained" only means a rejected completion (and, after repeated rejections, the escape
hatch and a human review).

An error line is a line of stdout or stderr that reports a problem:
- it names a severity as a word (``error``, ``warning``, ``fatal``, ``failed``, ``failure``, ``panic``,
  ``Traceback``) or an exception (``ValueError``, ``NullPointerException``), or
- it points at a source location and carries a diagnostic code (``a.py:1:8: F401 ...``, as ruff and flake8
  print without a severity word),
but it is not a tally or a wrap-up: ``3 errors``, ``1 Error(s)``, ``failures=1``, ``make: *** [all] Error 2``,
``Build FAILED.`` or ``Tests failed`` only repeat what the other lines say, and counting them would make
every failing build unexplainable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from autarch.contracts.agents import Baseline

__all__ = ["error_lines", "explained_by_baselines", "matches"]

_SEVERITY = re.compile(
    r"\b(?:errors?|warnings?|fatal|fail(?:s|ed|ures?)?|panic(?:ked)?|traceback)\b"
    r"|(?-i:\b\w+(?:Error|Exception)\b)",
    re.IGNORECASE,
)
_WORDS = r"(?:errors?|warnings?|fail(?:s|ed|ures?)?)"
_TALLY = re.compile(
    # "2 errors", "1 Error(s)", "1 failed" (not "3:1  error", eslint's line:column before a real error)
    rf"(?<![\w:.,])\d+\s+{_WORDS}\b(?:\(s\))?"
    # "failures=1", "errors: 0"
    rf"|\b{_WORDS}(?:\(s\))?\s*[:=]\s*\d+\b"
    # make's "*** [all] Error 2": the exit status of a recipe, not a diagnostic
    r"|\*\*\*.*\berror\s+\d+\s*$",
    re.IGNORECASE,
)
_WRAP_UP_SUBJECTS = frozenset({
    "build", "compilation", "compile", "test", "tests", "testing", "lint", "linting", "check", "checks",
    "command", "run", "task", "job", "make", "target", "recipe", "the",
})
"""Words a wrap-up line ("Build FAILED.", "Tests failed") may hold besides its severity word."""
_WORD = re.compile(r"[A-Za-z_][\w-]*")
_LOCATION_WITH_CODE = re.compile(r"[\w./\\-]+\.\w+(?::\d+|\(\d+)(?=.*\b[A-Z]{1,5}\d{2,5}\b)")
_HIDDEN = ("characters omitted] ...", "[output truncated:")
"""Markers of output cut by the tools service or the runner: the lines cut away could hold anything."""


def _is_error_line(line: str) -> bool:
    rest = _TALLY.sub(" ", line)
    if not _SEVERITY.search(rest):
        return bool(_LOCATION_WITH_CODE.search(rest))
    words = [w.lower() for w in _WORD.findall(_SEVERITY.sub(" ", rest))]
    wrap_up = len(words) <= 2 and all(w in _WRAP_UP_SUBJECTS for w in words)
    return not wrap_up


def error_lines(text: str) -> list[str]:
    """The lines of ``text`` that report a problem (see the module docstring)."""
    return [line.strip() for line in text.splitlines() if line.strip() and _is_error_line(line)]


def _names_file(line: str, file_path: str) -> bool:
    path = file_path.strip().replace("\\", "/").removeprefix("./")
    if not path:
        return True
    # The path as a whole path component: "src/a.py" is named by "/tmp/wt/src/a.py:3" but "a.py" is not
    # named by "data.py:3".
    pattern = rf"(?<![\w.-]){re.escape(path)}(?![\w-]|\.\w)"
    return re.search(pattern, line.replace("\\", "/")) is not None


def matches(baseline: Baseline, line: str) -> bool:
    """Whether ``line`` is ``baseline``: its pattern occurs in it and, when it has one, so does its file."""
    return baseline.pattern in line and (baseline.file_path is None or _names_file(line, baseline.file_path))


def explained_by_baselines(output: str | None, baselines: Sequence[Baseline]) -> bool:
    """Whether a failed shell command's recorded result (the tools service's JSON) is only known issues."""
    if not baselines or not output:
        return False
    try:
        result = json.loads(output)
    except ValueError:
        return False  # cut by the runner's own limit: part of the output is not there to judge
    if not isinstance(result, dict) or result.get("error") or result.get("blocked"):
        return False  # timed out, could not start, touched tracked files: not something a baseline explains
    text = "\n".join(str(result.get(stream) or "") for stream in ("stdout", "stderr"))
    if any(marker in text for marker in _HIDDEN):
        return False
    lines = error_lines(text)
    return bool(lines) and all(any(matches(b, line) for b in baselines) for line in lines)
