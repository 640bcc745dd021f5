"""The life of one service process: settings, logging, NATS, signals, clean shutdown.

Every ``python -m autarch.services.<name>`` does ``run_service(NAME, start)`` where ``start``
connects the service's endpoints and returns an async ``stop`` callable.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client

from .bus import close_quietly, connect
from .settings import CommonSettings, Settings, load_settings

__all__ = ["Starter", "configure_logging", "map_large_blocks", "run_service", "settle_heap"]

Starter = Callable[[Client, Any], Awaitable[Callable[[], Awaitable[None]]]]
"""A service's ``start(nc, settings)``; ``settings`` is the service's own type (``ToolsSettings``, …)."""


def configure_logging(level: str, *, name: str | None = None) -> None:
    """Plain one-line logs on stderr; the supervisor prefixes each line with the service name."""
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level.upper(), format=fmt, stream=sys.stderr, force=True)
    logging.getLogger("nats").setLevel(logging.WARNING)


def settle_heap(*, collect: bool = True) -> None:
    """Take what the process holds now (modules, classes, its app and state) out of the collector's sight.

    Python's cyclic garbage collector stops the whole process, every thread, while it runs, and a full
    collection walks every object that is alive. In a started service most of them are the imports and the
    service's own long-lived state, which will never be garbage: under 20 concurrent workflows the agent
    runner's full collections paused it for 20-80 ms at a time (its relay thread too, so the events waiting to
    be published waited as long), the scripted model's for up to 165 ms. ``gc.freeze()`` moves everything
    alive now to a generation the collector never walks; later collections walk only what was made since.

    ``collect``: first collect what is garbage already, so it is not kept for good (a full collection: done
    before the process serves anything, as it pauses it for as long as the ones this avoids).
    """
    if collect:
        gc.collect()
    gc.freeze()


M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter: the size from which a block gets its own mapping."""
LARGE_BLOCK = 128 * 1024
"""glibc's default threshold, kept for good (:func:`map_large_blocks`)."""


def map_large_blocks() -> bool:
    """Have every block of :data:`LARGE_BLOCK` or more mapped on its own, so freeing it gives its memory back.

    glibc raises its mapping threshold to the size of each mapped block freed (up to 32 MiB): after the first large
    buffer of a process is freed, later ones of that size come from the heap, and a heap cannot give back memory
    below a block still in use. A service that now and then encodes something large (the orchestrator writing the
    snapshot of a loop session of a thousand iterations: its 22 MB of JSON, as text, as bytes, and SQLite's copy)
    then keeps that much more memory for good after each one: the orchestrator's peak memory at the end of a
    1,000-iteration loop was 264-314 MB, and 179 MB with the threshold fixed (``tests/benchmarks/growth.py``).
    Setting the threshold explicitly turns glibc's adjustment off. Elsewhere than glibc (musl, macOS) nothing is
    done. Returns whether the threshold was set.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK))


def watch_children_with_pidfds() -> None:
    """Have asyncio learn of a subprocess's exit from a pidfd polled by the running loop (Linux 5.3+).

    Python 3.11's default watcher starts a thread per subprocess and blocks the loop until that thread runs:
    a fraction of a millisecond on an idle machine, up to tens of milliseconds under load (seen in the tools
    service during the 20-workflow benchmark; a preflight command is three subprocesses, ``git status`` before
    and after it), and no other call, reply or event of the service moves meanwhile. Python 3.12 and later
    pick the pidfd watcher themselves. Only for subprocesses started from this loop's thread.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an older kernel, or a seccomp filter that refuses the call
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)


async def _main(name: str, start: Starter, settings: CommonSettings) -> None:
    settle_heap()  # the imports: before the service serves anything
    watch_children_with_pidfds()
    nc = await connect(settings.effective_nats_url, name=f"autarch-{name}")
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_requested.set)
    stop = await start(nc, settings)
    settle_heap(collect=False)  # what starting built, without a pause now that requests may come in
    logging.getLogger(name).info("%s ready on %s", name, settings.effective_nats_url)
    await stop_requested.wait()
    logging.getLogger(name).info("%s stopping", name)
    await stop()
    await close_quietly(nc)


def run_service(name: str, start: Starter, settings: Settings | None = None) -> None:
    """Run one service until SIGINT/SIGTERM."""
    map_large_blocks()
    settings = settings or load_settings()
    configure_logging(settings.log_level)
    asyncio.run(_main(name, start, settings.for_service(name)))
