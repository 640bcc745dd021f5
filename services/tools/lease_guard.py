"""File leases and bead scopes enforced on a swarm worker's tool calls (``ToolCall.lease_holder``), against
``runtime.leases``.

Two rules, both read from the same lease table:

- **Other holders' files**: a path another holder leased is never changed by this worker.
- **The bead's scope**: a worker changes only its bead's files, which are the leases the coordinator gave it
  (origin ``coordinator``: the bead's files at the claim, plus what a ``request_scope`` widening added). Its
  own reservations (origin ``worker``) keep others off files but do not let it write them. A worker whose
  bead leases are gone (lapsed, released) has no scope left and changes nothing.

A file tool (``write_file``, ``edit_file``, ``multi_edit``) on a path another holder leased, or outside the
bead's scope, is refused before it touches anything. A command cannot be checked before it runs, so ``shell``
is checked after: the worktree's changed paths (``git status``, untracked files included, each with a content
hash) are compared before and after the command, and every path the command changed that another holder leased
(or that lies outside the bead's scope) is put back:

- a file that differed from HEAD before (modified, or untracked) gets back the bytes it had, kept in memory
  while it was hashed — they are read anyway, and a worker's dirty files are few; past ``_KEEP_BYTES`` in
  all, only hashes are kept and such a file is reported as not restored;
- a file that was clean gets HEAD's content and mode back (``git cat-file``), or is deleted when HEAD has
  no such file (the command created it).

Only the worktree's files are put back, not the index (git operations are the git service's, not the
agent's). A lease granted to another holder while the check runs is a race of milliseconds that this does
not close: the lease table decides who may reserve, this keeps workers from writing what was reserved.
A call without a lease holder never gets here and pays nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from dataclasses import dataclass, field
from typing import Any, cast

from autarch.contracts.beads import LeaseView
from autarch.runtime.leases import LeaseTable, bead_scope, blocking_lease, describe_lease, in_scope

from .context import ToolContext, failure
from .gitrecord import HostGit
from .gitstate import GitStateError, changed_paths, head_blob
from .paths import PathRefused, Worktree

__all__ = ["OUTSIDE_BEAD_SCOPE", "ShellLeaseGuard", "lease_refusal"]

OUTSIDE_BEAD_SCOPE = "outside_bead_scope"
"""``code`` of a write refused (or a command's change put back) because the path is not among the bead's files."""

_KEEP_BYTES = 32 * 1024 * 1024
"""Bytes of dirty files kept before a command so they can be put back; beyond it only hashes are kept."""


def _lease_fields(lease: LeaseView) -> dict[str, Any]:
    return {
        "holder": lease.holder,
        "pattern": lease.pattern,
        "mode": lease.mode,
        "bead_id": lease.bead_id,
        "expires_at": lease.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ") if lease.expires_at else None,
    }


def _table(ctx: ToolContext) -> tuple[LeaseTable, str, str] | str:
    """The lease table, scope and holder of a call, or why the call cannot be checked."""
    call = ctx.call
    assert call.lease_holder is not None
    if not call.run_id:
        return "a lease holder's call needs its run_id (its workflow, the lease table's scope)"
    if ctx.leases is None:
        return "this tools service has no lease table (it is not connected to NATS)"
    return ctx.leases, call.run_id, call.lease_holder


async def lease_refusal(ctx: ToolContext, path: str) -> dict[str, Any] | None:
    """The error result refusing a file tool's write of ``path``; None when the caller may write it."""
    tool = ctx.call.tool
    found = _table(ctx)
    if isinstance(found, str):
        return failure(tool, f"Cannot write {path}: file leases cannot be checked: {found}. Nothing was changed.")
    table, scope, holder = found
    rel = ctx.worktree.resolve(path).rel  # PathRefused is the caller's usual error
    try:
        leases = await table.leases(scope)
    except Exception as exc:  # fail closed: an unchecked write could clobber another worker's files
        return failure(tool, f"Cannot write {path}: file leases cannot be checked ({exc}). Nothing was changed.")
    lease = blocking_lease(leases, holder, rel)
    if lease is not None:
        message = (
            f"Cannot write {rel}: it is leased by another worker, {describe_lease(lease)}. Nothing was changed. "
            "Work on your bead's own files, or report the conflict to the coordinator and wait for the release."
        )
        return failure(tool, message, lease=_lease_fields(lease))
    files = bead_scope(leases, holder)
    if in_scope(files, rel):
        return None
    return failure(tool, outside_scope_message(rel, files) + " Nothing was changed.", code=OUTSIDE_BEAD_SCOPE,
                   bead_id=_bead_of(leases, holder), bead_files=files)


def _bead_of(leases: list[LeaseView], holder: str) -> str | None:
    return next((lease.bead_id for lease in leases if lease.holder == holder and lease.origin == "coordinator"
                 and lease.bead_id), None)


def outside_scope_message(path: str, files: list[str]) -> str:
    """Why ``path`` may not be changed: the bead's files (its scope) are named, and the way to ask for more."""
    if not files:
        return (f"Cannot write {path}: you hold no bead's files (your bead's leases lapsed or were released), so "
                "nothing is in your scope.")
    return (f"Cannot write {path}: it is outside your bead's files ({', '.join(files)}). A bead's files are its "
            "scope; if the bead needs this file, ask the coordinator with request_scope (paths and why) and "
            "write it once the request is granted.")


@dataclass(frozen=True)
class _Content:
    """What was at a path: a regular file's bytes and mode, or a symlink's target."""

    data: bytes
    mode: int
    """``st_mode``: the file type (regular file or link) and its permission bits."""


@dataclass
class _Before:
    head: str
    files: dict[str, str] = field(default_factory=dict)
    """Path → content hash (``missing``: deleted) of every file that differed from HEAD."""
    copies: dict[str, _Content | None] = field(default_factory=dict)
    """Path → content (None: no file) of those files, as long as the total stayed under ``_KEEP_BYTES``."""


def _read(root: str, path: str) -> _Content | None:
    full = os.path.join(root, path)
    try:
        info = os.lstat(full)
        if stat.S_ISLNK(info.st_mode):
            return _Content(os.readlink(full).encode("utf-8", "surrogateescape"), info.st_mode)
        if not stat.S_ISREG(info.st_mode):
            return None
        with open(full, "rb") as handle:
            return _Content(handle.read(), info.st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return _Content(f"unreadable: {exc}".encode(), 0)


def _digest(content: _Content | None) -> str:
    if content is None:
        return "missing"
    return f"{content.mode:o}:" + hashlib.sha256(content.data).hexdigest()


def _snapshot(root: str, head: str, codes: dict[str, str]) -> _Before:
    before = _Before(head=head)
    kept = 0
    for path in codes:
        content = _read(root, path)
        before.files[path] = _digest(content)
        size = len(content.data) if content is not None else 0
        if kept + size <= _KEEP_BYTES:
            before.copies[path] = content
            kept += size
    return before


def _hashes(root: str, codes: dict[str, str]) -> dict[str, str]:
    return {path: _digest(_read(root, path)) for path in codes}


def _put_back(worktree: Worktree, path: str, content: _Content | None) -> None:
    """Make ``path`` hold ``content`` again (None: no file), never writing through a link the command made."""
    worktree.resolve(path)  # refuses a path that a command made lead outside the worktree
    full = os.path.join(worktree.root, path)
    if os.path.isdir(full) and not os.path.islink(full):
        raise IsADirectoryError(f"the command put a directory at {path}")
    if os.path.lexists(full):
        os.unlink(full)  # a link included: the link goes, its target is left alone
    if content is None:
        return
    os.makedirs(os.path.dirname(full) or worktree.root, exist_ok=True)
    if stat.S_ISLNK(content.mode):
        os.symlink(content.data, full)
        return
    worktree.write_bytes(worktree.resolve(path), content.data)
    os.chmod(full, stat.S_IMODE(content.mode) or 0o644)


class ShellLeaseGuard:
    """Snapshot before a lease holder's command; after it, put back what it changed of other holders' files."""

    def __init__(self, ctx: ToolContext, *, git: HostGit | str) -> None:
        """``git``: how to run git on the worktree (paths from the records), or why it cannot be run."""
        self.ctx = ctx
        self.git = git
        self._before: _Before | None = None

    async def before(self) -> str | None:
        """Take the snapshot; an error message (the command must not run) when it cannot be taken."""
        found = _table(self.ctx)
        if isinstance(found, str):
            return f"Command refused: file leases cannot be checked: {found}"
        root = self.ctx.worktree.root
        if isinstance(self.git, str):
            return f"Command refused: a lease holder's commands must run in a git worktree: {self.git}"
        try:
            head, codes = await changed_paths(self.git)
        except GitStateError as exc:
            return f"Command refused: a lease holder's commands must run in a git worktree: {exc}"
        self._before = await asyncio.to_thread(_snapshot, root, head, codes)
        return None

    async def after(self) -> dict[str, Any] | None:
        """Restore what the command changed of other holders' leased files; the error to report, if any."""
        assert self._before is not None
        table, scope, holder = cast("tuple[LeaseTable, str, str]", _table(self.ctx))  # before() found them
        root = self.ctx.worktree.root
        assert isinstance(self.git, HostGit)  # before() refused the command otherwise
        try:
            _, codes = await changed_paths(self.git)
            now = await asyncio.to_thread(_hashes, root, codes)
            leases = await table.leases(scope)
        except Exception as exc:
            return {"error": f"The command ran, but its changes could not be checked against file leases: {exc}"}
        before = self._before
        changed = sorted(p for p in before.files.keys() | now.keys() if before.files.get(p) != now.get(p))
        hits = [(path, lease) for path in changed if (lease := blocking_lease(leases, holder, path)) is not None]
        files = bead_scope(leases, holder)
        held = {path for path, _ in hits}
        outside = [path for path in changed if path not in held and not in_scope(files, path)]
        report: dict[str, Any] = {}
        if outside:
            report["outside_scope"] = await self._outside_scope(outside, files, _bead_of(leases, holder))
        if not hits:
            return report or None
        restored, kept = await self._restore([path for path, _ in hits])
        lines = [f"{path} ({describe_lease(lease)})" for path, lease in hits]
        message = "This command changed files leased by other workers: " + "; ".join(lines) + ". "
        if restored:
            message += "Restored to their state before the command: " + ", ".join(restored) + ". "
        if kept:
            message += "Could NOT be restored (report this to the coordinator): " + ", ".join(kept) + ". "
        message += "Your other changes stand. Work on your bead's own files only."
        return {
            "error": message,
            "lease_conflicts": [{"path": path, **_lease_fields(lease)} for path, lease in hits],
            "restored": restored,
            **report,
        }

    async def _outside_scope(self, paths: list[str], files: list[str], bead_id: str | None) -> dict[str, Any]:
        """Put back what the command changed outside the bead's files; the report for the call's result.

        Reported beside the command's own outcome, not as its failure: a verification command that leaves a
        cache file (``.pytest_cache``) outside the bead must still pass; the file is simply gone again."""
        restored, kept = await self._restore(paths)
        message = ("This command changed files outside your bead's files "
                   f"({', '.join(files) if files else 'none: you hold no bead files'}): {', '.join(paths)}. ")
        if restored:
            message += "Put back as they were before the command: " + ", ".join(restored) + ". "
        if kept:
            message += "Could NOT be put back (report this to the coordinator): " + ", ".join(kept) + ". "
        message += "If your bead needs such a file, ask with request_scope first."
        return {"code": OUTSIDE_BEAD_SCOPE, "message": message, "paths": paths, "restored": restored,
                "bead_id": bead_id, "bead_files": files}

    async def _restore(self, paths: list[str]) -> tuple[list[str], list[str]]:
        before = self._before
        assert before is not None
        restored: list[str] = []
        failed: list[str] = []
        for path in paths:
            try:
                if path in before.files:
                    if path not in before.copies:
                        failed.append(f"{path} (too large to keep a copy)")
                        continue
                    content = before.copies[path]
                else:
                    assert isinstance(self.git, HostGit)
                    blob = await head_blob(self.git, path)
                    content = None if blob is None else _Content(*blob)
                await asyncio.to_thread(_put_back, self.ctx.worktree, path, content)
                restored.append(path)
            except (OSError, PathRefused, GitStateError) as exc:
                failed.append(f"{path} ({exc})")
        return restored, failed
