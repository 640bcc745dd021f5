"""What a worktree holds right now, computed like ``git add -A`` against its index.

One directory walk does it: a tracked file whose stat data matches its index entry (and is
not racily clean) is taken as unchanged without reading it, anything else is hashed. Only
directories holding tracked files are always entered; an untracked directory is skipped when
ignored, so ``node_modules`` costs one ignore check. Nothing is written: the caller decides
what to store.

Given what the worktree watch proves (:class:`Since`, from :mod:`.watch`), the walk lists only
the directories something happened in, as git's ``core.fsmonitor`` does: a directory no event
came for has the files and entries the index says, an entry an event named is looked at alone,
and a directory moved in its place has another inode and is listed whole. Each such scan also
looks at :data:`SWEEP_FILES` more files of quiet directories in turn, and a file with a second
hard link (which could be written without an event here) makes it start over and list
everything.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat as stat_mod
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from autarch.contracts.git import GitErrorCode
from autarch.runtime.ignore import GIT_IGNORE_FILES
from autarch.runtime.worktree_files import FileTooLarge, NotRegularFile, read_regular

from .index_file import EXT_SKIP_WORKTREE, IndexContents, IndexEntry, entry_from_stat
from .trees import MODE_GITLINK, MODE_SYMLINK, Leaf
from .workspace import fail

__all__ = ["DEFAULT_MAX_FILE_BYTES", "SWEEP_FILES", "Since", "Snapshot", "blob_id", "leaves", "scan_worktree",
           "untrackable"]

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

SWEEP_FILES = 64
"""Files of quiet directories a watched scan looks at anyway, in turn through the index: a write
inotify cannot see (through a hard link made from an unwatched directory) is committed within
``files / SWEEP_FILES`` checkpoints, at a cost that does not grow with the worktree."""

_IGNORE_FILES = frozenset(os.fsencode(name) for name in GIT_IGNORE_FILES)

IgnoreCheck = Callable[[str], bool]
"""Whether a worktree-relative path (``dir/`` for directories) is ignored."""
EnterHook = Callable[[bytes, int], None]
"""Called with a directory (worktree-relative, ``b""`` the top) and its inode just before it is listed."""

# How a directory waiting in the walk is treated.
_LIST, _LIST_ALL, _DESCEND = 0, 1, 2
"""List it (its subdirectories judged by the watch's proof); list it and everything below it; only pass
through it to the directories below it that must be listed."""


@dataclass(frozen=True)
class Since:
    """What the worktree watch proves since the index a scan compares against was written."""

    quiet: Mapping[bytes, int]
    """Directory (worktree-relative, ``b""`` the top) → its inode: no file in it changed, no entry came or went."""
    dirty: frozenset[bytes] = frozenset()
    """Directories an event came for that named no entry (or too many): listed whole, tracked or not."""
    named: Mapping[bytes, frozenset[bytes]] = field(default_factory=dict)
    """Directory → the names of its entries events came for (created, written, removed, renamed): only those are
    looked at there; the directory is in ``quiet`` otherwise."""
    sweep_from: int = 0
    """The index position where this scan's re-check of files in quiet directories starts."""


class _Item(Protocol):
    """What the walk needs of a directory entry: an ``os.DirEntry``, or an :class:`_Entry` made by ``lstat``."""

    @property
    def name(self) -> bytes: ...
    @property
    def path(self) -> bytes: ...
    def is_dir(self, *, follow_symlinks: bool = True) -> bool: ...
    def is_symlink(self) -> bool: ...
    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result: ...
    def inode(self) -> int: ...


class _Entry:
    """One named entry of a directory, as ``lstat`` found it (links are never followed: it is ``lstat``)."""

    __slots__ = ("_st", "name", "path")

    def __init__(self, name: bytes, path: bytes, st: os.stat_result) -> None:
        self.name, self.path, self._st = name, path, st

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return stat_mod.S_ISDIR(self._st.st_mode)

    def is_symlink(self) -> bool:
        return stat_mod.S_ISLNK(self._st.st_mode)

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        return self._st

    def inode(self) -> int:
        return self._st.st_ino


class _ListEverything(Exception):
    """What a partial walk found means it cannot rely on the watch's proof: a ``.gitignore`` changed (which
    untracked files count may have changed anywhere), or a file has a second hard link (written through one name,
    the other changed with no event in its directory). Everything is listed."""


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
    entered: set[bytes] = field(default_factory=set)
    """The directories (the top left out) a full scan would enter now: the ones to watch."""
    listed: int = 0
    """Directories the walk listed."""
    looked_up: int = 0
    """Entries a partial walk looked at by the name an event gave (in directories it did not list)."""
    partial: bool = False
    """Only the directories the watch did not prove quiet were listed (:class:`Since`)."""
    complete: bool = True
    """Every change to what this scan saw makes an inotify event in a directory it listed: no tracked file has a
    second hard link, and no nested repository was left unlisted (a watched next scan may be partial)."""
    sweep_next: int = 0
    """Where the next partial scan's re-check starts."""


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
    since: Since | None = None,
    enter: EnterHook | None = None,
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
        since: What the worktree watch proves since ``index`` was written: list only what it does not.
        enter: Called before each directory is listed (the watch watches it first).

    Links are recorded as links (their target is never read), FIFOs, sockets and devices are left out, and
    nothing is opened but with ``O_NOFOLLOW | O_NONBLOCK`` (``runtime.worktree_files``).
    """

    def run(proof: Since | None) -> Snapshot:
        scan = _Scan(
            root=os.fsencode(root),
            index=index,
            include_untracked=include_untracked,
            is_ignored=is_ignored or (lambda _path: False),
            keep_blobs=keep_blobs,
            filemode=filemode,
            max_file_bytes=max_file_bytes,
            since=proof,
            enter=enter,
        )
        return scan.run()

    if since is not None:
        try:
            return run(since)
        except _ListEverything:
            pass  # listed whole below
    return run(None)


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
        since: Since | None,
        enter: EnterHook | None,
    ) -> None:
        self.root = root
        self.since = since
        self.enter = enter
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
        # Each file's directory first (counted in C over 10,000 paths), then the ancestors of the few distinct
        # directories.
        self.files_in = Counter(path.rpartition(b"/")[0] for path in self.old)
        parents = set(self.files_in)
        parents.update(path.rpartition(b"/")[0] for path in index.conflicted)
        self.tracked_dirs: set[bytes] = set()
        for directory in parents:
            while directory and directory not in self.tracked_dirs:
                self.tracked_dirs.add(directory)
                directory = directory.rpartition(b"/")[0]
        self.snapshot.tracked_dirs = self.tracked_dirs
        self.pending: list[tuple[bytes, int, int]] = []
        """Directories waiting: (path, inode, how). A loop, not recursion, so no nesting exhausts the stack."""
        self.listed_dirs: dict[bytes, int] = {}
        """Directory listed → how many files of the index it still held."""
        self.lost: list[bytes] = []
        """Tracked directories a partial walk found gone or replaced by a non-directory (everything below them
        with them)."""
        self.must: set[bytes] = set()
        """Directories a partial walk lists (none of them quiet)."""
        self.named: dict[bytes, frozenset[bytes]] = {}
        """Directory → the entries a partial walk looks at there (it lists nothing else of it)."""
        self.gone: list[bytes] = []
        """Files of the index named, and no longer files there: out of the index."""
        self.visit: set[bytes] = set()
        self.below: dict[bytes, list[bytes]] = {}
        """Directory → those below it a partial walk must reach through it."""
        self.tracked_below: dict[bytes, list[bytes]] = {}
        """Directory → the tracked directories in it (a partial walk's listing must find each, or lose its files)."""
        if since is not None:
            for directory in self.tracked_dirs:
                self.tracked_below.setdefault(directory.rpartition(b"/")[0], []).append(directory)

    def run(self) -> Snapshot:
        try:
            root_inode = os.lstat(self.root).st_ino
        except OSError:
            root_inode = 0  # the listing finds out

        if self.since is None:
            self.pending.append((b"", root_inode, _LIST_ALL))
        else:
            self._plan(self.since)
            self.snapshot.partial = True
            quiet_root = self.since.quiet.get(b"")
            if quiet_root is not None and quiet_root != root_inode:
                self.pending.append((b"", root_inode, _LIST_ALL))
            elif quiet_root is None:
                self.pending.append((b"", root_inode, _LIST))
            elif b"" in self.visit:
                self.pending.append((b"", root_inode, _DESCEND))
        pending = self.pending
        while pending:
            path, inode, how = pending.pop()
            if how == _DESCEND:
                if (names := self.named.get(path)) is not None:
                    self._named(path, names, how)
                self._descend(path, how)
            else:
                self.walk(path, inode, how)
        return self.finish()

    def _plan(self, since: Since) -> None:
        """The directories a partial walk lists (not proved quiet), the entries it looks at by name (named by
        events, or re-checked), and the directories it passes through to reach them."""
        quiet = since.quiet
        must = {d for d in itertools.chain((b"",), self.tracked_dirs, since.dirty) if d not in quiet}
        self.must = must
        self.named = {d: names for d, names in since.named.items() if d not in must}
        self.snapshot.looked_up = sum(map(len, self.named.values()))
        # The re-check: a few more files of quiet directories, looked at as the named ones are.
        for directory, names in self._sweep(since.sweep_from, must).items():
            self.named[directory] = self.named.get(directory, frozenset()) | names
        visit = self.visit
        for directory in itertools.chain(must, self.named):
            while directory not in visit:
                visit.add(directory)
                if not directory:
                    break
                parent = directory.rpartition(b"/")[0]
                self.below.setdefault(parent, []).append(directory)
                directory = parent

    def _sweep(self, start: int, listed: set[bytes]) -> dict[bytes, set[bytes]]:
        """Up to :data:`SWEEP_FILES` files of the index from ``start`` whose directory is not listed anyway, by
        directory: looked at by name as if an event had named them."""
        old = self.old
        count = min(SWEEP_FILES, len(old))
        if not count:
            return {}
        start %= len(old)
        paths = list(itertools.islice(old, start, start + count))
        if len(paths) < count:
            paths.extend(itertools.islice(old, count - len(paths)))
        self.snapshot.sweep_next = (start + count) % len(old)
        names: dict[bytes, set[bytes]] = {}
        for path in paths:
            directory, _, name = path.rpartition(b"/")
            if directory not in listed:
                names.setdefault(directory, set()).add(name)
        return names

    def _descend(self, path: bytes, how: int) -> None:
        """Pass through quiet ``path`` (its entries are the index's, but for any named ones, looked at already) to
        the directories below it that must be listed: each judged as the listing of ``path`` would judge it."""
        named = self.named.get(path, frozenset())
        for child in self.below.get(path, ()):
            if child.rpartition(b"/")[2] in named:
                continue
            abs_path = self.root + b"/" + child
            try:
                st = os.lstat(abs_path)
            except OSError:
                self.lost.append(child)
                continue
            if not stat_mod.S_ISDIR(st.st_mode):
                self.lost.append(child)
                continue
            self._subdir(child, abs_path, st.st_ino, how)

    def _subdir(self, path: bytes, abs_path: bytes, inode: int, parent_how: int) -> None:
        """A directory found in a listing (or passed through to): walk it if ``git add -A`` would."""
        entry = self.old.get(path)
        if entry is not None and entry.mode == MODE_GITLINK:
            self.seen.add(path)  # a submodule: its recorded commit is kept as is
            return
        if path.count(b"/") >= MAX_DEPTH:
            raise fail(
                GitErrorCode.PATH_TOO_DEEP,
                f"{_shown(path)[:200]}… nests more than {MAX_DEPTH} directories: remove or ignore it",
                path=_shown(path)[:1000],
                limit=MAX_DEPTH,
            )
        if path not in self.tracked_dirs:
            if not self.include_untracked or self.is_ignored(os.fsdecode(path) + "/"):
                return
            if os.path.lexists(abs_path + b"/.git"):
                # An embedded repository: git add -A would refuse it too (without --force). Its .git going
                # away is no event in any directory watched here.
                self.snapshot.complete = False
                return
        self._push(path, inode, parent_how)

    def _push(self, path: bytes, inode: int, parent_how: int) -> None:
        if self.since is None or parent_how == _LIST_ALL:
            self.pending.append((path, inode, _LIST_ALL))
            return
        quiet = self.since.quiet.get(path)
        if quiet is None:
            self.pending.append((path, inode, _LIST))
        elif quiet != inode:
            self.pending.append((path, inode, _LIST_ALL))  # another directory moved in: nothing below it is known
        elif path in self.visit:
            self.pending.append((path, inode, _DESCEND))
        # else: quiet, and nothing below it to list: its files are the index's

    def walk(self, directory: bytes, inode: int, how: int) -> None:
        if self.enter is not None:
            self.enter(directory, inode)
        prefix = directory + b"/" if directory else b""
        try:
            listing = os.scandir(self.root + b"/" + directory if directory else self.root)
        except (FileNotFoundError, NotADirectoryError):
            if self.since is not None:
                self.lost.append(directory)
            return
        except OSError as exc:
            # git add would skip the directory with a warning, and its tracked files would look deleted.
            raise _unreadable(prefix, exc) from None
        with listing:
            subdirs = self._list(prefix, listing, how)
        self.snapshot.listed += 1
        if self.since is not None and (tracked := self.tracked_below.get(directory)):
            # A tracked directory no longer here (removed, moved, made a file or a link): nothing below it is.
            found = set(subdirs)
            self.lost.extend(child for child in tracked if child not in found)

    def _named(self, directory: bytes, names: frozenset[bytes], how: int) -> None:
        """Only ``names`` changed in ``directory`` (the events named them): look at those entries alone."""
        prefix = directory + b"/" if directory else b""
        base = self.root + b"/" + prefix
        items: list[_Entry] = []
        for name in sorted(names):
            try:
                items.append(_Entry(name, base + name, os.lstat(base + name)))
            except (FileNotFoundError, NotADirectoryError):
                pass  # removed or renamed away: out of the index below
            except OSError as exc:
                raise _unreadable(prefix + name, exc) from None
        found = set(self._list(prefix, items, how, whole=False))
        for name in names:
            path = prefix + name
            if path in self.tracked_dirs:
                if path not in found:  # gone, or made a file or a link: nothing below it is here
                    self.lost.append(path)
            elif path in self.old and path not in self.seen:  # gone, or made a directory
                self.gone.append(path)

    def _list(self, prefix: bytes, listing: Iterable[_Item], how: int, *, whole: bool = True) -> list[bytes]:
        """Compare the entries of the directory ``prefix`` with the index; return the subdirectories found
        (``whole``: ``listing`` is all of the directory's entries)."""
        # The hot loop of a checkpoint (one pass per tracked file): locals, no helper calls
        # for the common case of an unchanged regular file.
        old_get = self.old.get
        seen_add = self.seen.add
        racy_s, racy_ns = self.racy_after
        filemode = self.filemode
        partial = self.since is not None
        snapshot = self.snapshot
        tracked_here = 0
        subdirs: list[bytes] = []
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
                    tracked_here += 1
                subdirs.append(path)
                self._subdir(path, item.path, item.inode(), how)
                continue
            if entry is None:
                if partial and name in _IGNORE_FILES:
                    raise _ListEverything
                if name in _NO_LINKS and item.is_symlink():
                    continue  # git refuses a linked .gitmodules, .gitattributes, .gitignore
                if path in self.unmerged or (
                    self.include_untracked and not self.is_ignored(os.fsdecode(path))
                ):
                    self._add(path, item, None)
                continue
            seen_add(path)
            tracked_here += 1
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
            if st.st_nlink != 1:
                # Written through its other name, it changes with no event in this directory.
                if partial:
                    raise _ListEverything
                snapshot.complete = False
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
        if whole:
            self.listed_dirs[prefix[:-1]] = tracked_here
        return subdirs

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
        item: _Item,
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
            if st.st_nlink != 1:  # a new file that is a second name of another (tracked ones are checked above)
                if self.since is not None:
                    raise _ListEverything
                self.snapshot.complete = False
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
        if self.since is not None and path.rpartition(b"/")[2] in _IGNORE_FILES:
            raise _ListEverything
        self.snapshot.changed.add(path)
        if self.keep_blobs:
            self.snapshot.blobs[sha] = data

    def finish(self) -> Snapshot:
        lost = tuple(d + b"/" if d else b"" for d in self.lost)
        entered = self.snapshot.entered
        entered.update(self.listed_dirs)
        if self.since is not None:
            entered.update(d for d in self.tracked_dirs if not (d + b"/").startswith(lost))
        entered.discard(b"")
        return self._deleted(lost)

    def _deleted(self, lost: tuple[bytes, ...]) -> Snapshot:
        """Take out the index's files the walk found gone (``lost``: the prefixes of directories found gone)."""
        if self.since is None:
            if len(self.seen) == len(self.old) and self.seen.issuperset(self.old):
                return self.snapshot
            gone: Callable[[bytes], bool] = lambda _path: True  # noqa: E731 - every file of the index was listed
        else:
            # A partial walk saw the files of the directories it listed, nothing else: only there, and below a
            # directory it found gone, can a file of the index be missing. Counting tells whether one is.
            for path in self.gone:
                entry = self.old.get(path)
                if (entry is not None and path not in self.seen and not entry.ext_flags & EXT_SKIP_WORKTREE
                        and entry.mode != MODE_GITLINK):
                    self._delete(path)
            files_in = self.files_in
            if not self.lost and all(files_in.get(d, 0) == held for d, held in self.listed_dirs.items()):
                return self.snapshot
            listed = self.listed_dirs
            gone = lambda path: path.rpartition(b"/")[0] in listed or path.startswith(lost)  # noqa: E731
        for path, entry in self.old.items():
            if path in self.seen or entry.ext_flags & EXT_SKIP_WORKTREE or not gone(path):
                continue
            if entry.mode == MODE_GITLINK:
                continue  # an uninitialised submodule keeps its recorded commit
            self._delete(path)
        return self.snapshot

    def _delete(self, path: bytes) -> None:
        if self.since is not None and path.rpartition(b"/")[2] in _IGNORE_FILES:
            raise _ListEverything
        if self.entries.pop(path, None) is not None:
            self.snapshot.changed.add(path)


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
