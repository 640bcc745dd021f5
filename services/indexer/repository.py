"""Finding the git repository of a path, naming projects, git blob ids, and reading a commit's tree."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from autarch.runtime.git_admin import admin_dir_of, own_git_dir

from .errors import IndexerError

__all__ = [
    "RepoLocation",
    "blob_id",
    "iter_commit_files",
    "locate_project",
    "project_id_for",
    "read_blobs",
    "resolve_commit",
    "scope_id_for",
    "worktree_location",
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


def locate_project(path: str | Path) -> RepoLocation:
    """The checkout containing ``path`` whose ``.git`` is a real directory; raises ``not_a_repository``.

    A ``.git`` file (a linked worktree's) is never followed: an agent can rewrite it (docs/security.md). A
    worktree's git directories come from its project's repository instead (:func:`worktree_location`).
    """
    start = Path(path).expanduser()
    if not start.is_absolute():
        start = start.resolve()
    if not start.exists():
        raise IndexerError.not_a_repository(f"{start} does not exist", path=str(start))
    start = start.resolve()
    for candidate in (start, *start.parents):
        if own_git_dir(str(candidate)) is not None and (candidate / ".git" / "HEAD").is_file():
            return RepoLocation(root=candidate, git_dir=candidate / ".git", common_dir=candidate / ".git")
        if os.path.lexists(candidate / ".git"):
            # Not climbing on to a parent's repository, which would walk (and index) everything around this one.
            raise IndexerError.not_a_repository(
                f"{candidate} has a .git that is not a repository's own directory (a linked worktree's .git file is "
                "not trusted to name one): index the repository it belongs to, then the worktree with its project",
                path=str(candidate),
            )
    raise IndexerError.not_a_repository(f"{start} is not inside a git repository", path=str(start))


def worktree_location(project: RepoLocation, worktree: str | Path) -> RepoLocation:
    """Where the worktree ``worktree`` of ``project`` keeps its repository, from the project's own git directory.

    Raises ``not_a_repository`` when ``worktree`` does not exist, ``bad_request`` when the project's repository
    has no such worktree. The worktree's ``.git`` file is never read: whatever an agent wrote there, the
    repository's ``worktrees/*/gitdir`` records decide.
    """
    real = Path(os.path.realpath(worktree))
    if not real.is_dir():
        raise IndexerError.not_a_repository(f"{real} does not exist", path=str(real))
    if real == project.root:
        return project
    admin = admin_dir_of(str(project.common_dir), str(real))
    if admin is None:
        raise IndexerError.bad_request(
            f"{real} is not a worktree of {project.root} (its repository records no such worktree)",
            worktree=str(real),
        )
    return RepoLocation(root=real, git_dir=Path(admin), common_dir=project.common_dir)


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
