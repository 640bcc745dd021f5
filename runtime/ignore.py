"""The one gitignore engine: ``.gitignore`` (and ``.autarchignore``) rules as git applies them.

Patterns are translated by :mod:`pathspec` (its ``gitignore`` flavour, the one ``GitIgnoreSpec``
uses); this module adds what a walker needs on top: each rule decides about an entry *itself*
(the last matching rule of a file wins, ``!`` re-includes, a trailing ``/`` matches directories
only, a pattern with an inner or leading ``/`` is anchored to its ignore file's directory), ignore
files of deeper directories take precedence over shallower ones, ``.git/info/exclude`` (and any
other base rules) rank below every ignore file, and nothing below an ignored directory can be
re-included. ``{a,b}`` is literal, as in git. ``tests/runtime/test_ignore_differential.py`` checks
the engine against ``git check-ignore``.

Two ways in: a walker keeps a :data:`Stack` (the ignore files in force, shallowest first) and asks
:func:`decide` about each entry of a directory it has not pruned; :class:`Ignorer` answers for any
path (ancestors included), reading the ignore files it needs once.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable

from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from autarch.runtime.git_admin import own_git_dir
from autarch.runtime.worktree_files import read_regular

__all__ = [
    "GIT_IGNORE_FILES",
    "IGNORE_FILES",
    "IgnoreFile",
    "Ignorer",
    "Stack",
    "decide",
    "git_exclude_path",
    "load_ignore_files",
    "read_ignore_file",
]

IGNORE_FILES = (".gitignore", ".autarchignore")
"""What the tools and indexer read in every directory; in one directory ``.autarchignore`` wins."""

GIT_IGNORE_FILES = (".gitignore",)
"""What git itself reads (the git service: what a commit picks up must not depend on Autarch's file)."""

_ANY_DEPTH = "(?:(?P<ps_d>/)|$)"
_DIR_ONLY = "(?P<ps_d>/)"


def _compile(line: str, flags: int) -> tuple[re.Pattern[str], bool, bool] | None:
    """(regex matched against the entry's whole path, negated, directories only); None for no rule."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            pattern = GitIgnoreSpecPattern(line)
    except (ValueError, TypeError):
        return None  # pathspec refuses what git silently never matches (a trailing backslash, …)
    if pattern.include is None or pattern.regex is None:
        return None
    source: str = pattern.regex.pattern
    body = line[1:] if line.startswith("!") else line
    if "//" in line or not body.strip().strip("/"):
        return None  # an empty path component, or no name at all: git never matches it
    anchored = source.startswith("^")
    # pathspec's regexes also match everything below a matching directory (through the ``ps_d``
    # group); a walker prunes ignored directories itself, so each rule is narrowed to the entry.
    stripped = line.rstrip()
    if source == ".":  # "*", "**", "/**": every entry
        source, anchored, dir_only = "(?s:.+)\\Z", True, False
    elif stripped.endswith("/**") and not stripped.endswith("\\/**"):
        # "dir/**": everything below dir, at any depth, but not dir itself.
        if not source.endswith("/"):
            return None
        source += ".+\\Z"
        dir_only = False
    elif source.endswith(_ANY_DEPTH):
        source = source[: -len(_ANY_DEPTH)] + "\\Z"
        dir_only = False
    elif stripped.endswith("/**/") and body.strip().lstrip("/") != "**/":
        # "dir/**/": the directories below dir, not dir itself.
        if not source.endswith(_DIR_ONLY):
            return None
        source = source[: -len(_DIR_ONLY)] + "/.+\\Z"
        dir_only = True
    elif source.endswith(_DIR_ONLY):
        source = source[: -len(_DIR_ONLY)] + "\\Z"
        dir_only = True
    else:
        return None
    if not anchored:  # "**/…" patterns pathspec leaves unanchored: a match anywhere in the path
        source = "(?s:.*)" + source
    try:
        regex = re.compile(source, flags | re.DOTALL)
    except re.error:
        return None
    return regex, not pattern.include, dir_only


class IgnoreFile:
    """The rules of one ignore file, matched against paths relative to its directory."""

    __slots__ = ("rules",)

    def __init__(self, text: str | Iterable[str], *, ignorecase: bool = False) -> None:
        lines = text.splitlines() if isinstance(text, str) else text
        flags = re.IGNORECASE if ignorecase else 0
        rules = []
        for line in lines:
            compiled = _compile(line, flags)
            if compiled is not None:
                rules.append(compiled)
        rules.reverse()  # the last matching rule wins: try them last first
        self.rules: list[tuple[re.Pattern[str], bool, bool]] = rules

    def __bool__(self) -> bool:
        return bool(self.rules)

    def decide(self, rel: str, *, is_dir: bool) -> bool | None:
        """True (ignored), False (re-included) or None (no rule matches the entry itself)."""
        for regex, negated, dir_only in self.rules:
            if dir_only and not is_dir:
                continue
            if regex.match(rel):
                return not negated
        return None


Stack = list[tuple[str, IgnoreFile]]
"""(directory relative to the root, '' for the root; its rules), lowest precedence first."""


def decide(stack: Stack, rel: str, is_dir: bool) -> bool:
    """Whether the entry ``rel`` is ignored, its parent directory being walked (not ignored)."""
    for base, rules in reversed(stack):
        if base:
            if not rel.startswith(base) or rel[len(base) : len(base) + 1] != "/":
                continue
            local = rel[len(base) + 1 :]
        else:
            local = rel
        decision = rules.decide(local, is_dir=is_dir)
        if decision is not None:
            return decision
    return False


MAX_IGNORE_FILE_BYTES = 4 * 1024 * 1024
"""An ignore file larger than this is read as no rules (a worktree's could be a sparse file of gigabytes)."""


def read_ignore_file(path: str, *, ignorecase: bool = False, follow: bool = False) -> IgnoreFile | None:
    """The rules of the file at ``path``; None when it is missing, unreadable, not a regular file or has no rule.

    A worktree's ignore file is never followed when it is a link (as git ≥ 2.32 does), and a FIFO or device is
    never opened for reading (``runtime.worktree_files``); ``follow`` is for the user's own files
    (``core.excludesFile``, ``info/exclude``), which may be links into a dotfiles repository.
    """
    try:
        data = read_regular(path, max_bytes=MAX_IGNORE_FILE_BYTES, follow=follow)
    except OSError:
        return None
    rules = IgnoreFile(data.decode("utf-8", errors="replace"), ignorecase=ignorecase)
    return rules or None


def load_ignore_files(
    directory: str, names: Iterable[str], files: tuple[str, ...] = IGNORE_FILES, *, ignorecase: bool = False
) -> list[IgnoreFile]:
    """The ignore files among ``names`` (the entries of ``directory``), in precedence order."""
    present = set(names)
    found = []
    for name in files:
        if name in present:
            rules = read_ignore_file(os.path.join(directory, name), ignorecase=ignorecase)
            if rules is not None:
                found.append(rules)
    return found


def git_exclude_path(root: str) -> str | None:
    """``info/exclude`` of ``root``'s own ``.git`` directory, or None when ``root/.git`` is not a real directory.

    A linked worktree's ``.git`` file is the agent's to rewrite (docs/security.md), so it is never followed: a
    caller walking a linked worktree passes the common directory its records name (``common_dir``).
    """
    own = own_git_dir(root)
    return os.path.join(own, "info", "exclude") if own else None


class Ignorer:
    """Whether any path below ``root`` is ignored, its ancestors' fate included.

    ``base`` rules rank below every ignore file (``info/exclude``, ``core.excludesFile``, built-in
    defaults); ``files`` are the names read in every directory, later ones winning.
    """

    def __init__(
        self,
        root: str,
        *,
        files: tuple[str, ...] = IGNORE_FILES,
        base: Iterable[IgnoreFile] = (),
        ignorecase: bool = False,
    ) -> None:
        self.root = str(root)
        self.files = files
        self.ignorecase = ignorecase
        self.base: Stack = [("", rules) for rules in base if rules]
        """The base rules alone: the stack a walk of the root starts with (it reads the root's own files)."""
        self._stacks: dict[str, Stack] = {"": self.base}
        self._loaded: set[str] = set()
        self._dirs: dict[str, bool] = {"": False}

    @classmethod
    def for_worktree(
        cls, root: str, *, files: tuple[str, ...] = IGNORE_FILES, ignorecase: bool = False,
        common_dir: str | None = None,
    ) -> Ignorer:
        """With the repository's ``info/exclude`` as base rules: from ``common_dir`` when the caller has it from a
        record, else from ``root``'s own ``.git`` directory (:func:`git_exclude_path`; a ``.git`` file is never
        followed)."""
        exclude = os.path.join(common_dir, "info", "exclude") if common_dir else git_exclude_path(str(root))
        base = read_ignore_file(exclude, ignorecase=ignorecase, follow=True) if exclude else None
        return cls(root, files=files, base=[base] if base else [], ignorecase=ignorecase)

    def stack(self, rel_dir: str) -> Stack:
        """The ignore files in force for the entries of ``rel_dir`` ('' for the root)."""
        stack = self._stacks.get(rel_dir)
        if stack is not None and rel_dir in self._loaded:
            return stack
        if rel_dir:
            parent = rel_dir.rpartition("/")[0]
            stack = self.stack(parent)
        else:
            stack = self._stacks[""]
        directory = os.path.join(self.root, rel_dir) if rel_dir else self.root
        own = [
            rules
            for name in self.files
            if (rules := read_ignore_file(os.path.join(directory, name), ignorecase=self.ignorecase)) is not None
        ]
        if own:
            stack = [*stack, *((rel_dir, rules) for rules in own)]
        self._stacks[rel_dir] = stack
        self._loaded.add(rel_dir)
        return stack

    def _dir_ignored(self, rel_dir: str) -> bool:
        known = self._dirs.get(rel_dir)
        if known is not None:
            return known
        parent = rel_dir.rpartition("/")[0]
        ignored = self._dir_ignored(parent) or decide(self.stack(parent), rel_dir, True)
        self._dirs[rel_dir] = ignored
        return ignored

    def is_ignored(self, rel: str, *, is_dir: bool = False) -> bool:
        """Whether ``rel`` (relative to the root, ``/``-separated) is ignored."""
        rel = rel.strip("/")
        if not rel:
            return False
        if is_dir:
            return self._dir_ignored(rel)
        parent = rel.rpartition("/")[0]
        return self._dir_ignored(parent) or decide(self.stack(parent), rel, False)

    def __call__(self, path: str) -> bool:
        """``is_ignored`` with git's convention: a trailing ``/`` names a directory."""
        return self.is_ignored(path, is_dir=path.endswith("/"))
