"""The embedded nats-server after its JetStream store's disk was full: restarted once the disk has room again.

A JetStream stream whose file store failed a write for lack of space ("critical write error") takes no write
again until its server restarts: every publish to it goes unanswered (the publisher times out) and the server
logs ``JetStream failed to store a msg … no space left on device`` for each, even after space came back
(nats-server 2.x; ``tests/cli/test_nats_space.py`` shows it). So the supervisor watches the store's file system:
when it was seen full, or the server's log says it could not store for lack of space, the server is restarted
once the disk has room again. Nothing is lost: what the server had stored is kept, and the relays publish again
what was not acknowledged (the stream drops a repeat by its message id).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from autarch.runtime.storage import MIN_FREE_BYTES, free_bytes

__all__ = ["FULL_BELOW", "NO_SPACE_LOGGED", "restart_after_full_disk"]

log = logging.getLogger("supervisor")

FULL_BELOW = 256 * 1024
"""Free bytes under which the store's disk counts as full (a JetStream block write needs more)."""
NO_SPACE_LOGGED = b"no space left on device"


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _new_log(path: Path, offset: int) -> tuple[bytes, int]:
    """What the log gained since ``offset`` (all of it when it was truncated), and its new size."""
    try:
        size = path.stat().st_size
    except OSError:
        return b"", offset
    if size < offset:
        offset = 0
    if size == offset:
        return b"", size
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size - offset), size


async def restart_after_full_disk(store: Path, server_log: Path, restart: Callable[[], Awaitable[None]], *,
                                  interval: float = 1.0, min_free: int = MIN_FREE_BYTES) -> None:
    """Watch ``store``'s file system (run as a task): once it was full, or ``server_log`` said a write found no
    space, call ``restart`` as soon as it has ``min_free`` bytes free again."""
    offset = _log_size(server_log)
    hit = False
    while True:
        await asyncio.sleep(interval)
        try:
            free = free_bytes(store)
        except OSError:
            continue
        gained, offset = await asyncio.to_thread(_new_log, server_log, offset)
        if not hit and (free < FULL_BELOW or NO_SPACE_LOGGED in gained.lower()):
            hit = True
            log.error("nats-server's JetStream store %s has no space left: the event stream cannot be written; "
                      "it is restarted once the disk has room", store)
        if hit and free >= min_free:
            log.warning("JetStream store %s has room again (%d MiB free): restarting nats-server, whose stream "
                        "takes writes again only after a restart", store, free // (1024 * 1024))
            hit = False
            await restart()
            offset = _log_size(server_log)
