"""Walking a worktree: honours ignore files, never follows a symlink, never enters ``.git``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from autarch.runtime.ignore import IGNORE_FILES, Ignorer, Stack, decide, load_ignore_files

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


def _inherited_ignores(root: str, start_rel: str) -> Stack:
    """Ignore files of ``start_rel``'s ancestors (and ``info/exclude``), shallowest first."""
    ignorer = Ignorer.for_worktree(root)
    return ignorer.stack(start_rel.rpartition("/")[0]) if start_rel else list(ignorer.base)


def walk(
    root: str,
    start_rel: str = "",
    *,
    max_depth: int | None = None,
    include_dirs: bool = True,
    include_symlinks: bool = False,
) -> Iterator[Entry]:
    """Depth-first walk below ``root/start_rel`` in name order, skipping ignored entries.

    ``root`` must be a real path (no symlinks); ``start_rel`` a confined, symlink-free relative path.
    Symlinks are never followed; with ``include_symlinks`` they are reported (as non-directories).
    """
    stack = _inherited_ignores(root, start_rel)
    yield from _walk_dir(root, start_rel, 1, max_depth, include_dirs, include_symlinks, stack)


def _walk_dir(
    root: str,
    rel_dir: str,
    depth: int,
    max_depth: int | None,
    include_dirs: bool,
    include_symlinks: bool,
    stack: Stack,
) -> Iterator[Entry]:
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
            continue
        if is_symlink:
            if include_symlinks:
                yield Entry(rel, False, depth, True)
            continue
        if is_dir:
            if include_dirs:
                yield Entry(rel, True, depth)
            if max_depth is None or depth < max_depth:
                yield from _walk_dir(root, rel, depth + 1, max_depth, include_dirs, include_symlinks, stack)
        else:
            yield Entry(rel, False, depth)


def walk_files(root: str) -> Iterator[str]:
    """Every non-ignored regular file below ``root`` (relative paths, in no particular order).

    The lean walk grep needs: no sorting, no :class:`Entry` objects, and ignore rules only
    consulted where an ignore file is in force.
    """
    pending: list[tuple[str, Stack]] = [("", _inherited_ignores(root, ""))]
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
