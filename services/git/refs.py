"""Branch names and compare-and-swap branch updates.

Every branch move is a compare-and-swap on the value read under the repository lock, so a
step retried after a crash either finds the branch already where it should be (done) or where
it was (do it now), never somewhere in between. Reflog lines are written as git writes them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from dulwich.refs import check_ref_format
from dulwich.repo import Repo

from .dulwich_ids import oid, ref_name

__all__ = [
    "HEADS",
    "BranchNameError",
    "RefConflict",
    "branch_ref",
    "break_ref_lock",
    "clashing_ref",
    "create_branch",
    "delete_branch",
    "move_branch",
    "pulse_branch_name",
    "read_branch",
    "validate_branch_name",
]

HEADS = b"refs/heads/"


def break_ref_lock(repo: Repo, ref: bytes) -> None:
    """Remove ``<ref>.lock``: only for a ref this service writes, under the repository's ``flock`` (a lock file
    found then is a writer's that was killed mid-write, and would refuse every later write: ``FileLocked``)."""
    try:
        os.unlink(repo.refs.refpath(ref) + b".lock")  # type: ignore[attr-defined]  # a Repo on disk: DiskRefsContainer
    except FileNotFoundError:
        pass
PULSE_SEPARATOR = ".pulse-"
"""Pulse branches are ``<workflow branch>.pulse-<id>``: git refuses ``x/pulse-1`` beside a branch ``x``."""


class BranchNameError(ValueError):
    """The name is not a legal branch name; the message says which rule it breaks."""


class RefConflict(RuntimeError):
    """A compare-and-swap found the branch elsewhere than expected."""


def validate_branch_name(name: str) -> None:
    """Check ``name`` against the rules of ``git check-ref-format --branch``."""
    if not name:
        raise BranchNameError("a branch name cannot be empty")
    if name.startswith("-"):
        raise BranchNameError(f"{name!r}: a branch name cannot start with '-'")
    if name == "HEAD":
        raise BranchNameError("'HEAD' is not a valid branch name")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise BranchNameError(f"{name!r}: not valid UTF-8") from None
    if not check_ref_format(ref_name(HEADS + encoded)):
        raise BranchNameError(f"{name!r}: {_why_illegal(name)}")


def _why_illegal(name: str) -> str:
    if ".." in name:
        return "'..' is not allowed"
    if "@{" in name or name == "@":
        return "'@{' and a lone '@' are not allowed"
    bad = sorted({c for c in name if ord(c) < 0o40 or ord(c) == 0o177 or c in " ~^:?*[\\"})
    if bad:
        return f"characters {''.join(bad)!r} are not allowed"
    if name.endswith(("/", ".")):
        return "it cannot end with '/' or '.'"
    for part in name.split("/"):
        if not part:
            return "it cannot contain empty components ('//' or a leading '/')"
        if part.startswith("."):
            return f"component {part!r} cannot start with '.'"
        if part.endswith(".lock"):
            return f"component {part!r} cannot end with '.lock'"
    return "not a legal git ref name"


def pulse_branch_name(workflow_branch: str, pulse_id: str) -> str:
    """The branch a pulse runs on."""
    return f"{workflow_branch}{PULSE_SEPARATOR}{pulse_id}"


def branch_ref(name: str) -> bytes:
    return HEADS + name.encode("utf-8")


def read_branch(repo: Repo, ref: bytes) -> bytes | None:
    """Hex commit id of ``ref``, or None when it does not exist."""
    try:
        return repo.refs[ref_name(ref)]
    except KeyError:
        return None


def clashing_ref(repo: Repo, ref: bytes) -> bytes | None:
    """An existing ref that prevents creating ``ref``: itself, a parent (``a`` for ``a/b``) or a child."""
    if read_branch(repo, ref) is not None:
        return ref
    parent = ref.rpartition(b"/")[0]
    while parent.count(b"/") >= 2:  # stop at refs/heads
        if read_branch(repo, parent) is not None:
            return parent
        parent = parent.rpartition(b"/")[0]
    children = repo.refs.keys(base=ref_name(ref + b"/"))
    if children:
        return ref + b"/" + sorted(children)[0]
    if os.path.isdir(os.path.join(repo.commondir(), os.fsdecode(ref))):
        return ref + b"/"  # an empty ref directory still makes git refuse the name
    return None


def _identity(committer: bytes) -> dict[str, Any]:
    return {"committer": committer, "timestamp": int(time.time()), "timezone": time.localtime().tm_gmtoff}


def create_branch(repo: Repo, ref: bytes, commit: bytes, *, committer: bytes, message: bytes) -> bool:
    """Create ``ref`` at ``commit`` unless it exists; True when created."""
    return repo.refs.add_if_new(ref_name(ref), oid(commit), message=message, **_identity(committer))


def move_branch(repo: Repo, ref: bytes, *, old: bytes | None, new: bytes, committer: bytes, message: bytes) -> None:
    """Move ``ref`` from ``old`` (None: must not exist) to ``new``; a no-op when already at ``new``.

    Raises :class:`RefConflict` when ``ref`` is neither at ``old`` nor at ``new``.
    """
    current = read_branch(repo, ref)
    if current == new:
        return
    if current != old:
        raise RefConflict(f"{ref.decode()} is at {_short(current)}, expected {_short(old)}")
    if old is None:
        ok = create_branch(repo, ref, new, committer=committer, message=message)
    else:
        ok = repo.refs.set_if_equals(ref_name(ref), oid(old), oid(new), message=message, **_identity(committer))
    if not ok:
        raise RefConflict(f"{ref.decode()} moved while it was being updated")


def delete_branch(repo: Repo, ref: bytes, *, expected: bytes | None = None) -> bool:
    """Delete ``ref`` (only if it is at ``expected``, when given) and its reflog; True when deleted."""
    current = read_branch(repo, ref)
    if current is None:
        _remove_reflog(repo, ref)
        return False
    if expected is not None and current != expected:
        raise RefConflict(f"{ref.decode()} is at {_short(current)}, expected {_short(expected)}")
    # No message: git drops a deleted branch's reflog rather than logging the deletion.
    if not repo.refs.remove_if_equals(ref_name(ref), oid(current)):
        raise RefConflict(f"{ref.decode()} moved while it was being deleted")
    _remove_reflog(repo, ref)
    return True


def _remove_reflog(repo: Repo, ref: bytes) -> None:
    logs = Path(repo.commondir()) / "logs"
    path = logs / os.fsdecode(ref)
    path.unlink(missing_ok=True)
    parent = path.parent
    while parent not in (logs, logs / "refs", logs / "refs" / "heads"):
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


def _short(sha: bytes | None) -> str:
    return sha[:10].decode() if sha else "nothing"
