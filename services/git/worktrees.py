"""Linked worktrees written exactly as ``git worktree add`` writes them.

The administrative directory is ``<common dir>/worktrees/<id>`` holding ``HEAD``, ``commondir``,
``gitdir`` (the worktree's ``.git`` file) and the worktree's ``index``; the worktree holds a
``.git`` file pointing back. dulwich's ``add_worktree`` would also check the files out through
its slower index code and refuses a repository whose own HEAD is unborn, hence this module. The
user's checkout (its HEAD, index and files) is never read for writing nor written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dulwich.repo import Repo
from dulwich.worktree import list_worktrees

from autarch.runtime.worktree_files import remove_tree

from .index_file import IndexLocked, write_locked

__all__ = [
    "LinkedWorktree",
    "admin_dir",
    "break_stale_locks",
    "create_worktree_links",
    "head_branch",
    "linked_worktrees",
    "remove_worktree",
    "set_head",
]


@dataclass
class LinkedWorktree:
    path: str
    branch: str | None
    head: str | None
    prunable: bool
    locked: bool


def admin_dir(repo: Repo, worktree_id: str) -> Path:
    """The worktree's administrative directory in the repository."""
    return Path(repo.commondir()) / "worktrees" / worktree_id


def create_worktree_links(repo: Repo, *, worktree_id: str, path: Path, branch_ref: bytes) -> Path:
    """Create ``path`` and its administrative directory with HEAD on ``branch_ref``; idempotent."""
    admin = admin_dir(repo, worktree_id)
    admin.mkdir(parents=True, exist_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    (admin / "commondir").write_bytes(b"../..\n")
    (admin / "gitdir").write_bytes(os.fsencode(path / ".git") + b"\n")
    set_head(admin, branch_ref, break_stale=True)
    (path / ".git").write_bytes(b"gitdir: " + os.fsencode(admin) + b"\n")
    return admin


def set_head(admin: Path, branch_ref: bytes, *, break_stale: bool = False) -> None:
    """Point the worktree's HEAD at ``branch_ref`` (what ``git switch`` writes)."""
    content = b"ref: " + branch_ref + b"\n"
    head = admin / "HEAD"
    try:
        if head.read_bytes() == content:
            return
    except FileNotFoundError:
        pass
    try:
        write_locked(head, content)
    except IndexLocked:
        if not break_stale:
            raise
        head.with_name("HEAD.lock").unlink(missing_ok=True)
        write_locked(head, content)


def head_branch(admin: Path) -> bytes | None:
    """The ref the worktree's HEAD names, or None when detached or missing."""
    try:
        content = (admin / "HEAD").read_bytes().strip()
    except FileNotFoundError:
        return None
    return content[5:].strip() if content.startswith(b"ref: ") else None


def break_stale_locks(admin: Path) -> None:
    """Remove lock files a killed process left in the administrative directory.

    Only called by crash recovery under the repository lock, when this service (the only
    writer of its worktrees' HEAD and index between pulses) cannot be holding them.
    """
    for name in ("index.lock", "HEAD.lock"):
        (admin / name).unlink(missing_ok=True)


def remove_worktree(repo: Repo, *, worktree_id: str, path: Path) -> bool:
    """Delete the worktree's files and administrative directory; True when anything was there."""
    admin = admin_dir(repo, worktree_id)
    existed = admin.exists() or path.exists()
    if path.exists():
        remove_tree(path)
    if admin.exists():
        remove_tree(admin)
    worktrees = admin.parent
    try:
        worktrees.rmdir()  # git removes the empty worktrees/ directory too
    except OSError:
        pass
    return existed


def linked_worktrees(repo: Repo) -> list[LinkedWorktree]:
    """Every linked worktree of the repository, as ``git worktree list`` reports them."""
    result = []
    for info in list_worktrees(repo)[1:]:
        result.append(
            LinkedWorktree(
                path=os.path.normpath(info.path),
                branch=info.branch.decode() if info.branch else None,
                head=info.head.decode() if info.head else None,
                prunable=info.prunable,
                locked=info.locked,
            )
        )
    return result
