"""Walking a worktree: honours ignore files, never follows a symlink, never enters ``.git``.

The one walk of the tools (``list_directory``, ``glob_search``, ``grep``) and the indexer; the git service's
snapshot scan is another job (it compares the worktree with the index's stat data) and keeps its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from autarch.runtime.ignore import IGNORE_FILES, IgnoreFile, Ignorer, Stack, decide, load_ignore_files

Skipped = Callable[[str, str], None]
"""Told ``(relative path, why)`` for each entry left out: ``ignored``, ``symlink`` or ``nested_repository``."""

__all__ = ["Entry", "walk", "walk_files"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One file or directory under the walked directory."""

    path: str
    """Relative to the worktree root, POSIX separators."""
    is_dir: bool
    depth: int
    """1 for the walked directory's immediate children."""
    is_symlink: bool = False


def _inherited_ignores(root: str, start_rel: str, common_dir: str | None = None) -> Stack:
    """Ignore files of ``start_rel``'s ancestors (and ``info/exclude``), shallowest first."""
    ignorer = Ignorer.for_worktree(root, common_dir=common_dir)
    return ignorer.stack(start_rel.rpartition("/")[0]) if start_rel else list(ignorer.base)


def walk(
    root: str,
    start_rel: str = "",
    *,
    max_depth: int | None = None,
    include_dirs: bool = True,
    include_symlinks: bool = False,
    default_excludes: Sequence[str] = (),
    skip_nested_repositories: bool = False,
    on_skip: Skipped | None = None,
    common_dir: str | None = None,
) -> Iterator[Entry]:
    """Depth-first walk below ``root/start_rel`` in name order, skipping ignored entries.

    ``root`` must be a real path (no symlinks); ``start_rel`` a confined, symlink-free relative path.
    Symlinks are never followed; with ``include_symlinks`` they are reported (as non-directories).
    ``default_excludes`` are gitignore lines below every ignore file (any of them can re-include);
    ``skip_nested_repositories`` leaves out directories holding a ``.git`` (submodules, nested clones).
    ``common_dir`` is the repository's git directory as a record names it (its ``info/exclude`` applies);
    without it, only ``root``'s own ``.git`` directory is looked at: a linked worktree's ``.git`` file is the
    agent's and is never followed (:func:`~autarch.runtime.ignore.git_exclude_path`).
    """
    stack = _inherited_ignores(root, start_rel, common_dir)
    if default_excludes:
        stack = [("", IgnoreFile(list(default_excludes))), *stack]
    options = _Options(max_depth, include_dirs, include_symlinks, skip_nested_repositories, on_skip)
    # A stack of directory listings, not recursion: an agent can nest directories deeper than Python recurses.
    listings = [_walk_dir(root, start_rel, 1, options, stack)]
    while listings:
        item = next(listings[-1], None)
        if item is None:
            listings.pop()
        elif isinstance(item, _Descend):
            listings.append(_walk_dir(root, item.rel, item.depth, options, item.stack))
        else:
            yield item


@dataclass(frozen=True, slots=True)
class _Options:
    max_depth: int | None
    include_dirs: bool
    include_symlinks: bool
    skip_nested_repositories: bool
    on_skip: Skipped | None


@dataclass(frozen=True, slots=True)
class _Descend:
    """Walk this directory's entries next (where a recursive walk would have recursed)."""

    rel: str
    depth: int
    stack: Stack


def _walk_dir(root: str, rel_dir: str, depth: int, options: _Options, stack: Stack) -> Iterator[Entry | _Descend]:
    directory = os.path.join(root, rel_dir) if rel_dir else root
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    names = {entry.name for entry in entries}
    own = load_ignore_files(directory, names)
    if own:
        stack = [*stack, *((rel_dir, rules) for rules in own)]
    prefix = rel_dir + "/" if rel_dir else ""
    for entry in entries:
        if entry.name == ".git":
            continue
        rel = prefix + entry.name
        try:
            is_symlink = entry.is_symlink()
            is_dir = not is_symlink and entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if stack and decide(stack, rel, is_dir):
            if options.on_skip is not None:
                options.on_skip(rel, "ignored")
            continue
        if is_symlink:
            if options.include_symlinks:
                yield Entry(rel, False, depth, True)
            elif options.on_skip is not None:
                options.on_skip(rel, "symlink")
            continue
        if is_dir:
            if options.skip_nested_repositories and os.path.lexists(os.path.join(entry.path, ".git")):
                if options.on_skip is not None:
                    options.on_skip(rel, "nested_repository")
                continue
            if options.include_dirs:
                yield Entry(rel, True, depth)
            if options.max_depth is None or depth < options.max_depth:
                yield _Descend(rel, depth + 1, stack)
        else:
            yield Entry(rel, False, depth)


def walk_files(root: str, *, common_dir: str | None = None) -> Iterator[str]:
    """Every non-ignored regular file below ``root`` (relative paths, in no particular order); ``common_dir``
    as :func:`walk` takes it.

    The lean walk grep needs: no sorting, no :class:`Entry` objects, and ignore rules only
    consulted where an ignore file is in force.
    """
    pending: list[tuple[str, Stack]] = [("", _inherited_ignores(root, "", common_dir))]
    while pending:
        rel_dir, stack = pending.pop()
        directory = f"{root}/{rel_dir}" if rel_dir else root
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            continue
        if any(entry.name in IGNORE_FILES for entry in entries):
            own = load_ignore_files(directory, [entry.name for entry in entries])
            if own:
                stack = [*stack, *((rel_dir, rules) for rules in own)]
        prefix = rel_dir + "/" if rel_dir else ""
        for entry in entries:
            name = entry.name
            if name == ".git":
                continue
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            rel = prefix + name
            if stack and decide(stack, rel, is_dir):
                continue
            if is_dir:
                pending.append((rel, stack))
            else:
                yield rel
