"""Git's index file (the staging area) read and written in one pass.

dulwich's :class:`dulwich.index.Index` parses entry by entry through file reads and takes
about 90 ms each way on a 10,000-file index; this codec unpacks from one buffer and is several
times faster, which the checkpoint → reset path needs to stay within reach of the git command
line. Versions 2 and 3 are read and written; version 4 (path-compressed, written only when a
repository asks for it) is read through dulwich. Extensions (cache-tree, untracked cache, …)
are dropped on write: they describe the entries they were written with and git rebuilds them.

The index a checkpoint reads is nearly always the one this process wrote at the end of the
previous pulse: :data:`PARSED` keeps the entries of the last index written or read per file,
keyed by its checksum, so reading it again costs one read and one SHA-1 of the file (which is
checked on every read) instead of building 10,000 entries.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "EXT_INTENT_TO_ADD",
    "EXT_SKIP_WORKTREE",
    "PARSED",
    "IndexContents",
    "IndexEntry",
    "IndexFormatError",
    "IndexLocked",
    "ParsedIndexCache",
    "entry_from_stat",
    "read_index",
    "write_index",
    "write_locked",
]

_HEADER = struct.Struct(">4sLL")
_ENTRY = struct.Struct(">10L20sH")
_EXT = struct.Struct(">H")
_FLAG_EXTENDED = 0x4000
_FLAG_STAGE = 0x3000
_NAME_MASK = 0x0FFF
_U32 = 0xFFFFFFFF
_NS = 1_000_000_000
_EXT_FLAGS = itemgetter(11)

EXT_INTENT_TO_ADD = 0x2000
"""Extended flag of ``git add -N`` entries (no content staged yet)."""
EXT_SKIP_WORKTREE = 0x4000
"""Extended flag of sparse-checkout entries whose file is deliberately absent."""


class IndexFormatError(ValueError):
    """The index file is truncated, corrupt or of an unknown version."""


class IndexLocked(RuntimeError):
    """Another process holds ``<file>.lock`` (git's lock-file protocol)."""


class IndexEntry(NamedTuple):
    """One stage-0 entry: the stat data git caches plus the blob id and mode."""

    ctime_s: int
    ctime_ns: int
    mtime_s: int
    mtime_ns: int
    dev: int
    ino: int
    mode: int
    uid: int
    gid: int
    size: int
    sha: bytes
    """Raw 20-byte object id."""
    ext_flags: int = 0


@dataclass
class IndexContents:
    """An index as read: its entries and what the racy-git check needs."""

    entries: dict[bytes, IndexEntry] = field(default_factory=dict)
    mtime: tuple[int, int] = (0, 0)
    """(seconds, nanoseconds) of the index file; entries not older than this are racy."""
    checksum: bytes = b""
    conflicted: set[bytes] = field(default_factory=set)
    """Paths with unmerged stages (1-3); the worktree file decides their content."""
    raw: dict[bytes, bytes] = field(default_factory=dict)
    """Path → the entry's bytes as stored, so an unchanged entry is written back without re-packing."""
    ordered: bool = False
    """``raw`` is in the index's sort order (it was written by :func:`write_index`)."""


def entry_from_stat(st: os.stat_result, *, sha: bytes, mode: int, ext_flags: int = 0) -> IndexEntry:
    """The index entry git would write for a file with stat ``st`` and blob ``sha``."""
    return IndexEntry(
        (st.st_ctime_ns // _NS) & _U32,
        st.st_ctime_ns % _NS,
        (st.st_mtime_ns // _NS) & _U32,
        st.st_mtime_ns % _NS,
        st.st_dev & _U32,
        st.st_ino & _U32,
        mode,
        st.st_uid & _U32,
        st.st_gid & _U32,
        st.st_size & _U32,
        sha,
        ext_flags,
    )


class ParsedIndexCache:
    """The entries of the index this process last wrote or read, per index file, with its checksum.

    A hit needs the file's checksum (verified against its content on every read) to be the one
    remembered: the same checksum is the same bytes, hence the same entries. Callers get their
    own ``entries`` dict and ``conflicted`` set; the entries (immutable tuples) and ``raw`` are shared.
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._items: dict[str, IndexContents] = {}
        self._lock = threading.Lock()

    def remember(self, path: Path, contents: IndexContents) -> None:
        with self._lock:
            self._items.pop(str(path), None)
            self._items[str(path)] = contents
            while len(self._items) > self._size:
                self._items.pop(next(iter(self._items)))

    def lookup(self, path: Path, checksum: bytes, mtime: tuple[int, int]) -> IndexContents | None:
        with self._lock:
            hit = self._items.get(str(path))
        if hit is None or hit.checksum != checksum:
            return None
        return IndexContents(
            entries=dict(hit.entries),
            mtime=mtime,
            checksum=checksum,
            conflicted=set(hit.conflicted),
            raw=hit.raw,
            ordered=hit.ordered,
        )

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


PARSED = ParsedIndexCache()
"""Process-wide: operations on different repositories run in parallel threads."""


def read_index(path: Path) -> IndexContents:
    """Read ``path``; a missing file is an empty index."""
    try:
        with open(path, "rb") as f:
            data = f.read()
            st = os.fstat(f.fileno())
    except FileNotFoundError:
        return IndexContents()
    mtime = (st.st_mtime_ns // _NS, st.st_mtime_ns % _NS)
    if len(data) < _HEADER.size + 20:
        raise IndexFormatError(f"{path}: truncated index ({len(data)} bytes)")
    signature, version, count = _HEADER.unpack_from(data, 0)
    if signature != b"DIRC":
        raise IndexFormatError(f"{path}: not an index file")
    checksum = data[-20:]
    # index.skipHash writes zeros instead of the checksum.
    if checksum != b"\0" * 20 and hashlib.sha1(memoryview(data)[:-20]).digest() != checksum:
        raise IndexFormatError(f"{path}: index checksum mismatch")
    if version == 4:
        return _read_v4(path, mtime, checksum)
    if version not in (2, 3):
        raise IndexFormatError(f"{path}: unsupported index version {version}")
    cacheable = checksum != b"\0" * 20  # index.skipHash: no checksum to recognise the content by
    if cacheable and (known := PARSED.lookup(path, checksum, mtime)) is not None:
        return known
    entries: dict[bytes, IndexEntry] = {}
    conflicted: set[bytes] = set()
    raw: dict[bytes, bytes] = {}
    unpack_entry = _ENTRY.unpack_from
    new_entry = IndexEntry._make
    offset = _HEADER.size
    end = len(data) - 20
    try:
        for _ in range(count):
            cs, cn, ms, mn, dev, ino, mode, uid, gid, size, sha, flags = unpack_entry(data, offset)
            name_at = offset + 62
            ext_flags = 0
            if flags & _FLAG_EXTENDED:
                (ext_flags,) = _EXT.unpack_from(data, name_at)
                name_at += 2
            length = flags & _NAME_MASK
            if length == _NAME_MASK:
                length = data.index(b"\0", name_at) - name_at
            name = data[name_at : name_at + length]
            start = offset
            offset += (name_at - offset + length + 8) & ~7
            if flags & _FLAG_STAGE:
                conflicted.add(name)
                continue
            entries[name] = new_entry((cs, cn, ms, mn, dev, ino, mode, uid, gid, size, sha, ext_flags))
            raw[name] = data[start:offset]
    except (struct.error, ValueError) as exc:
        raise IndexFormatError(f"{path}: corrupt index entry: {exc}") from None
    if offset > end:
        raise IndexFormatError(f"{path}: index entries overrun the file")
    _check_extensions(path, data, offset, end)
    for name in conflicted:
        entries.pop(name, None)
    contents = IndexContents(entries=entries, mtime=mtime, checksum=checksum, conflicted=conflicted, raw=raw)
    if cacheable:
        PARSED.remember(
            path, IndexContents(entries=dict(entries), checksum=checksum, conflicted=set(conflicted), raw=raw)
        )
    return contents


def _check_extensions(path: Path, data: bytes, offset: int, end: int) -> None:
    """Refuse layouts whose entries are not all in this file (rather than misreading them)."""
    while offset + 8 <= end:
        signature = data[offset : offset + 4]
        (size,) = struct.unpack_from(">L", data, offset + 4)
        if signature == b"link":
            raise IndexFormatError(f"{path}: split index (core.splitIndex) is not supported")
        if signature == b"sdir":
            raise IndexFormatError(f"{path}: sparse index (index.sparse) is not supported")
        offset += 8 + size


def _read_v4(path: Path, mtime: tuple[int, int], checksum: bytes) -> IndexContents:
    from dulwich.index import ConflictedIndexEntry, Index

    entries: dict[bytes, IndexEntry] = {}
    conflicted: set[bytes] = set()
    for name, e in Index(str(path)).items():
        if isinstance(e, ConflictedIndexEntry):
            conflicted.add(name)
            continue
        ctime = e.ctime if isinstance(e.ctime, tuple) else (int(e.ctime), 0)
        mtime_e = e.mtime if isinstance(e.mtime, tuple) else (int(e.mtime), 0)
        entries[name] = IndexEntry(
            *ctime, *mtime_e, e.dev, e.ino, e.mode, e.uid, e.gid, e.size, bytes.fromhex(e.sha.decode()),
            e.extended_flags,
        )  # fmt: skip
    return IndexContents(entries=entries, mtime=mtime, checksum=checksum, conflicted=conflicted)


def write_index(path: Path, entries: dict[bytes, IndexEntry], *, unchanged_from: IndexContents | None = None) -> bytes:
    """Write ``entries`` (sorted, version 2 or 3 as git would) under git's lock; return the checksum.

    Entries that are the very objects read into ``unchanged_from`` are copied as stored. What
    was written is remembered (:data:`PARSED`) for the next read of ``path``.
    """
    version = 3 if any(map(_EXT_FLAGS, entries.values())) else 2
    raw: dict[bytes, bytes] = {}
    pack_entry = _ENTRY.pack
    old_get = (unchanged_from.entries if unchanged_from is not None else {}).get
    raw_get = (unchanged_from.raw if unchanged_from is not None else {}).get
    # The same paths as the index this one replaces (a checkpoint changed no path's presence):
    # its order is the sort order, and comparing the key sets costs a tenth of sorting them.
    same_paths = unchanged_from is not None and unchanged_from.ordered and unchanged_from.raw.keys() == entries.keys()
    for name in unchanged_from.raw if same_paths else sorted(entries):  # type: ignore[union-attr]  # same_paths: set
        e = entries[name]
        stored = raw_get(name)
        if stored is not None and old_get(name) is e:
            raw[name] = stored
            continue
        flags = min(len(name), _NAME_MASK)
        fixed = 62
        if e.ext_flags:
            flags |= _FLAG_EXTENDED
            fixed = 64
        packed = pack_entry(*e[:10], e.sha, flags)
        if e.ext_flags:
            packed += _EXT.pack(e.ext_flags)
        raw[name] = packed + name + b"\0" * (((fixed + len(name) + 8) & ~7) - fixed - len(name))
    body = _HEADER.pack(b"DIRC", version, len(entries)) + b"".join(raw.values())
    checksum = hashlib.sha1(body).digest()
    try:
        write_locked(path, body + checksum)
    except BaseException:
        PARSED.remember(path, IndexContents())  # what is on disk now is unknown: parse it next time
        raise
    PARSED.remember(path, IndexContents(entries=dict(entries), checksum=checksum, raw=raw, ordered=True))
    return checksum


def write_locked(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` the way git does: exclusive ``<path>.lock``, then rename.

    Raises :class:`IndexLocked` when the lock file exists (another git process is writing).
    """
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        raise IndexLocked(f"{lock} exists: another git process is writing {path.name}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(lock, path)
    except BaseException:
        lock.unlink(missing_ok=True)
        raise
