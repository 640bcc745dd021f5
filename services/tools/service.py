"""The tools service on NATS: ``call``, ``list_tools``, ``file_access`` and ``cancel`` (queue group ``tools``)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable

from nats.aio.client import Client

from autarch.contracts.tools import (
    CALL,
    CANCEL,
    FILE_ACCESS,
    LIST_TOOLS,
    CancelToolCall,
    GetFileAccess,
    ListTools,
    ToolCall,
)
from autarch.runtime.micro import TypedService
from autarch.runtime.settings import Settings

from .cancelling import CancelRouter
from .context import Forwarder, ToolSettings
from .executor import ToolExecutor
from .grep_pool import GrepEngine
from .sensitivity import Redactor, platform_secret_values
from .store import SessionStore

__all__ = ["build_executor", "start"]

log = logging.getLogger("tools")

_KEEP_SESSIONS_SECONDS = 14 * 24 * 3600


def build_executor(settings: Settings, *, nc: Client | None = None, grep_workers: int | None = None) -> ToolExecutor:
    """An executor with its store under ``<data dir>/tools/`` (grep workers are not started yet)."""
    workers = grep_workers if grep_workers is not None else settings.tools_grep_workers
    if workers is None:
        cpus = os.cpu_count() or 1
        workers = cpus if cpus > 1 else 0
    store = SessionStore(settings.data_path / "tools" / "sessions.sqlite3")
    secrets = [*platform_secret_values(), *(v for v in (settings.exa_api_key, settings.anthropic_api_key) if v)]
    return ToolExecutor(
        store=store,
        engine=GrepEngine(workers=workers),
        forwarder=Forwarder(nc, timeout=settings.request_timeout, restart_grace=settings.restart_grace),
        settings=ToolSettings(
            exa_api_key=settings.exa_api_key,
            exa_base_url=settings.exa_base_url,
            shell_output_chars=settings.tools_shell_output_chars,
        ),
        redactor=Redactor(secrets),
    )


async def start(nc: Client, settings: Settings) -> Callable[[], Awaitable[None]]:
    """Open the session store, start the grep workers and serve the endpoints."""
    executor = build_executor(settings, nc=nc)
    await asyncio.to_thread(executor.store.prune, older_than=time.time() - _KEEP_SESSIONS_SECONDS)
    await asyncio.to_thread(executor.engine.start)
    router = CancelRouter(executor, nc)
    await router.start()
    service = TypedService(nc, name="tools", description="Every agent tool of seed 004, confined to a worktree")
    service.endpoint(CALL, ToolCall, executor.call)
    service.endpoint(LIST_TOOLS, ListTools, executor.list_tools)
    service.endpoint(FILE_ACCESS, GetFileAccess, executor.file_access)
    service.endpoint(CANCEL, CancelToolCall, router.cancel)
    await service.start()
    log.info("tools: session store %s, %d grep workers", executor.store.path, executor.engine.workers)

    async def stop() -> None:
        await service.stop()
        await router.stop()
        await asyncio.to_thread(executor.close)

    return stop
