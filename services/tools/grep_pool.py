"""Grep worker processes: big trees are searched on every CPU, each worker keeping its own file cache.

Each path always goes to the same worker (by a CRC of the path), so a worker's
:class:`~.grep.ContentCache` holds its share of the worktree from one call to the next. Paths
are streamed to the workers while the walk is still producing them. Workers are spawned (not
forked: the service runs threads and an event loop) and exit when the service's end of their
pipe closes, so they never outlive it. One search uses the pool at a time; a concurrent one, or
a small tree, is searched in the calling thread.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import threading
import zlib
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import Any

from .grep import ContentCache, GrepPattern, compile_pattern, search_files

__all__ = ["GrepEngine"]

log = logging.getLogger("tools.grep")

_PARALLEL_MIN_FILES = 400
_CHUNK = 256
_CACHE_BYTES = 256 * 1024 * 1024


def _worker_main(conn: Connection, cache_bytes: int) -> None:
    """A worker: search the chunks it is sent; answer every file with a match when told ``end``."""
    cache = ContentCache(cache_bytes)
    found: list[tuple[str, list[int]]] = []
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        if message[0] == "chunk":
            _, root, paths, source, case_sensitive, literals = message
            pattern = compile_pattern(source, case_sensitive)
            found.extend(search_files(root, paths, pattern, literals=literals, cache=cache))
        else:  # "end"
            conn.send(found)
            found = []


class _Worker:
    def __init__(self, cache_bytes: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe(duplex=True)
        self.process = context.Process(target=_worker_main, args=(child, cache_bytes), daemon=True)
        self.process.start()
        child.close()
        if self.conn.recv() != "ready":  # pragma: no cover - protocol guard
            raise RuntimeError("grep worker did not start")

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(timeout=2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=2)
        self.conn.close()


class GrepEngine:
    """Searches files in the calling thread or across worker processes."""

    def __init__(
        self,
        *,
        workers: int = 0,
        parallel_min_files: int = _PARALLEL_MIN_FILES,
        cache_bytes: int = _CACHE_BYTES,
    ) -> None:
        self.workers = workers
        self.parallel_min_files = parallel_min_files
        self.cache_bytes = cache_bytes
        self._pool: list[_Worker] = []
        self._busy = threading.Lock()
        self._local_cache = ContentCache(cache_bytes)
        self._local_lock = threading.Lock()

    def start(self) -> None:
        """Spawn the workers (blocking: each imports the engine before it says it is ready)."""
        if self.workers > 0 and not self._pool:
            share = self.cache_bytes // self.workers
            self._pool = [_Worker(share) for _ in range(self.workers)]

    def close(self) -> None:
        pool, self._pool = self._pool, []
        for worker in pool:
            worker.stop()

    def _local(
        self, root: str, paths: Iterable[str], pattern: GrepPattern, literals: tuple[str, ...]
    ) -> list[tuple[str, list[int]]]:
        # The in-thread cache is shared by concurrent calls, so it is used by one at a time.
        if self._local_lock.acquire(blocking=False):
            try:
                return search_files(root, paths, pattern, literals=literals, cache=self._local_cache)
            finally:
                self._local_lock.release()
        return search_files(root, paths, pattern, literals=literals)

    def search(
        self,
        root: str,
        paths: Iterable[str],
        pattern: GrepPattern,
        *,
        literals: tuple[str, ...] = (),
    ) -> list[tuple[str, list[int]]]:
        """``(path, line numbers)`` of every file with a match, sorted by path."""
        paths = iter(paths)
        head = list(itertools.islice(paths, self.parallel_min_files))
        if not self._pool or len(head) < self.parallel_min_files or not self._busy.acquire(blocking=False):
            found = self._local(root, itertools.chain(head, paths), pattern, literals)
        else:
            try:
                found = self._fan_out(root, itertools.chain(head, paths), pattern, literals)
            finally:
                self._busy.release()
        found.sort(key=lambda item: item[0])
        return found

    def _fan_out(
        self, root: str, paths: Iterable[str], pattern: GrepPattern, literals: tuple[str, ...]
    ) -> list[tuple[str, list[int]]]:
        count = len(self._pool)
        buffers: list[list[str]] = [[] for _ in range(count)]
        shares: list[list[str]] = [[] for _ in range(count)]  # to search here if a worker dies
        dead: set[int] = set()
        query: tuple[Any, ...] = (pattern.source, pattern.case_sensitive, literals)

        def send(index: int, message: Any) -> None:
            if index in dead:
                return
            try:
                self._pool[index].conn.send(message)
            except OSError:
                dead.add(index)

        for rel in paths:
            index = zlib.crc32(rel.encode("utf-8", "surrogateescape")) % count
            buffers[index].append(rel)
            shares[index].append(rel)
            if len(buffers[index]) >= _CHUNK:
                send(index, ("chunk", root, buffers[index], *query))
                buffers[index] = []
        for index in range(count):
            if buffers[index]:
                send(index, ("chunk", root, buffers[index], *query))
            send(index, ("end",))
        found: list[tuple[str, list[int]]] = []
        for index, worker in enumerate(self._pool):
            if index not in dead:
                try:
                    found.extend(worker.conn.recv())
                    continue
                except (EOFError, OSError):
                    dead.add(index)
            log.warning("grep worker %d died; searching its share here and restarting it", index)
            found.extend(search_files(root, shares[index], pattern, literals=literals))
            worker.stop()
            self._pool[index] = _Worker(self.cache_bytes // count)
        return found
