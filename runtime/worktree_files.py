"""Reading and writing a file of a worktree from outside the sandbox, whatever an agent left there.

A worktree is the agent's to shape (docs/security.md): the name a process outside the sandbox means to open
may be a link out of the worktree, a FIFO that blocks the first ``open`` forever, a socket, a device or a
sparse file of many gigabytes, and it may change between a ``stat`` and an ``open``. Every host-side reader and
writer of a worktree file goes through here:

- a read opens with ``O_NOFOLLOW | O_NONBLOCK`` and checks what it opened with ``fstat``: only a regular file is
  read, and never more than the caller's cap (the size is known before a byte is read);
- a write goes to a new file beside the target and is renamed over it, so a link, FIFO or directory found at the
  name is replaced, never written through; a link or non-directory on the way to it is refused.
"""

from __future__ import annotations

import os
import secrets
import stat

__all__ = [
    "FileTooLarge", "NotRegularFile", "UnsafeWorktreePath", "read_regular", "remove_tree", "replace_file",
]

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotRegularFile(OSError):
    """The name is a link, FIFO, socket, device or directory: nothing was read."""


class FileTooLarge(OSError):
    """The file is larger than the reader's cap: nothing was read."""

    def __init__(self, path: str | bytes, size: int, limit: int) -> None:
        super().__init__(f"{os.fsdecode(path)} is {size} bytes, over the limit of {limit}")
        self.path = os.fsdecode(path)
        self.size = size
        self.limit = limit


class UnsafeWorktreePath(OSError):
    """A link or a non-directory stands where a directory of the path must be."""


def read_regular(path: str | bytes, *, max_bytes: int | None = None, follow: bool = False) -> bytes:
    """The content of the regular file at ``path`` (the last component is not followed unless ``follow``:
    for the user's own files outside any worktree, such as ``core.excludesFile``).

    Raises :class:`NotRegularFile`, :class:`FileTooLarge` or the ``OSError`` of the open (``FileNotFoundError``
    when it vanished).
    """
    try:
        fd = os.open(path, _READ_FLAGS & ~os.O_NOFOLLOW if follow else _READ_FLAGS)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last component is a link
            raise NotRegularFile(exc.errno, f"{os.fsdecode(path)} is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{os.fsdecode(path)} is not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileTooLarge(path, st.st_size, max_bytes)
        chunks = []
        total = 0
        # Read to the end (the file may grow while it is read), never more than one byte past the cap.
        while True:
            want = 1 << 20 if max_bytes is None else min(1 << 20, max_bytes + 1 - total)
            chunk = os.read(fd, want) if want > 0 else b""
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise FileTooLarge(path, total, max_bytes)
        data = b"".join(chunks)
        return data
    finally:
        os.close(fd)


def _check_parents(root: str, rel: str, replace: bool) -> None:
    """Make the directories of ``rel`` under ``root``; a link or a file on the way is refused (or replaced)."""
    current = root
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current)
            continue
        if not stat.S_ISDIR(st.st_mode):
            if replace:
                os.unlink(current)
                os.mkdir(current)
                continue
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise UnsafeWorktreePath(f"{current} is {kind}")


def replace_file(root: str, rel: str, data: bytes, *, replace_parents: bool = False) -> None:
    """Write ``data`` as ``root/rel``, replacing whatever is at that name (a link or FIFO is not followed).

    ``rel`` is a relative ``/``-separated path without ``..``; its directories are made as needed, and a link or
    file standing in for one of them raises :class:`UnsafeWorktreePath` (nothing is written), or with
    ``replace_parents`` is replaced by a directory (for a directory that is the service's own, such as ``.pulse``).
    A directory at the name itself raises ``IsADirectoryError``.
    """
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise UnsafeWorktreePath(f"{rel!r} is not a plain relative path")
    _check_parents(root, rel, replace_parents)
    target = os.path.join(root, rel)
    if os.path.isdir(target) and not os.path.islink(target):
        raise IsADirectoryError(f"{target} is a directory")
    tmp = os.path.join(os.path.dirname(target), f".autarch-tmp-{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Delete the directory ``path`` and everything below it, however deep (``shutil.rmtree`` recurses once per
    level and fails on a tree nested deeper than Python's recursion limit); links are removed, never followed."""
    top = os.fspath(path)
    try:
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            os.unlink(top)
            return
    except FileNotFoundError:
        return
    pending = [top]
    while pending:
        directory = pending[-1]
        subdirs = []
        with os.scandir(directory) as listing:
            for entry in listing:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.path)
                else:
                    os.unlink(entry.path)
        if subdirs:
            pending.extend(subdirs)
        else:
            os.rmdir(directory)
            pending.pop()
