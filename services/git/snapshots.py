"""What a worktree holds right now, computed like ``git add -A`` against its index.

One directory walk does it: a tracked file whose stat data matches its index entry (and is
not racily clean) is taken as unchanged without reading it, anything else is hashed. Only
directories holding tracked files are always entered; an untracked directory is skipped when
ignored, so ``node_modules`` costs one ignore check. Nothing is written: the caller decides
what to store.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autarch.contracts.git import GitErrorCode
from autarch.runtime.worktree_files import FileTooLarge, NotRegularFile, read_regular

from .index_file import EXT_SKIP_WORKTREE, IndexContents, IndexEntry, entry_from_stat
from .trees import MODE_GITLINK, MODE_SYMLINK, Leaf
from .workspace import fail

__all__ = ["DEFAULT_MAX_FILE_BYTES", "Snapshot", "blob_id", "leaves", "scan_worktree", "untrackable"]

DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024
"""The largest file a snapshot reads (``git_max_file_bytes``): a bigger one is ``file_too_large``."""

MAX_DEPTH = 500
"""Directories a committed path may nest: the tree code recurses once per level, and no source tree needs more."""

# Special files git refuses as symbolic links (a link would make git read them from outside the tree).
_NO_LINKS = (b".gitmodules", b".gitattributes", b".gitignore", b".mailmap")

_MAYBE_GIT = frozenset(b".gG")
"""First bytes of every name :func:`untrackable` refuses without a link (``.git``, ``git~1``, in any case)."""

_NS = 1_000_000_000
_U32 = 0xFFFFFFFF

IgnoreCheck = Callable[[str], bool]
"""Whether a worktree-relative path (``dir/`` for directories) is ignored."""


@dataclass
class Snapshot:
    """The index as it would be after ``git add`` (tracked only, or ``-A``)."""

    entries: dict[bytes, IndexEntry]
    """Path → entry, with fresh stat data for every file that was hashed."""
    blobs: dict[bytes, bytes] = field(default_factory=dict)
    """Raw id → content of every file whose content differs from its index entry (when kept)."""
    changed: set[bytes] = field(default_factory=set)
    """Paths whose content or mode differs from the index (added, modified, removed)."""
    refreshed: bool = False
    """Some entry's stat data changed: the index on disk is stale even if no content did."""
    index: IndexContents | None = None
    """The index the snapshot was taken against (its unchanged entries are written back as read)."""
    tracked_dirs: set[bytes] = field(default_factory=set)
    """The directories (worktree-relative, the top left out) that held a file of ``index``."""


