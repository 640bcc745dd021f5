"""The life of one service process: settings, logging, NATS, signals, clean shutdown.

Every ``python -m autarch.services.<name>`` does ``run_service(NAME, start)`` where ``start``
connects the service's endpoints and returns an async ``stop`` callable.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client

from .bus import close_quietly, connect
from .settings import CommonSettings, Settings, load_settings

__all__ = ["Starter", "configure_logging", "run_service"]

Starter = Callable[[Client, Any], Awaitable[Callable[[], Awaitable[None]]]]
"""A service's ``start(nc, settings)``; ``settings`` is the service's own type (``ToolsSettings``, …)."""


def configure_logging(level: str, *, name: str | None = None) -> None:
    """Plain one-line logs on stderr; the supervisor prefixes each line with the service name."""
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level.upper(), format=fmt, stream=sys.stderr, force=True)
    logging.getLogger("nats").setLevel(logging.WARNING)


async def _main(name: str, start: Starter, settings: CommonSettings) -> None:
    nc = await connect(settings.effective_nats_url, name=f"autarch-{name}")
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_requested.set)
    stop = await start(nc, settings)
    logging.getLogger(name).info("%s ready on %s", name, settings.effective_nats_url)
    await stop_requested.wait()
    logging.getLogger(name).info("%s stopping", name)
    await stop()
    await close_quietly(nc)


def run_service(name: str, start: Starter, settings: Settings | None = None) -> None:
    """Run one service until SIGINT/SIGTERM."""
    settings = settings or load_settings()
    configure_logging(settings.log_level)
    asyncio.run(_main(name, start, settings.for_service(name)))
