"""Path confinement: every path an agent gives stays inside the worktree.

A path is refused when it is absolute, contains ``..``, or resolves (through a symlink in any
component) to a place outside the worktree. What is accepted is then opened component by
component from a directory descriptor of the root with ``O_NOFOLLOW``: the resolved path has no
symlinks in it, so a symlink swapped in after the check makes the open fail instead of escaping.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FileMissing", "NotAFile", "PathRefused", "Resolved", "Worktree"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class PathRefused(Exception):
    """The path is outside the worktree (or malformed); the message says why, for the model."""


class FileMissing(Exception):
    """The path is inside the worktree but nothing (or not the expected kind of thing) is there."""


class NotAFile(FileMissing):
    """The path names a directory, a device or a FIFO where a regular file is needed."""


@dataclass(frozen=True)
class Resolved:
    """A confined path: ``rel`` as the agent named it (normalized), ``real`` with symlinks resolved."""

    rel: str
    real: str
    """Relative to the root, no symlink in any component (at the time of the check); ``""`` is the root."""


class Worktree:
    """The root every relative path of one tool call is confined to."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.realpath(root)

    @property
    def path(self) -> Path:
        return Path(self.root)

    def normalize(self, path: str, *, allow_root: bool = False) -> str:
        """The agent's ``path`` as a clean relative POSIX path; refuses absolute paths and ``..``."""
        if "\x00" in path:
            raise PathRefused(f"Invalid path (contains a NUL byte): {path!r}")
        if path.startswith(("/", "~")) or (len(path) > 1 and path[1] == ":" and path[0].isalpha()):
            raise PathRefused(f"Path must be relative to the worktree root: {path}")
        parts = [part for part in path.split("/") if part not in ("", ".")]
        if ".." in parts:
            raise PathRefused(f"Path escapes the worktree root: {path}")
        if not parts and not allow_root:
            raise PathRefused("Path is empty")
        return "/".join(parts)

    def resolve(self, path: str, *, allow_root: bool = False) -> Resolved:
        """Normalize ``path`` and resolve its symlinks; refuse anything that lands outside the root."""
        rel = self.normalize(path, allow_root=allow_root)
        real = os.path.realpath(os.path.join(self.root, rel)) if rel else self.root
        if real == self.root:
            return Resolved(rel=rel, real="")
        if not real.startswith(self.root + os.sep):
            raise PathRefused(f"Path resolves outside the worktree root: {path}")
        return Resolved(rel=rel, real=real[len(self.root) + 1 :])

    def absolute(self, resolved: Resolved) -> str:
        return os.path.join(self.root, resolved.real) if resolved.real else self.root

    # -- descriptors -------------------------------------------------------------------------

    def _open_dir(self, parts: list[str], *, create: bool = False) -> int:
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts:
                if create:
                    try:
                        os.mkdir(part, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    raise FileMissing(part) from None
                except (NotADirectoryError, OSError) as exc:
                    if isinstance(exc, PermissionError):
                        raise
                    raise NotAFile(part) from None
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            os.close(fd)
            raise

    def read_bytes(self, resolved: Resolved, *, limit: int | None = None) -> bytes:
        """The content of a regular file; raises :class:`FileMissing` / :class:`NotAFile`."""
        if not resolved.real:
            raise NotAFile(resolved.rel)
        *dirs, name = resolved.real.split("/")
        dfd = self._open_dir(dirs)
        try:
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
            except FileNotFoundError:
                raise FileMissing(resolved.rel) from None
            except OSError as exc:  # ELOOP: a symlink appeared after the check
                raise FileMissing(f"{resolved.rel}: {exc.strerror}") from None
        finally:
            os.close(dfd)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise NotAFile(resolved.rel)
            if limit is not None and info.st_size > limit:
                raise OverflowError(info.st_size)
            chunks = []
            while True:
                chunk = os.read(fd, max(info.st_size + 1, 65536))
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def kind(self, resolved: Resolved) -> str | None:
        """``"file"``, ``"dir"``, ``"other"`` or None when nothing is there (never follows a symlink)."""
        try:
            info = os.lstat(self.absolute(resolved))
        except OSError:
            return None
        if stat.S_ISDIR(info.st_mode):
            return "dir"
        if stat.S_ISREG(info.st_mode):
            return "file"
        return "other"

    def write_bytes(self, resolved: Resolved, data: bytes) -> int:
        """Atomically replace (or create) a regular file, creating parent directories."""
        if not resolved.real:
            raise NotAFile(resolved.rel)
        *dirs, name = resolved.real.split("/")
        dfd = self._open_dir(dirs, create=True)
        try:
            mode = 0o666
            try:
                info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is not None:
                if not stat.S_ISREG(info.st_mode):
                    raise NotAFile(resolved.rel)
                mode = stat.S_IMODE(info.st_mode)
            tmp = f".{name}.{secrets.token_hex(4)}.autarch-tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
            try:
                if info is not None:
                    os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            except BaseException:
                os.close(fd)
                os.unlink(tmp, dir_fd=dfd)
                raise
            os.close(fd)
            try:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                os.unlink(tmp, dir_fd=dfd)
                raise
            return len(data)
        finally:
            os.close(dfd)
