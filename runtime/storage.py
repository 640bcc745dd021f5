"""Storage that cannot be written for lack of space: telling it apart, reporting it, waiting for space.

A full disk is not a bug and not the agent's fault: the write that failed is retried once space is back, and
until then every process says what it cannot write. Three pieces, shared by every service:

- :func:`storage_full` tells a failure caused by a lack of space from any other: SQLite's ``SQLITE_FULL``
  ("database or disk is full"), an ``OSError`` with ``ENOSPC`` or ``EDQUOT``, PostgreSQL's ``disk_full``
  (SQLSTATE 53100) or "could not extend file", JetStream's "insufficient (storage) resources". It follows
  the exception's causes (eventsourcing wraps the driver's error in its own).
- :data:`STORAGE` is the process's register of what it cannot write now (one :class:`StorageProblem` per
  path). Every ``TypedService`` of the process shows the register in its ``$SRV.PING`` metadata, so
  ``/healthz`` and ``autarch status`` report it; a problem is dropped once its path has room again
  (:meth:`StorageState.watch` checks the free space every ``interval`` seconds).
- :meth:`StorageState.until_space` waits for a path to have room again (a write to retry waits on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import msgspec

from autarch.contracts.errors import ErrorCode
from autarch.contracts.storage import StorageProblem

__all__ = ["MIN_FREE_BYTES", "RESERVE_BYTES", "STORAGE", "STORAGE_METADATA", "Reserve", "StorageFull",
           "StorageProblem", "StorageState", "embedded_stream_dir", "free_bytes", "problems_in", "remote_storage_full",
           "storage_full"]

log = logging.getLogger(__name__)

STORAGE_METADATA = "storage"
"""The ``$SRV.PING`` metadata key holding an instance's storage problems (a JSON list, absent when none)."""

MIN_FREE_BYTES = 4 * 1024 * 1024
"""Free bytes a path's file system must have again before its failed writes are retried: a little room after
a full disk would only fill again at the first retry."""

RESERVE_BYTES = 2 * 1024 * 1024
"""The room a store keeps aside (:class:`Reserve`) to record what it must when the disk fills."""

_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"
_JS_NO_SPACE = {10023, 10047}
"""JetStream's "insufficient resources" and "insufficient storage resources available"."""
_NO_SPACE_WORDS = ("database or disk is full", "no space left on device", "could not extend file",
                   "insufficient resources", "insufficient storage", "disk quota exceeded")


class StorageFull(Exception):
    """A write failed because ``path`` has no space left; nothing of it was recorded."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"no space left on device: {path}: {detail}")
        self.path = path
        self.detail = detail

    @property
    def problem(self) -> StorageProblem:
        return StorageProblem(path=self.path, message=f"no space left on device: {self.detail}")


def _causes(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 16:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _no_space(exc: BaseException) -> str | None:
    """Why ``exc`` (one link of a chain) is a lack of space, or None."""
    if isinstance(exc, StorageFull):
        return exc.detail
    if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL:
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return exc.strerror or os.strerror(exc.errno)
    if getattr(exc, "sqlstate", None) == _PG_DISK_FULL:  # psycopg's DiskFull, without importing psycopg
        return str(exc).strip()
    if getattr(exc, "err_code", None) in _JS_NO_SPACE:  # nats.js.errors.APIError
        return str(getattr(exc, "description", None) or exc)
    text = str(exc).lower()
    if isinstance(exc, sqlite3.Error | OSError) or type(exc).__module__.split(".")[0] in (
            "eventsourcing", "psycopg", "nats", "sqlite3"):
        for words in _NO_SPACE_WORDS:
            if words in text:
                return str(exc)
    return None


def storage_full(exc: BaseException, path: str | os.PathLike[str]) -> StorageFull | None:
    """``exc`` as a :class:`StorageFull` naming ``path`` when it (or one of its causes) is a lack of space."""
    if isinstance(exc, StorageFull):
        return exc
    for link in _causes(exc):
        detail = _no_space(link)
        if detail is not None:
            return StorageFull(str(path), detail)
    return None


def remote_storage_full(code: str, message: str, details: dict[str, object], default_path: str) -> StorageFull | None:
    """A service's error reply as a :class:`StorageFull` when it says the service had no space left: the
    ``storage_full`` code (its ``details.path``), or a failure whose words are a full disk's."""
    if code == ErrorCode.STORAGE_FULL:
        return StorageFull(str(details.get("path") or default_path), message)
    lowered = message.lower()
    if any(words in lowered for words in ("no space left on device", "database or disk is full")):
        return StorageFull(str(details.get("path") or default_path), message)
    return None


