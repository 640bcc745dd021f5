"""Finding the git repository of a path, naming projects, git blob ids, and reading a commit's tree."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from autarch.runtime.ignore import linked_git_dirs

from .errors import IndexerError

__all__ = [
    "RepoLocation",
    "blob_id",
    "iter_commit_files",
    "locate_repository",
    "project_id_for",
    "read_blobs",
    "resolve_commit",
    "scope_id_for",
]

_SUBMODULE_MODE = 0o160000
_SYMLINK_MODE = 0o120000


@dataclass(frozen=True)
class RepoLocation:
    """Where a path's repository is."""

    root: Path
    """Top of the working tree (the directory holding ``.git``)."""
    git_dir: Path
    """The repository's own git directory (for a linked worktree: ``.git/worktrees/<name>``)."""
    common_dir: Path
    """The git directory shared by the main checkout and its linked worktrees."""

    @property
    def is_linked_worktree(self) -> bool:
        return self.git_dir != self.common_dir

    @property
    def main_root(self) -> Path:
        """Working tree of the main checkout (the project a linked worktree belongs to)."""
        return self.common_dir.parent if self.common_dir.name == ".git" else self.common_dir


def blob_id(content: bytes) -> str:
    """The git blob id of ``content`` (what ``git hash-object`` prints)."""
    digest = hashlib.sha1(b"blob %d\0" % len(content))
    digest.update(content)
    return digest.hexdigest()


def locate_repository(path: str | Path) -> RepoLocation:
    """The repository containing ``path``; raises ``not_a_repository`` when there is none."""
    start = Path(path).expanduser()
    if not start.is_absolute():
        start = start.resolve()
    if not start.exists():
        raise IndexerError.not_a_repository(f"{start} does not exist", path=str(start))
    start = start.resolve()
    for candidate in (start, *start.parents):
        dotgit = candidate / ".git"
        if dotgit.is_dir() and not dotgit.is_symlink() and (dotgit / "HEAD").is_file():
            return RepoLocation(root=candidate, git_dir=dotgit, common_dir=dotgit)
        if os.path.lexists(dotgit):
            # A worktree's .git is the agent's to rewrite (docs/security.md): believed only when the directory it
            # names names it back and lies outside it. Anything else here is no repository — and the search does
            # not climb on to a parent's, which would walk (and index) everything around the worktree.
            linked = linked_git_dirs(str(candidate))
            if linked is None:
                raise IndexerError.not_a_repository(
                    f"{candidate} has a .git that names no repository git would accept", path=str(candidate)
                )
            return RepoLocation(root=candidate, git_dir=Path(linked[0]), common_dir=Path(linked[1]))
    raise IndexerError.not_a_repository(f"{start} is not inside a git repository", path=str(start))


def project_id_for(root: Path) -> str:
    """A stable, subject-safe project id: the folder name plus a hash of the absolute path."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", root.name.lower()).strip("-_")[:40] or "repo"
    digest = hashlib.sha1(str(root).encode()).hexdigest()[:12]
    return f"{slug}-{digest}"


def scope_id_for(worktree_root: Path) -> str:
    """Scope id of a worktree's index."""
    return "wt-" + hashlib.sha1(str(worktree_root).encode()).hexdigest()[:16]


def iter_commit_files(location: RepoLocation, commit: str) -> Iterator[tuple[str, str]]:
    """``(path, blob id)`` of every regular file in ``commit``'s tree (submodules and symlinks skipped).

    Raises ``unknown_commit`` when ``commit`` does not resolve.
    """
    from dulwich.objectspec import parse_commit
    from dulwich.repo import Repo

    repo = Repo(str(location.root))
    try:
        try:
            resolved = parse_commit(repo, commit.encode())
        except (KeyError, ValueError) as exc:
            raise IndexerError.unknown_commit(f"{commit!r} is not a commit of {location.root}", commit=commit) from exc
        for entry in repo.object_store.iter_tree_contents(resolved.tree):
            if entry.mode in (_SUBMODULE_MODE, _SYMLINK_MODE) or not (entry.mode & 0o100000):
                continue
            sha = entry.sha.decode()
            yield entry.path.decode("utf-8", "surrogateescape"), sha
    finally:
        repo.close()


def resolve_commit(location: RepoLocation, commit: str) -> str:
    """The full sha of ``commit``; raises ``unknown_commit``."""
    from dulwich.objectspec import parse_commit
    from dulwich.repo import Repo

    with Repo(str(location.root)) as repo:
        try:
            return parse_commit(repo, commit.encode()).id.decode()
        except (KeyError, ValueError) as exc:
            raise IndexerError.unknown_commit(f"{commit!r} is not a commit of {location.root}", commit=commit) from exc


def read_blobs(location: RepoLocation, blob_ids: list[str]) -> Iterator[tuple[str, bytes]]:
    """``(blob id, content)`` for each id, from the repository's object store."""
    from dulwich.repo import Repo

    with Repo(str(location.root)) as repo:
        store = repo.object_store
        for sha in blob_ids:
            yield sha, store[sha.encode()].as_raw_string()  # type: ignore[index]  # a hex sha (ObjectID is new in dulwich)