def blob_id(data: bytes) -> bytes:
    """Raw git object id of a blob holding ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).digest()


def untrackable(name: bytes, *, is_link: bool = False) -> bool:
    """A name git refuses to track: ``.git`` in any case (or as NTFS spells it), a linked ``.gitmodules`` & co.

    An agent can make ``.GIT/config`` or ``.Git/hooks/…``; committed, they would become a repository's own files
    on a case-insensitive checkout (git's ``verify_path`` refuses them on every platform, and so do we).
    """
    folded = name.lower().rstrip(b". ")
    if folded == b".git" or folded == b"git~1":
        return True
    return is_link and folded in _NO_LINKS


def leaves(entries: dict[bytes, IndexEntry]) -> dict[bytes, Leaf]:
    """The (mode, id) view of index entries that trees are built from."""
    return {path: (e.mode, e.sha) for path, e in entries.items()}


def scan_worktree(
    root: Path,
    index: IndexContents,
    *,
    include_untracked: bool,
    is_ignored: IgnoreCheck | None = None,
    keep_blobs: bool = False,
    filemode: bool = True,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> Snapshot:
    """Compare the files under ``root`` with ``index`` and return the resulting snapshot.

    Args:
        root: The worktree's top directory.
        index: Its index as read.
        include_untracked: Add files not in the index unless ignored (``git add -A``).
        is_ignored: The ignore rules; required with ``include_untracked``.
        keep_blobs: Keep the content of changed files so the caller can store them.
        filemode: Honour the executable bit (``core.fileMode``).
        max_file_bytes: A file to hash that is larger fails the scan with ``file_too_large``.

    Links are recorded as links (their target is never read), FIFOs, sockets and devices are left out, and
    nothing is opened but with ``O_NOFOLLOW | O_NONBLOCK`` (``runtime.worktree_files``).
    """
    scan = _Scan(
        root=os.fsencode(root),
        index=index,
        include_untracked=include_untracked,
        is_ignored=is_ignored or (lambda _path: False),
        keep_blobs=keep_blobs,
        filemode=filemode,
        max_file_bytes=max_file_bytes,
    )
    # Directories waiting to be listed: a loop, not recursion, so no nesting depth exhausts the stack.
    pending = [b""]
    while pending:
        scan.walk(pending.pop(), pending)
    return scan.finish()


class _Scan:
    def __init__(
        self,
        *,
        root: bytes,
        index: IndexContents,
        include_untracked: bool,
        is_ignored: IgnoreCheck,
        keep_blobs: bool,
        filemode: bool,
        max_file_bytes: int,
    ) -> None:
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.old = index.entries
        self.racy_after = index.mtime
        self.include_untracked = include_untracked
        self.is_ignored = is_ignored
        self.keep_blobs = keep_blobs
        self.filemode = filemode
        self.entries: dict[bytes, IndexEntry] = dict(index.entries)
        self.seen: set[bytes] = set()
        self.snapshot = Snapshot(entries=self.entries, index=index)
        # Unmerged paths count as changed: their worktree file is the resolution.
        self.unmerged = index.conflicted
        # Each file's directory first (a set comprehension over 10,000 paths), then the ancestors of
        # the few distinct directories.
        parents = {path.rpartition(b"/")[0] for path in self.old}
        parents.update(path.rpartition(b"/")[0] for path in index.conflicted)
        self.tracked_dirs: set[bytes] = set()
        for directory in parents:
            while directory and directory not in self.tracked_dirs:
                self.tracked_dirs.add(directory)
                directory = directory.rpartition(b"/")[0]
        self.snapshot.tracked_dirs = self.tracked_dirs

    def walk(self, prefix: bytes, pending: list[bytes]) -> None:
        try:
            listing = os.scandir(self.root + b"/" + prefix if prefix else self.root)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            # git add would skip the directory with a warning, and its tracked files would look deleted.
            raise _unreadable(prefix, exc) from None
        # The hot loop of a checkpoint (one pass per tracked file): locals, no helper calls
        # for the common case of an unchanged regular file.
        old_get = self.old.get
        seen_add = self.seen.add
        racy_s, racy_ns = self.racy_after
        filemode = self.filemode
        with listing:
            for item in listing:
                name = item.name
                # Only a name starting "." or "g"/"G" can fold to .git or git~1: one byte test spares the
                # call for nearly every file.
                if name[0] in _MAYBE_GIT and untrackable(name):
                    continue  # the worktree's link file, a nested repository's directory, or .GIT and kin
                path = prefix + name
                entry = old_get(path)
                if item.is_dir(follow_symlinks=False):
                    if entry is not None and entry.mode == MODE_GITLINK:
                        seen_add(path)  # a submodule: its recorded commit is kept as is
                    elif path.count(b"/") >= MAX_DEPTH:
                        raise fail(
                            GitErrorCode.PATH_TOO_DEEP,
                            f"{_shown(path)[:200]}… nests more than {MAX_DEPTH} directories: remove or ignore it",
                            path=_shown(path)[:1000],
                            limit=MAX_DEPTH,
                        )
                    elif path in self.tracked_dirs:
                        pending.append(path + b"/")
                    elif self.include_untracked:
                        self._walk_untracked_dir(path, item.path, pending)
                    continue
                if entry is None:
                    if name in _NO_LINKS and item.is_symlink():
                        continue  # git refuses a linked .gitmodules, .gitattributes, .gitignore
                    if path in self.unmerged or (
                        self.include_untracked and not self.is_ignored(os.fsdecode(path))
                    ):
                        self._add(path, item, None)
                    continue
                seen_add(path)
                if name in _NO_LINKS and item.is_symlink():
                    continue  # a tracked .gitignore & co. replaced by a link: left as is, never followed
                # One unpacking instead of a named-field lookup per comparison (a third of the cost).
                e_cs, e_cn, e_ms, e_mn, _dev, e_ino, e_mode, _uid, _gid, e_size, _sha, e_ext = entry
                if e_ext:
                    if e_ext & EXT_SKIP_WORKTREE:
                        continue
                    self._add(path, item, entry)  # intent-to-add: nothing staged yet
                    continue
                st = item.stat(follow_symlinks=False)
                st_mode = st.st_mode
                if filemode and st_mode & 0o170000 == 0o100000:
                    mode = 0o100755 if st_mode & 0o100 else 0o100644
                else:
                    mode = self._mode(st, entry)  # type: ignore[assignment]  # None: handled just below
                    if mode is None:
                        continue  # no longer a file git can track; left as is
                # Cheapest and most telling comparisons first; scalars only (no tuples to build).
                mtime_ns = st.st_mtime_ns
                ctime_ns = st.st_ctime_ns
                if (
                    e_size == st.st_size & _U32
                    and e_mn == mtime_ns % _NS
                    and e_mode == mode
                    and e_ms == (mtime_ns // _NS) & _U32
                    and e_cn == ctime_ns % _NS
                    and e_cs == (ctime_ns // _NS) & _U32
                    and e_ino == st.st_ino & _U32
                    # Racily clean: written in the same clock tick as the index, the stat data
                    # cannot tell a later same-size write apart, so the content is checked.
                    and (e_ms < racy_s or (e_ms == racy_s and e_mn < racy_ns))
                ):
                    continue
                self._add(path, item, entry, st=st, mode=mode)

    def _walk_untracked_dir(self, path: bytes, abs_path: bytes, pending: list[bytes]) -> None:
        if self.is_ignored(os.fsdecode(path) + "/"):
            return
        if os.path.lexists(abs_path + b"/.git"):
            return  # an embedded repository: git add -A would refuse it too (without --force)
        pending.append(path + b"/")

    def _mode(self, st: os.stat_result, entry: IndexEntry | None) -> int | None:
        if stat_mod.S_ISLNK(st.st_mode):
            return MODE_SYMLINK
        if not stat_mod.S_ISREG(st.st_mode):
            return None  # fifos, sockets, devices: git does not track them
        if not self.filemode:
            return entry.mode if entry is not None and entry.mode != MODE_SYMLINK else 0o100644
        return 0o100755 if st.st_mode & 0o100 else 0o100644

    def _add(
        self,
        path: bytes,
        item: os.DirEntry[bytes],
        entry: IndexEntry | None,
        *,
        st: os.stat_result | None = None,
        mode: int | None = None,
    ) -> None:
        if st is None:
            st = item.stat(follow_symlinks=False)
            mode = self._mode(st, entry)
            if mode is None:
                return
        assert mode is not None
        try:
            if mode == MODE_SYMLINK:
                data = os.readlink(item.path)
            else:
                data = read_regular(item.path, max_bytes=self.max_file_bytes)
        except (FileNotFoundError, NotRegularFile):
            return  # vanished, or no longer a regular file, between listing and reading: as deleted below
        except FileTooLarge as exc:
            raise fail(
                GitErrorCode.FILE_TOO_LARGE,
                f"{_shown(path)} is {exc.size} bytes, over the limit of {exc.limit} (git_max_file_bytes): "
                "remove it or ignore it in .gitignore",
                path=_shown(path),
                size=exc.size,
                limit=exc.limit,
            ) from None
        except OSError as exc:
            raise _unreadable(path, exc) from None
        sha = blob_id(data)
        self.entries[path] = entry_from_stat(st, sha=sha, mode=mode)
        self.seen.add(path)
        if entry is not None and entry.sha == sha and entry.mode == mode and not entry.ext_flags:
            self.snapshot.refreshed = True
            return
        self.snapshot.changed.add(path)
        if self.keep_blobs:
            self.snapshot.blobs[sha] = data

    def finish(self) -> Snapshot:
        if len(self.seen) != len(self.old) or not self.seen.issuperset(self.old):
            for path, entry in self.old.items():
                if path in self.seen or entry.ext_flags & EXT_SKIP_WORKTREE:
                    continue
                if entry.mode == MODE_GITLINK:
                    continue  # an uninitialised submodule keeps its recorded commit
                del self.entries[path]
                self.snapshot.changed.add(path)
        return self.snapshot


def _shown(path: bytes) -> str:
    """A path for a message or a reply: valid UTF-8 whatever its bytes (JSON carries no lone surrogates)."""
    return path.decode("utf-8", "backslashreplace")


def _unreadable(path: bytes, exc: OSError) -> Exception:
    name = _shown(path).rstrip("/") or "."
    return fail(
        GitErrorCode.UNREADABLE_PATH,
        f"cannot read {name} in the worktree: {exc.strerror or exc}",
        path=name,
        errno=exc.errno,
    )
