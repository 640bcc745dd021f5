"""What a workflow may be created on, checked at the door so nothing doomed is ever recorded.

A workflow on a directory that is not a git work tree, on ``/``, on a missing base branch or with an
invalid branch name can only fail at execution, after three paid agent stages and three approvals.
Each rule here answers 400 ``bad_request`` naming the field before the orchestrator is asked.

The repository is read from its files (``.git``, refs, ``packed-refs``), not through a git binary or
library: the gateway's image carries neither.
"""

from __future__ import annotations

import re
from pathlib import Path

from autarch.runtime.errors import RemoteError

from .params import bad_request

__all__ = ["MAX_SEQUENCE", "branch_name_problem", "check_resume_point", "check_workflow_target", "parse_sequence"]

MAX_SEQUENCE = 2**63 - 1
"""The largest stream sequence a client may resume after (JetStream sequences fit in 63 bits in practice;
beyond, ``after + 1`` would overflow the server's unsigned 64-bit start sequence and the stream would be dead)."""

_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
"""Characters git's ref-format rules refuse anywhere in a ref name (controls, space, ``~^:?*[\\``)."""


def branch_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid branch name (``git check-ref-format --branch``), or None when it is.

    Also refused: ``HEAD`` and names under ``refs/`` (they would create ``refs/heads/refs/...``, never what
    was meant), and a leading ``-`` (it would be read as an option by any git command line).
    """
    if not name:
        return "is empty"
    if name.startswith("-"):
        return "starts with '-'"
    if name == "HEAD" or name == "@":
        return f"is {name!r}"
    if name.startswith("refs/"):
        return "starts with 'refs/' (give the short name: the branch goes under refs/heads/)"
    bad = _REF_FORBIDDEN.search(name)
    if bad:
        return f"contains {bad.group()!r} (control characters, space, ~ ^ : ? * [ \\ are not allowed)"
    if ".." in name:
        return "contains '..'"
    if "@{" in name:
        return "contains '@{'"
    if name.startswith("/") or name.endswith("/") or "//" in name:
        return "has an empty path component ('/' at an end or '//')"
    if name.endswith("."):
        return "ends with '.'"
    for part in name.split("/"):
        if part.startswith("."):
            return f"has a component starting with '.' ({part!r})"
        if part.endswith(".lock"):
            return f"has a component ending with '.lock' ({part!r})"
    return None


def _git_dirs(repo: Path) -> tuple[Path, Path] | None:
    """(git dir, common dir) of the work tree at ``repo``, or None when it is not the top of one."""
    dot_git = repo / ".git"
    if dot_git.is_dir():
        git_dir = dot_git
    elif dot_git.is_file():
        # A linked worktree or submodule: ``.git`` is a file naming the real git dir.
        text = dot_git.read_text(errors="replace").strip()
        if not text.startswith("gitdir:"):
            return None
        git_dir = (repo / text.removeprefix("gitdir:").strip()).resolve()
    else:
        return None
    common = git_dir
    commondir = git_dir / "commondir"
    if commondir.is_file():
        common = (git_dir / commondir.read_text(errors="replace").strip()).resolve()
    if not (common / "refs").is_dir() and not (common / "packed-refs").is_file():
        return None
    return git_dir, common


def _branches(common: Path) -> set[str]:
    """Every branch of the repository whose common git dir is ``common`` (loose and packed refs)."""
    found: set[str] = set()
    heads = common / "refs" / "heads"
    if heads.is_dir():
        found.update(p.relative_to(heads).as_posix() for p in heads.rglob("*") if p.is_file())
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(errors="replace").splitlines():
            sha, _, ref = line.partition(" ")
            if ref.startswith("refs/heads/") and len(sha) >= 40:
                found.add(ref.removeprefix("refs/heads/"))
    return found


def check_workflow_target(repo: Path, *, given: str, base_branch: str, branch: str | None,
                          data_dir: Path) -> None:
    """Raise a 400 unless a workflow can run on ``repo`` from ``base_branch`` into ``branch``.

    Args:
        repo: the resolved (absolute, symlink-free) directory.
        given: the path as the client wrote it (for the message).
        base_branch: the branch the workflow starts from; it must exist.
        branch: the workflow branch to create, if chosen: a valid name, not the base.
        data_dir: Autarch's data dir (worktrees, event stores, the token), never a workflow's repository.
    """
    if repo == Path(repo.anchor):
        raise bad_request(f"repo {given!r} is the filesystem root; give a git repository", field="repo")
    data = data_dir.expanduser().resolve()
    if repo == data or repo.is_relative_to(data):
        raise bad_request(f"repo {given!r} is inside Autarch's data dir {data}", field="repo")
    dirs = _git_dirs(repo)
    if dirs is None:
        raise bad_request(f"repo {given!r} is not the top of a git work tree (no .git in {repo})", field="repo")
    branches = _branches(dirs[1])
    if not branches:
        raise bad_request(f"repo {given!r} has no commits; commit something first", field="repo")
    for field, name in (("base_branch", base_branch), ("branch", branch)):
        if name is None:
            continue
        problem = branch_name_problem(name)
        if problem:
            raise bad_request(f"{field} {name!r} is not a valid branch name: it {problem}", field=field)
    if base_branch not in branches:
        raise bad_request(f"base_branch {base_branch!r} does not exist in {repo}", field="base_branch",
                          branches=sorted(branches)[:50])
    if branch is not None and branch == base_branch:
        raise bad_request(f"branch {branch!r} is the base branch; the workflow needs a branch of its own",
                          field="branch")


def parse_sequence(value: str, *, field: str) -> int:
    """``value`` as a stream sequence: ASCII digits only, at most :data:`MAX_SEQUENCE`; else a 400."""
    # str.isdigit() accepts '²' and other Unicode digits that int() then refuses: ASCII only.
    if not (value.isascii() and value.isdigit()) or len(value) > 19 or int(value) > MAX_SEQUENCE:
        raise _bad_sequence(value, field)
    return int(value)


def check_resume_point(after: int, *, last: int, field: str) -> None:
    """A 400 unless ``after`` is within the stream (0 to its ``last`` sequence).

    A sequence past the last one names no event anyone saw: the stream would stay silent until the
    stream caught up, and an EventSource client would reconnect to it forever.
    """
    if after > last:
        raise bad_request(f"{field} {after} is past the stream's last sequence {last}; resume from an id the "
                          f"stream sent (0: from the start)", field=field, last_sequence=last)


def _bad_sequence(value: str, field: str) -> RemoteError:
    return bad_request(f"{field} must be a stream sequence (decimal digits, 0 to {MAX_SEQUENCE}), got {value!r}",
                       field=field)
