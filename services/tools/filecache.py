"""Text files as grep sees them: binary and size checks, and a cache of contents kept between searches."""

from __future__ import annotations

import os
import stat
import time
from array import array
from collections import OrderedDict
from itertools import accumulate

__all__ = [
    "BINARY_CONTROL_RATIO",
    "MAX_GREP_FILE_BYTES",
    "CachedFile",
    "ContentCache",
    "is_binary",
    "read_text_file",
]

MAX_GREP_FILE_BYTES = 10 * 1024 * 1024
"""Files larger than this (10 MB) are skipped."""
BINARY_CONTROL_RATIO = 0.10
"""A file whose first chunk is at least this share control characters is binary."""
_HEAD = 65536
_SNIFF = 8192
# Control characters that count toward "binary": everything below 0x20 except tab, LF, VT, FF, CR, plus DEL.
_CONTROL = bytes([*range(0, 9), *range(14, 32), 127])


def is_binary(head: bytes) -> bool:
    """True when a file's first chunk has a NUL byte or ≥ 10 % control characters."""
    sample = head[:_SNIFF]
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    control = len(sample) - len(sample.translate(None, _CONTROL))
    return control >= BINARY_CONTROL_RATIO * len(sample)


def read_text_file(path: str) -> bytes | None:
    """The file's bytes, or None when it is not a regular text file within the size limit."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.read(fd, _HEAD)
        if len(head) < _HEAD:
            if is_binary(head):
                return None
            if not head:
                # Empty, or not a regular file (a FIFO opened non-blocking reads nothing).
                return head if stat.S_ISREG(os.fstat(fd).st_mode) else None
            return head
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_GREP_FILE_BYTES or is_binary(head):
            return None
        rest = os.read(fd, info.st_size - len(head) + 1)
        chunks = [head, rest]
        while rest:
            rest = os.read(fd, 1 << 20)
            chunks.append(rest)
        data = b"".join(chunks)
        return None if len(data) > MAX_GREP_FILE_BYTES else data
    except OSError:
        return None
    finally:
        os.close(fd)


_RACY_SECONDS = 2.0


class CachedFile:
    """A file's searchable content (None: binary, too big, or unreadable) and its lower-cased copy."""

    __slots__ = ("_line_starts", "_lowered", "cached", "data", "key", "size")

    def __init__(self, key: tuple[int, ...], data: bytes | None) -> None:
        self.key = key
        self.data = data
        self._lowered: bytes | None = None
        self._line_starts: array[int] | None = None
        self.size = len(data) if data else 0
        """Bytes held: the content, its lower-cased copy and line index once built."""
        self.cached = False
        """Whether the cache holds (and counts) this entry."""

    def line_starts(self) -> array[int]:
        """Offset of every line's start, plus one past the end (built on the first hit in the file)."""
        if self._line_starts is None:
            lengths = (len(line) + 1 for line in (self.data or b"").split(b"\n"))
            self._line_starts = array("q", accumulate(lengths, initial=0))
            self.size += self._line_starts.itemsize * len(self._line_starts)
        return self._line_starts

    def lowered(self) -> bytes:
        if self._lowered is None:
            self._lowered = self.data.lower() if self.data else b""
            self.size += len(self._lowered)
        return self._lowered


class ContentCache:
    """File contents kept between searches, checked against ``lstat`` on every use.

    An agent greps the same worktree over and over; re-reading and re-lower-casing every file
    each time is most of grep's cost. An entry is reused only while the file's mtime, ctime,
    size and inode are unchanged, and files modified in the last two seconds are never cached
    (a write within the same timestamp tick would otherwise go unnoticed, git's "racy" case).
    """

    def __init__(self, limit_bytes: int = 128 * 1024 * 1024) -> None:
        self.limit = limit_bytes
        self._entries: OrderedDict[str, CachedFile] = OrderedDict()
        self._bytes = 0

    def load(self, path: str) -> CachedFile | None:
        try:
            info = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        key = (info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino)
        entry = self._entries.get(path)
        if entry is not None:
            if entry.key == key:
                self._entries.move_to_end(path)
                return entry
            self._forget(path)
        entry = CachedFile(key, read_text_file(path))
        if time.time() - info.st_mtime > _RACY_SECONDS and self.limit > 0:
            self._entries[path] = entry
            entry.cached = True
            self._bytes += entry.size
        return entry

    def account(self, entry: CachedFile, before: int) -> None:
        """Count growth of an entry (its lower-cased copy) and evict the oldest entries over the limit."""
        if entry.size == before or not entry.cached:
            return
        self._bytes += entry.size - before
        while self._bytes > self.limit and self._entries:
            self._forget(next(iter(self._entries)))

    def _forget(self, path: str) -> None:
        entry = self._entries.pop(path, None)
        if entry is not None:
            entry.cached = False
            self._bytes -= entry.size
