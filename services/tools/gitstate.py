"""Snapshots of a worktree's tracked files, for preflight's "must not modify tracked files" rule.

A snapshot is ``git status`` of tracked files (untracked ones are ignored: preflight may create
``node_modules``, ``bin/`` and the like) plus a content hash of every tracked file that already
differed from HEAD, and HEAD itself. Comparing the snapshots taken before and after a command
names every tracked file the command changed, even one that was already dirty before.

git runs as :class:`.gitrecord.HostGit` says: on the recorded git directory and work tree, never on what the
worktree's ``.git`` points to, and with no program of the repository's choosing (docs/security.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from dataclasses import dataclass, field

from .gitrecord import HostGit

__all__ = ["GitStateError", "TrackedState", "changed_paths", "changed_tracked_files", "head_blob", "tracked_state"]


class GitStateError(Exception):
    """The directory is not a git worktree (or git failed); the message is git's."""


@dataclass(frozen=True)
class TrackedState:
    head: str
    dirty: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Path → (status code, content hash) of every tracked file that differs from HEAD."""


async def _git(git: HostGit, *args: str) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        *git.argv(*args),
        cwd=git.root,
        env=git.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise GitStateError(err.decode("utf-8", "replace").strip() or f"git {args[0]} failed")
    return out


def _hash(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return "missing"


async def _status(git: HostGit, *, untracked: bool, sources: bool) -> tuple[str, dict[str, str]]:
    """HEAD, and path → status code of what differs from it (``sources``: a rename's source path too)."""
    # Optional locks are off (HostGit's environment): a status taken alongside a running command must not take
    # index.lock. Submodules are not looked into: each has a git directory and config of its own.
    head = (await _git(git, "rev-parse", "--verify", "-q", "HEAD")).decode().strip()
    mode = "--untracked-files=all" if untracked else "--untracked-files=no"
    raw = await _git(git, "status", "--porcelain=v1", "-z", "--ignore-submodules=all", mode)
    codes: dict[str, str] = {}
    entries = raw.split(b"\x00")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2].decode(), entry[3:].decode("utf-8", "surrogateescape")
        if "R" in code or "C" in code:
            if sources and i < len(entries) and entries[i]:
                codes.setdefault(entries[i].decode("utf-8", "surrogateescape"), "R<")
            i += 1  # the rename's source path follows
        codes[path] = code
    return head, codes


async def tracked_state(git: HostGit) -> TrackedState:
    """The state of the work tree's tracked files right now."""
    head, codes = await _status(git, untracked=False, sources=False)
    root = git.root
    dirty = {path: (code, await asyncio.to_thread(_hash, os.path.join(root, path))) for path, code in codes.items()}
    return TrackedState(head=head, dirty=dirty)


async def changed_paths(git: HostGit) -> tuple[str, dict[str, str]]:
    """HEAD, and path → status code of every file that differs from it, untracked (not ignored) ones included."""
    return await _status(git, untracked=True, sources=True)


async def head_blob(git: HostGit, path: str) -> tuple[bytes, int] | None:
    """``path``'s content and file mode at HEAD; None when HEAD has no such file."""
    listing = await _git(git, "ls-tree", "-z", "HEAD", "--", path)
    meta, _, name = listing.rstrip(b"\x00").partition(b"\t")
    if not meta or name.decode("utf-8", "surrogateescape") != path:
        return None
    mode, kind, sha = meta.decode().split()
    if kind != "blob":
        return None
    return await _git(git, "cat-file", "blob", sha), int(mode, 8)


def changed_tracked_files(before: TrackedState, after: TrackedState) -> list[str]:
    """Tracked files whose state differs between the snapshots (HEAD moving counts as ``HEAD``)."""
    paths = before.dirty.keys() | after.dirty.keys()
    changed = sorted(path for path in paths if before.dirty.get(path) != after.dirty.get(path))
    if before.head != after.head:
        changed.insert(0, "HEAD")
    return changed
