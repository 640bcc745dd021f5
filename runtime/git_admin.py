"""A linked worktree's git directories, found from its repository's own git directory.

A linked worktree's ``.git`` file is the agent's to rewrite (docs/security.md), so a process outside the sandbox
never asks it where the repository is. The repository knows its linked worktrees: each has an administrative
directory ``<common dir>/worktrees/<id>`` whose ``gitdir`` file names the worktree's ``.git``. That directory lies
in the repository's ``.git``, which every command's sandbox keeps read-only.
"""

from __future__ import annotations

import os
import stat

from autarch.runtime.worktree_files import read_regular

__all__ = ["admin_dir_of", "own_git_dir"]

_MAX_POINTER = 64 * 1024


def own_git_dir(root: str) -> str | None:
    """``root/.git`` when it is a real directory (a checkout's own, not a linked worktree's file or a link)."""
    dot_git = os.path.join(root, ".git")
    try:
        return dot_git if stat.S_ISDIR(os.lstat(dot_git).st_mode) else None
    except OSError:
        return None


def admin_dir_of(common_dir: str, worktree: str) -> str | None:
    """The real path of the administrative directory under ``common_dir`` that belongs to the linked worktree
    ``worktree`` (compared by real paths), or None when the repository has no such worktree.

    Nothing in ``worktree`` is read: only the repository's ``worktrees/*/gitdir`` files.
    """
    real = os.path.realpath(worktree)
    admin_root = os.path.join(common_dir, "worktrees")
    try:
        names = sorted(os.listdir(admin_root))
    except OSError:
        return None
    for name in names:
        admin = os.path.join(admin_root, name)
        try:
            pointer = os.fsdecode(read_regular(os.path.join(admin, "gitdir"), max_bytes=_MAX_POINTER).strip())
        except OSError:
            continue
        # The real path of the named file's directory is compared: a worktree reached through a symlinked parent
        # is still found.
        if os.path.basename(pointer) == ".git" and os.path.realpath(os.path.dirname(pointer)) == real:
            return os.path.realpath(admin)
    return None