def embedded_stream_dir(data_path: str | os.PathLike[str]) -> str:
    """The embedded nats-server's JetStream store (``<data dir>/nats/jetstream``) when it is on this machine, else
    ``""`` (a remote or replicated stream: its room is not this process's to check)."""
    path = Path(data_path) / "nats" / "jetstream"
    return str(path) if path.is_dir() else ""


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Free bytes for an unprivileged writer on the file system holding ``path`` (or its nearest existing
    parent: a file that could not be created does not exist yet)."""
    target = Path(path)
    while not target.exists() and target != target.parent:
        target = target.parent
    return shutil.disk_usage(target).free


def problems_in(metadata: dict[str, str] | None) -> list[StorageProblem]:
    """The storage problems an instance reports in its ``$SRV.PING`` metadata (none when it reports none, or
    something unreadable)."""
    raw = (metadata or {}).get(STORAGE_METADATA)
    if not raw:
        return []
    try:
        return msgspec.json.decode(raw, type=list[StorageProblem])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []


class StorageState:
    """What this process cannot write now, by path; listeners hear every change (the ``$SRV.PING`` metadata)."""

    def __init__(self, *, min_free: int = MIN_FREE_BYTES, interval: float = 1.0) -> None:
        self.min_free = min_free
        self.interval = interval
        self._problems: dict[str, StorageProblem] = {}
        self._listeners: list[Callable[[list[StorageProblem]], None]] = []

    @property
    def problems(self) -> list[StorageProblem]:
        return list(self._problems.values())

    def metadata(self) -> str:
        """The problems as the ``$SRV.PING`` metadata value (``""`` when there are none)."""
        if not self._problems:
            return ""
        return json.dumps([msgspec.to_builtins(p) for p in self._problems.values()])

    def listen(self, listener: Callable[[list[StorageProblem]], None]) -> Callable[[], None]:
        """Call ``listener`` with the problems now and after each change; the returned function stops it."""
        self._listeners.append(listener)
        listener(self.problems)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def report(self, full: StorageFull) -> None:
        """``full.path`` cannot be written now."""
        problem = full.problem
        if self._problems.get(full.path) == problem:
            return
        log.error("%s", full)
        self._problems[full.path] = problem
        self._notify()

    def clear(self, path: str) -> None:
        if self._problems.pop(path, None) is not None:
            log.warning("%s has room again (%d MiB free)", path, free_bytes(path) // (1024 * 1024))
            self._notify()

    def has_room(self, path: str) -> bool:
        try:
            return free_bytes(path) >= self.min_free
        except OSError:
            return False

    async def until_space(self, path: str) -> None:
        """Return once ``path``'s file system has room again (and drop its problem)."""
        # Polled: nothing tells a process that another one freed space on the disk.
        while not self.has_room(path):  # noqa: ASYNC110
            await asyncio.sleep(self.interval)
        self.clear(path)

    async def watch(self) -> None:
        """Drop each problem whose path has room again, every ``interval`` seconds (run as a task)."""
        while True:
            for path in list(self._problems):
                if self.has_room(path):
                    self.clear(path)
            await asyncio.sleep(self.interval)

    def _notify(self) -> None:
        problems = self.problems
        for listener in list(self._listeners):
            with contextlib.suppress(Exception):
                listener(problems)


class Reserve:
    """A file of ``size`` bytes kept beside a store and given up when the disk is full, so that the store can still
    record what it must then (a workflow's halt, saying why it waits). Made again once the disk has room."""

    def __init__(self, path: Path, size: int = RESERVE_BYTES) -> None:
        self.path = path
        self.size = size

    def ensure(self) -> bool:
        """Make the reserve when it is missing and the disk has room for it and more; whether it exists."""
        if self.path.exists():
            return True
        try:
            if free_bytes(self.path) < self.size + MIN_FREE_BYTES:
                return False
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            return False
        try:
            # Allocated, not sparse: the blocks are taken now and given back by the unlink.
            os.posix_fallocate(fd, 0, self.size)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                self.path.unlink()
            return False
        os.close(fd)
        return True

    def release(self) -> bool:
        """Give the reserve's space back; whether there was any to give."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        log.error("gave up the %d KiB kept at %s to record what must be recorded", self.size // 1024, self.path)
        return True


STORAGE = StorageState()
"""This process's register (one per process: every service of the process reports the same disk)."""
