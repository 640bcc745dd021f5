"""One operation at a time per repository; different repositories in parallel.

Two layers: an :class:`asyncio.Lock` per repository queues requests in the event loop (a
waiting request holds no thread), and an exclusive ``flock`` on ``<data dir>/git/locks/<id>.lock``,
taken inside the worker thread for the whole operation, excludes other instances sharing the
data dir. The ``flock`` is what guarantees exclusion: it is released by the thread that ran the
operation, after the operation, even if the awaiting request was cancelled meanwhile, and the
kernel releases it when a process dies (a SIGKILLed instance never leaves it held).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

__all__ = ["RepositoryLocks", "hold_file_lock"]

T = TypeVar("T")


def hold_file_lock(path: Path, fn: Callable[[], T]) -> T:
    """Run ``fn`` while holding an exclusive ``flock`` on ``path`` (blocking until it is free)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fn()
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


class RepositoryLocks:
    """Runs blocking repository operations in threads, serialised per repository."""

    def __init__(self, lock_path: Callable[[str], Path], *, max_workers: int = 8) -> None:
        self._lock_path = lock_path
        self._locks: dict[str, asyncio.Lock] = {}
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="git-op")

    async def run(self, repository_id: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread once no other operation on ``repository_id`` runs."""
        lock = self._locks.setdefault(repository_id, asyncio.Lock())
        path = self._lock_path(repository_id)
        async with lock:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, hold_file_lock, path, fn)

    def close(self) -> None:
        """Wait for running operations to finish (never abandon one half done), then stop the threads."""
        self._executor.shutdown(wait=True)
