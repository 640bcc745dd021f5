"""Stopping background tasks for sure: cancel, and cancel again while one carries on.

Python 3.11's ``asyncio.wait_for`` (ours, and the one inside nats-py's requests) loses a cancellation that lands
while the operation it waits for completes: it returns the result, and the cancelled task carries on as if nothing
had happened. A loop such as the relay's then goes round forever, and a ``cancel()`` followed by a ``gather`` of the
task never returns (seen: ``tests/cluster/test_relay_leader.py`` hung about once in ten runs with the relay's task
left "cancelling" at its next ``wait_for``). Cancelling again at every pause ends it at its next ``await``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["cancel_and_wait"]

_AGAIN = 0.05
"""Seconds between two cancellations of a task that is still running."""


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any] | None]) -> list[BaseException | None]:
    """Cancel ``tasks`` (None entries are skipped) and return once every one has ended, with what each raised
    (None for a task that returned; its ``CancelledError`` for one that was cancelled)."""
    todo = [t for t in tasks if t is not None]
    pending = {t for t in todo if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=_AGAIN)
    return [_outcome(t) for t in todo]


def _outcome(task: asyncio.Future[Any]) -> BaseException | None:
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception()
