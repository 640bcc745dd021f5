"""Running each aggregate's next steps one at a time: what the workflow and loop drivers share.

A *kick* makes sure a key (a workflow id, a loop session id) is advanced soon; kicks that come while it is being
advanced coalesce into one more pass. A pass calls ``advance(key)`` (which takes steps until none is left); a
service that is restarting (``unavailable``, ``timeout``, ``conflict``) or an unexpected failure is retried after
the :data:`~autarch.runtime.retry.DRIVER_STEP` waits, and a failure a retry will not fix goes to ``fail(key,
message)`` (the aggregate records it and waits for a person).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from autarch.contracts.errors import ErrorCode
from autarch.runtime.errors import RemoteError, ServiceFailure
from autarch.runtime.retry import DRIVER_STEP

__all__ = ["Stepper"]

_RETRIED = {ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT, ErrorCode.CONFLICT}
"""A service restarting, or a session still finishing its turn: worth asking again shortly."""


class Stepper:
    """Advances keys, one pass per key at a time, with background work that ends with it."""

    def __init__(self, *, kind: str, advance: Callable[[str], Awaitable[None]],
                 fail: Callable[[str, str], Awaitable[None]], log: logging.Logger) -> None:
        self.kind = kind
        """What a key names, for log lines (``workflow``, ``loop``)."""
        self._advance = advance
        self._fail = fail
        self._log = log
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        self.stopping = False

    def kick(self, key: str) -> None:
        """Make sure ``key`` is advanced soon (coalesces kicks that come while it advances)."""
        if self.stopping:
            return
        if key in self._tasks:
            self._again.add(key)
            return
        self._tasks[key] = asyncio.create_task(self._passes(key), name=f"{self.kind}-{key}")

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` beside the steps (cancelled on stop); a failure is logged, never raised."""
        async def guarded() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                self._log.exception("%s background work failed", self.kind)

        task = asyncio.create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def tasks(self) -> list[asyncio.Task[None]]:
        return [*self._tasks.values(), *self._background]

    async def stop(self) -> None:
        self.stopping = True
        tasks = self.tasks()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _passes(self, key: str) -> None:
        waits = DRIVER_STEP.delays()
        delay = next(waits)
        try:
            while True:
                self._again.discard(key)
                try:
                    await self._advance(key)
                    waits = DRIVER_STEP.delays()
                    delay = next(waits)
                except RemoteError as exc:
                    if exc.code not in _RETRIED:
                        await self._fail(key, f"{exc.subject}: {exc.code}: {exc.message}")
                        continue
                    self._log.info("%s %s waits for %s (%s); retrying in %.1fs", self.kind, key, exc.subject,
                                   exc.code, delay)
                    await asyncio.sleep(delay)
                    delay = next(waits)
                    self._again.add(key)
                except ServiceFailure as exc:
                    self._log.warning("%s %s: %s", self.kind, key, exc)
                except Exception:
                    self._log.exception("%s %s: driving failed", self.kind, key)
                    await asyncio.sleep(delay)
                    delay = next(waits)
                    self._again.add(key)
                if key not in self._again:
                    break
        finally:
            self._tasks.pop(key, None)
