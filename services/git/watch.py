"""What touched a worktree's directories since the git service last scanned it (inotify).

A pulse starts with a clean check, a ``stat`` of every tracked file, so that a user's edit between pulses is
refused (``dirty_worktree``) instead of landing in the agent's commit; a checkpoint then scans every file as
``git add -A`` does. Both cost time in proportion to the worktree: a loop that adds a file each iteration paid for
two scans of a growing tree per iteration. This module lets both rely on the last checkpoint's scan for every
directory the kernel reported nothing in, as git's ``core.fsmonitor`` does.

The proof, per worktree:

1. before the checkpoint's scan, :meth:`WorktreeWatch.mark` reads every queued event (the agent's, from the
   pulse) and notes the worktree's event count, the directories the events came for and the entries they named;
2. the scan calls :meth:`WorktreeWatch.enter` before it lists a directory, so every directory is watched before
   its listing is taken and a change the listing missed is an event;
3. after the checkpoint has written its index, :meth:`WorktreeWatch.settle` reads the events again. The worktree
   is *quiet* when none came for it in between, and every directory holding a tracked file is watched;
4. the next clean check asks :meth:`WorktreeWatch.unchanged`: quiet, still no event, and the index on disk is the
   one the checkpoint wrote. Then the tracked content is the index's, and no file is ``stat``'ed;
5. the next checkpoint's mark carries, when that checkpoint was quiet and *complete* (no tracked file with a second
   hard link, no nested repository left unlisted) and the ignore rules from outside the worktree are as they were,
   which directories are quiet since and which entries events named in the others (:class:`~.snapshots.Since`).
   The scan looks only at those entries, and lists whole only a directory an event without a name came for (its
   own attributes, or more than :data:`MAX_NAMES` names).

Any doubt means listing more: a queue overflow (every worktree), a watch the kernel refused (no room, not a
directory), a worktree with more directories than :data:`MAX_DIRS`, an event naming a ``.gitignore``. A
directory removed or moved away takes its watch, and those of every directory below it, with it: its path is
watched again when a scan lists it, and a directory found at a quiet path with another inode than the watched one
is listed whole. A name from an event is only ever an entry of its watch's directory to ``lstat`` (the kernel
sends no ``/``, ``.`` or ``..``; such a name would list the directory whole): no path is built from anything else
an agent chose.

What inotify does not report: a write through a hard link from a directory not watched (an ignored one, or
outside the worktree), or through a writable ``mmap`` after its file was closed by a process still running. The
scan also looks at a few files of quiet directories each time (:data:`~.snapshots.SWEEP_FILES`, in
turn), and a file found with a second link makes that checkpoint, and every later one while it has it, list
everything.
Agent commands cannot keep a process running between pulses (their PID namespace ends every process with the
command).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import stat
import struct
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from autarch.runtime.ignore import GIT_IGNORE_FILES

from .snapshots import Since

__all__ = ["LOCAL_FILESYSTEMS", "MAX_DIRS", "MAX_WORKTREES", "Mark", "WorktreeWatch"]

log = logging.getLogger(__name__)

MAX_DIRS = 20_000
"""Directories watched per worktree at most: past it the worktree is scanned each time (its watches would crowd
out other worktrees' within ``fs.inotify.max_user_watches``)."""
MAX_WORKTREES = 64
"""Worktrees watched at once; the one used least recently gives its watches up first."""
MAX_NAMES = 1_000
"""Entries of one directory events may name before the next checkpoint lists that directory whole instead."""
_IGNORE_FILES = frozenset(os.fsencode(name) for name in GIT_IGNORE_FILES)

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x002, 0x004, 0x008
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x040, 0x080, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_Q_OVERFLOW, _IN_IGNORED = 0x4000, 0x8000
_IN_ONLYDIR, _IN_DONT_FOLLOW = 0x01000000, 0x02000000
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
# Everything that can change what a tracked file holds, its mode or stat data, or which files a directory has.
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
         | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_MAX_READS = 64
"""Reads of 64 KiB (some 2,000 events each) one drain makes at most."""

LOCAL_FILESYSTEMS = frozenset({
    0xEF53,      # ext2, ext3, ext4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0x2FC12FC1,  # zfs
    0xF2F52010,  # f2fs
    0xCA451A4E,  # bcachefs
    0x01021994,  # tmpfs
    0x858458F6,  # ramfs
    0x794C7630,  # overlayfs (containers)
})
"""Filesystems (``statfs`` magic numbers) whose every change passes through this kernel. On NFS, SMB, 9p or a
FUSE mount another machine or a user-space server can change a file without an inotify event here: worktrees
there are scanned each time."""


@dataclass(eq=False)  # held in lists by identity
class _Worktree:
    root: bytes
    watches: dict[bytes, int] = field(default_factory=dict)
    """Directory (worktree-relative, ``b""`` for the top) → its watch descriptor."""
    inodes: dict[bytes, int] = field(default_factory=dict)
    """Directory → the inode its watch was put on (a directory moved in its place is another)."""
    events: int = 0
    """Events seen for this worktree (any of its watches), or doubts counted as one."""
    dirty: set[bytes] = field(default_factory=set)
    """Directories an event naming no entry (or too many) came for since the last mark."""
    named: dict[bytes, set[bytes]] = field(default_factory=dict)
    """Directory → the entries events named there since the last mark."""
    rules_touched: bool = False
    """An event since the last mark named a ``.gitignore``: what is ignored may have changed anywhere below it."""
    quiet_at: int | None = None
    """``events`` when a checkpoint proved the worktree quiet; ``None`` while nothing is proved, and from the
    first event nobody can tell the directory of (a lost event, a refused watch)."""
    index_checksum: bytes = b""
    """The checksum of the index that checkpoint left."""
    complete: bool = False
    """That checkpoint listed or proved quiet every directory a full scan enters (no hard-linked file, no nested
    repository): the next checkpoint may list only the directories events came for."""
    rules: object = None
    """The ignore rules from outside the worktree as that checkpoint read them."""
    sweep: int = 0
    """Where the next checkpoint's re-check of files in quiet directories starts (an index position)."""
    unwatchable: bool = False
    """Too many directories, or the kernel refused a watch: always scanned."""


@dataclass(frozen=True)
class Mark:
    """Where a checkpoint's scan began: the worktree and its event count then, and what the watch proves about
    the worktree since the index the scan starts from (``None``: nothing, list every directory)."""

    root: bytes
    events: int
    since: Since | None = None


class _Inotify:
    """The three system calls, through libc (no binding in the standard library)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = (ctypes.c_int, ctypes.c_int)
        self._statfs = libc.statfs
        self._statfs.argtypes = (ctypes.c_char_p, ctypes.c_void_p)
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd: int = fd

    def add(self, path: bytes) -> int:
        wd = self._add(self.fd, path, _MASK)
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return int(wd)

    def filesystem(self, path: bytes) -> int | None:
        """The ``f_type`` of the filesystem holding ``path`` (the first field of ``struct statfs``)."""
        buffer = ctypes.create_string_buffer(512)  # struct statfs is 120 bytes on 64-bit Linux
        if self._statfs(path, buffer) != 0:
            return None
        return ctypes.c_ulong.from_buffer(buffer).value & 0xFFFFFFFF

    def remove(self, wd: int) -> None:
        self._rm(self.fd, wd)  # EINVAL when the kernel dropped it already: nothing to do

    def read(self) -> bytes:
        try:
            return os.read(self.fd, 65536)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class WorktreeWatch:
    """The git service's watches on the worktrees it checkpoints (one inotify instance for all of them)."""

    def __init__(self, *, enabled: bool = True, max_dirs: int = MAX_DIRS, max_worktrees: int = MAX_WORKTREES) -> None:
        self.max_dirs = max_dirs
        self.max_worktrees = max_worktrees
        self._lock = threading.Lock()  # the service runs operations of different repositories in threads
        self._worktrees: OrderedDict[bytes, _Worktree] = OrderedDict()
        # A descriptor names an inode: two worktrees' paths can reach the same directory (a link on the way to one
        # of them), and then the kernel hands both the same descriptor. Each holder counts its events, and the
        # watch is removed when the last one lets go.
        self._by_wd: dict[int, list[tuple[_Worktree, bytes]]] = {}
        # Made at the first checkpoint, not here: an engine that never checkpoints (a command-line call, a test)
        # holds no inotify instance (``fs.inotify.max_user_instances`` is 128 per user by default).
        self._inotify: _Inotify | None = None
        self._enabled = enabled and sys.platform.startswith("linux")

    @property
    def available(self) -> bool:
        """Whether this process can watch (inotify made, or makeable)."""
        with self._lock:
            return self._ready() is not None

    def _ready(self) -> _Inotify | None:
        if self._inotify is None and self._enabled:
            try:
                made = _Inotify()
            except OSError as exc:
                self._enabled = False
                log.info("no inotify (%s): every clean check scans the worktree", exc)
                return None
            weakref.finalize(self, made.close)  # an engine dropped without close() gives its instance back
            self._inotify = made
        return self._inotify

    def mark(self, root: str | os.PathLike[str], index_checksum: bytes = b"", rules: object = None) -> Mark | None:
        """Note where a checkpoint's scan of ``root`` begins (``None`` when nothing is watched here).

        When the last checkpoint proved the worktree quiet and complete, its index is still ``index_checksum`` and
        the ignore rules from outside the worktree are still ``rules``, the mark carries which directories are
        unchanged since (:class:`~.snapshots.Since`)."""
        key = os.fsencode(root)
        with self._lock:
            inotify = self._ready()
            if inotify is None:
                return None
            self._drain()
            tree = self._worktrees.get(key)
            if tree is None:
                tree = self._worktrees[key] = _Worktree(root=key)
                kind = inotify.filesystem(key)
                if kind not in LOCAL_FILESYSTEMS:
                    tree.unwatchable = True
                    log.info("%s is on a filesystem inotify may not see every change of (f_type %s): its clean "
                             "checks scan it", os.fsdecode(key), hex(kind) if kind is not None else "unknown")
                self._evict()
            self._worktrees.move_to_end(key)
            since = None
            if (tree.quiet_at is not None and tree.complete and not tree.unwatchable and not tree.rules_touched
                    and tree.index_checksum == index_checksum and tree.rules == rules):
                dirty = tree.dirty
                since = Since(quiet={d: ino for d, ino in tree.inodes.items() if d not in dirty},
                              dirty=frozenset(dirty), sweep_from=tree.sweep,
                              named={d: frozenset(names) for d, names in tree.named.items() if d not in dirty})
            tree.quiet_at = None  # whatever the checkpoint does now, the old proof is spent
            tree.dirty = set()
            tree.named = {}
            tree.rules_touched = False
            return Mark(root=key, events=tree.events, since=since)

    def enter(self, mark: Mark | None, directory: bytes, inode: int) -> None:
        """The scan is about to list ``directory`` (inode ``inode``): watch it first, so that any change the listing
        does not see is an event."""
        if mark is None:
            return
        with self._lock:
            tree = self._worktrees.get(mark.root)
            if self._inotify is None or tree is None or tree.unwatchable:
                return
            if directory in tree.watches and tree.inodes.get(directory) == inode:
                return
            if len(tree.watches) >= self.max_dirs:
                self._unwatch(tree, unwatchable=True)
                return
            self._watch(tree, directory)

    def settle(self, mark: Mark | None, tracked_dirs: Iterable[bytes], index_checksum: bytes, *,
               complete: bool = False, rules: object = None, sweep: int = 0) -> bool:
        """After the checkpoint wrote ``index_checksum``: quiet if nothing came since ``mark`` and every one of
        ``tracked_dirs`` (worktree-relative, the top implied) was watched before it was listed; returns whether it
        is. ``complete``, ``rules`` and ``sweep`` are kept for the next checkpoint's mark."""
        if mark is None:
            return False
        with self._lock:
            if self._inotify is None:
                return False
            self._drain()
            tree = self._worktrees.get(mark.root)
            if tree is None or tree.unwatchable:
                return False
            missing = [d for d in (b"", *tracked_dirs) if d not in tree.watches]
            if len(tree.watches) + len(missing) > self.max_dirs:
                self._unwatch(tree, unwatchable=True)
                return False
            for directory in missing:  # each one tried: one refused watch holds none of the others back
                self._watch(tree, directory)
                if tree.unwatchable:
                    return False
            if missing or tree.events != mark.events:
                return False  # the new watches make the next checkpoint's proof possible
            tree.quiet_at = tree.events
            tree.dirty = set()
            tree.named = {}
            tree.index_checksum = index_checksum
            tree.complete = complete
            tree.rules = rules
            tree.sweep = sweep
            return True

    def unchanged(self, root: str | os.PathLike[str], index_checksum: bytes) -> bool:
        """Nothing touched ``root``'s tracked directories since a quiet checkpoint, whose index is still
        ``index_checksum``."""
        key = os.fsencode(root)
        with self._lock:
            if self._inotify is None:
                return False
            self._drain()
            tree = self._worktrees.get(key)
            return (tree is not None and tree.quiet_at is not None and tree.quiet_at == tree.events
                    and tree.index_checksum == index_checksum)

    def forget(self, root: str | os.PathLike[str]) -> None:
        """Give up the watches of a worktree (removed, or about to be)."""
        with self._lock:
            if self._inotify is None:
                return
            tree = self._worktrees.pop(os.fsencode(root), None)
            if tree is not None:
                self._unwatch(tree)

    def watched(self, root: str | os.PathLike[str]) -> int:
        """How many directories of ``root`` are watched (for tests and the benchmark's report)."""
        with self._lock:
            tree = self._worktrees.get(os.fsencode(root))
            return len(tree.watches) if tree is not None else 0

    def close(self) -> None:
        with self._lock:
            self._enabled = False
            if self._inotify is not None:
                self._inotify.close()
                self._inotify = None
            self._worktrees.clear()
            self._by_wd.clear()

    # --- under the lock ---------------------------------------------------------------------------------------

    def _watch(self, tree: _Worktree, directory: bytes) -> bool:
        assert self._inotify is not None
        path = tree.root + b"/" + directory if directory else tree.root
        try:
            inode = _real_directory(tree.root, directory)
            wd = self._inotify.add(path)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                log.warning("inotify has no room for another watch (fs.inotify.max_user_watches): %s is scanned "
                            "at every clean check", os.fsdecode(tree.root))
            # ENOENT, ENOTDIR (a link or a file where a tracked directory was): the next scan finds out what
            # happened there, and no proof holds until then.
            tree.events += 1
            tree.quiet_at = None
            if exc.errno == errno.ENOSPC:
                self._unwatch(tree, unwatchable=True)
            return False
        previous = tree.watches.get(directory)
        if previous is not None and previous != wd:
            self._release(tree, directory, previous)
        holders = self._by_wd.setdefault(wd, [])
        if (tree, directory) not in holders:
            holders.append((tree, directory))
        tree.watches[directory] = wd
        tree.inodes[directory] = inode
        return True

    def _release(self, tree: _Worktree, directory: bytes, wd: int, *, gone: bool = False) -> None:
        """Let go of ``tree``'s watch on ``directory``; the kernel's is removed with its last holder (``gone``:
        the kernel removed it already, and may hand its number out again)."""
        assert self._inotify is not None
        holders = [h for h in self._by_wd.get(wd, ()) if not (h[0] is tree and h[1] == directory)]
        if holders:
            self._by_wd[wd] = holders
        else:
            self._by_wd.pop(wd, None)
            if not gone:
                self._inotify.remove(wd)

    def _drop(self, tree: _Worktree, directory: bytes, *, gone: int | None) -> None:
        """``directory`` was removed or moved: its watch, and those of the directories below it (they moved with
        it, and their paths now name other directories or none), no longer say anything about those paths."""
        below = directory + b"/" if directory else b""
        for path, wd in list(tree.watches.items()):
            if path == directory or path.startswith(below):
                del tree.watches[path]
                tree.inodes.pop(path, None)
                tree.dirty.add(path)
                self._release(tree, path, wd, gone=wd == gone)

    def _unwatch(self, tree: _Worktree, *, unwatchable: bool = False) -> None:
        assert self._inotify is not None
        for directory, wd in list(tree.watches.items()):
            self._release(tree, directory, wd)
        tree.watches.clear()
        tree.inodes.clear()
        tree.quiet_at = None
        tree.unwatchable = tree.unwatchable or unwatchable

    def _evict(self) -> None:
        while len(self._worktrees) > self.max_worktrees:
            _key, tree = self._worktrees.popitem(last=False)
            self._unwatch(tree)

    def _drain(self) -> None:
        assert self._inotify is not None
        unpack = _EVENT.unpack_from
        for _ in range(_MAX_READS):
            data = self._inotify.read()
            if not data:
                return
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = unpack(data, offset)
                start = offset + _EVENT.size
                offset = start + length
                # The entry's name, NUL-padded; the kernel never sends "/", "." or "..". It only ever says which
                # entry of this watch's directory to look at.
                name = data[start:offset].rstrip(b"\0") if length else b""
                if mask & _IN_Q_OVERFLOW:
                    for tree in self._worktrees.values():
                        tree.events += 1  # events were lost: no worktree's proof holds
                        tree.quiet_at = None
                    continue
                holders = self._by_wd.get(wd)
                if holders is None:
                    continue
                for tree, directory in holders:
                    tree.events += 1
                    if name in _IGNORE_FILES:
                        tree.rules_touched = True
                    if not name or b"/" in name or name in (b".", b"..") or directory in tree.dirty:
                        tree.dirty.add(directory)
                        tree.named.pop(directory, None)
                        continue
                    names = tree.named.setdefault(directory, set())
                    names.add(name)
                    if len(names) > MAX_NAMES:
                        tree.dirty.add(directory)
                        del tree.named[directory]
                if mask & (_IN_IGNORED | _IN_MOVE_SELF):
                    # Gone (its watch with it), or moved: watched again when a scan lists that path again.
                    for tree, directory in list(holders):
                        if tree.watches.get(directory) == wd:
                            self._drop(tree, directory, gone=wd if mask & _IN_IGNORED else None)
        # Events still arrive faster than they are read (agents of other worktrees writing): stop reading, and let
        # no worktree's proof stand on events not read yet.
        for tree in self._worktrees.values():
            tree.events += 1
            tree.quiet_at = None


def _real_directory(root: bytes, directory: bytes) -> int:
    """The inode of ``directory`` under ``root``; ``NotADirectoryError`` unless every step of it is a directory,
    not a link.

    The watch itself refuses a link only at the last step (``IN_DONT_FOLLOW``): an agent's ``src`` made a link to
    a directory outside, with a ``deep`` in it, would otherwise have this process watch that outside ``deep`` as
    the worktree's ``src/deep``."""
    probe = root
    st = os.lstat(probe)
    for part in directory.split(b"/") if directory else ():
        probe += b"/" + part
        st = os.lstat(probe)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "a step of a tracked directory is not a directory", probe)
    return st.st_ino
