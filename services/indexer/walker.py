"""Which files of a tree get indexed: ``.gitignore``/``.autarchignore`` honoured, binaries and huge files skipped."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

from autarch.runtime.ignore import IGNORE_FILES, IgnoreFile
from autarch.runtime.walk import walk
from autarch.runtime.worktree_files import FileTooLarge, read_regular

from .repository import RepoLocation, blob_id

__all__ = [
    "DEFAULT_EXCLUDES",
    "DEFAULT_MAX_FILE_BYTES",
    "IGNORE_FILES",
    "IgnoreRules",
    "SourceFile",
    "StatCache",
    "WalkResult",
    "decode_source",
    "skip_reason",
    "walk_worktree",
]

DEFAULT_MAX_FILE_BYTES = 1_000_000
"""Files larger than this are generated data far more often than code a person wrote."""

DEFAULT_EXCLUDES = (
    # Dependency and tool caches that are huge when a repository forgot to ignore them.
    "node_modules/",
    "__pycache__/",
    ".venv/",
    ".tox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    "*.pyc",
    "*.min.js",
    "*.map",
    "package-lock.json",
    ".DS_Store",
    # Secrets never belong in an index whose snippets are shown to a model (DESIGN: sensitivity gate).
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_ed25519*",
    ".netrc",
)
"""Ignored unless a ``.gitignore`` or ``.autarchignore`` re-includes them with ``!pattern``."""

# IGNORE_FILES (from the shared engine) are read in every directory; in one directory
# ``.autarchignore`` wins over ``.gitignore``.


@dataclass(frozen=True)
class SourceFile:
    path: str
    """Path relative to the tree's root, with ``/`` separators."""
    blob_id: str
    content: bytes | None = None
    """The file's bytes when read; ``None`` for blobs read later from git, or unchanged since the last walk."""
    disk_path: str | None = None
    """Where to read the bytes again when ``content`` is ``None`` and they turn out to be needed."""


StatCache = dict[str, tuple[int, int, str | None]]
"""path -> (mtime ns, size, blob id or ``None`` when skipped): lets a re-walk read only changed files."""


@dataclass
class WalkResult:
    files: list[SourceFile] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    """Files left out, by reason: ``ignored``, ``binary``, ``too_large``, ``minified``, ``symlink``, ``unreadable``,
    ``not_a_file`` (FIFOs, sockets, devices), ``undecodable_name`` (a name that is not UTF-8)."""


class IgnoreRules:
    """Git's ignore semantics over nested ignore files: the deepest file with a matching pattern decides.

    The rules are those of :mod:`autarch.runtime.ignore` (the one engine the tools and git services
    use too); each call decides about the entry itself, so callers skip ignored directories' contents.
    """

    def __init__(self, *, root_lines: Iterable[str] = ()) -> None:
        self._files: dict[str, list[IgnoreFile]] = {}
        self._base = IgnoreFile([*DEFAULT_EXCLUDES, *root_lines])

    def add_directory(self, rel_dir: str, files: dict[str, str]) -> None:
        """Register the ignore files (name -> text) found in ``rel_dir`` ('' for the root)."""
        found = []
        for name in IGNORE_FILES:
            text = files.get(name)
            if text and (rules := IgnoreFile(text)):
                found.append(rules)
        if found:
            self._files[rel_dir] = found

    def is_ignored(self, rel_path: str, *, is_dir: bool = False) -> bool:
        parts = rel_path.split("/")
        # Deepest directory first; within one directory the last ignore file (.autarchignore) first.
        for depth in range(len(parts) - 1, -1, -1):
            found = self._files.get("/".join(parts[:depth]))
            if not found:
                continue
            sub = "/".join(parts[depth:])
            for rules in reversed(found):
                decision = rules.decide(sub, is_dir=is_dir)
                if decision is not None:
                    return decision
        return self._base.decide(rel_path, is_dir=is_dir) is True


def skip_reason(content: bytes, *, max_file_bytes: int) -> str | None:
    """Why a file's content is not indexed, or ``None`` when it is."""
    if len(content) > max_file_bytes:
        return "too_large"
    if b"\0" in content[:8192]:
        return "binary"
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"
    # Minified or generated one-liners: huge lines carry no structure and drown BM25.
    if len(content) > 20_000 and content.count(b"\n") < len(content) // 2000:
        return "minified"
    return None


def decode_source(content: bytes) -> str:
    """Text of an indexed file (already checked to be UTF-8)."""
    return content.decode("utf-8", errors="replace")


def walk_worktree(
    location: RepoLocation,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    on_file: Callable[[int], None] | None = None,
    stat_cache: StatCache | None = None,
) -> WalkResult:
    """Every indexable file under ``location.root`` with its blob id and content.

    The walk is the tools' (:func:`autarch.runtime.walk.walk`: the same ignore rules, ``info/exclude``, no
    symlink followed), with :data:`DEFAULT_EXCLUDES` below the repository's own rules and nested repositories
    (submodules) left out; ``on_file`` gets the running count. With ``stat_cache``, a file whose mtime and size
    did not change is not read again (its content is ``None``); the cache is updated in place.
    """
    root = str(location.root)
    result = WalkResult()

    def skipped(_rel: str, why: str) -> None:
        if why != "nested_repository":
            result.skipped[why] += 1

    # The repository's info/exclude comes from the location (records), never from the worktree's .git file.
    for entry in walk(root, include_dirs=False, default_excludes=DEFAULT_EXCLUDES, skip_nested_repositories=True,
                      on_skip=skipped, common_dir=str(location.common_dir)):
        rel = entry.path
        full = Path(root, rel)
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            # Not UTF-8 (the walk's str carries the bytes as surrogates): no store, reply or snippet can hold it.
            result.skipped["undecodable_name"] += 1
            continue
        try:
            stat = full.lstat()
            if not S_ISREG(stat.st_mode):
                result.skipped["not_a_file"] += 1  # a FIFO would block the read forever; sockets, devices
                continue
            if stat.st_size > max_file_bytes:
                result.skipped["too_large"] += 1
                continue
            key = (stat.st_mtime_ns, stat.st_size)
            cached = stat_cache.get(rel) if stat_cache is not None else None
            if cached is not None and cached[:2] == key:
                if cached[2] is None:
                    result.skipped["unchanged_skip"] += 1
                else:
                    result.files.append(SourceFile(path=rel, blob_id=cached[2], disk_path=str(full)))
                continue
            # Not followed, not a FIFO, never more than the cap: the name may have changed since the lstat.
            content = read_regular(str(full), max_bytes=max_file_bytes)
        except FileTooLarge:
            result.skipped["too_large"] += 1
            continue
        except OSError:
            result.skipped["unreadable"] += 1
            continue
        reason = skip_reason(content, max_file_bytes=max_file_bytes)
        if reason:
            result.skipped[reason] += 1
            if stat_cache is not None:
                stat_cache[rel] = (*key, None)
            continue
        blob = blob_id(content)
        if stat_cache is not None:
            stat_cache[rel] = (*key, blob)
        result.files.append(SourceFile(path=rel, blob_id=blob, content=content, disk_path=str(full)))
        if on_file is not None:
            on_file(len(result.files))
    return result
