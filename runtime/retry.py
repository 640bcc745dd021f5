"""One way to retry: exponential backoff policies, named in one place, and :func:`retry` that applies one.

Every retry loop in Autarch uses a :class:`Backoff` from this module, so how hard each part of the system
insists is read here, not hunted for in loops:

=========================  ========  =========  ======================================================
policy                     first     at most    used by
=========================  ========  =========  ======================================================
``REQUEST_UNAVAILABLE``    0.05 s    0.5 s      a request nobody answers yet (a service restarting)
``GATEWAY_REQUEST``        0.1 s     0.1 s      the gateway re-asking an idempotent request
``RELAY_PUBLISH``          0.1 s     5 s        a relay that cannot read its store or publish
``PULL_REQUEST``           0.5 s     0.5 s      a pull consumer that cannot send its pull request
``SUPERVISOR_RESTART``     0.25 s    10 s       the supervisor restarting a child or nats-server
``MODEL_STREAM``           0.5 s     8 s        a model stream answered 429/529/5xx (jittered 25 %)
``DRIVER_STEP``            0.2 s     5 s        a workflow's or loop session's next step waiting for a service
=========================  ========  =========  ======================================================
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "DRIVER_STEP",
    "GATEWAY_REQUEST",
    "MODEL_STREAM",
    "PULL_REQUEST",
    "RELAY_PUBLISH",
    "REQUEST_UNAVAILABLE",
    "SUPERVISOR_RESTART",
    "WRITE_CONFLICT",
    "Backoff",
    "retry",
]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """An exponential backoff: ``initial``, then ``factor`` times the last, never above ``max_delay``."""

    initial: float
    """Seconds before the first retry."""
    max_delay: float
    """Longest wait between two tries, in seconds."""
    factor: float = 2.0
    """What each wait is multiplied by for the next one (1: a fixed interval)."""
    jitter: float = 0.0
    """Fraction taken off each wait at random (0.25: between 75 % and 100 % of it), so that many clients
    retrying the same server do not all come back at once."""

    def __post_init__(self) -> None:
        if self.initial < 0 or self.max_delay < self.initial:
            raise ValueError(f"Backoff needs 0 <= initial <= max_delay, got {self.initial} and {self.max_delay}")
        if self.factor < 1:
            raise ValueError(f"Backoff factor must be 1 or more, got {self.factor}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"Backoff jitter must be in [0, 1), got {self.jitter}")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first)."""
        base = min(self.initial * self.factor ** (retry - 1), self.max_delay)
        return base * (1 - self.jitter * random.random()) if self.jitter else base

    def delays(self) -> Iterator[float]:
        """The waits before the first, second, … retry, endlessly."""
        retry = 0
        while True:
            retry += 1
            yield self.delay(retry)


REQUEST_UNAVAILABLE = Backoff(initial=0.05, max_delay=0.5)
"""A NATS request that got "no responders": the service is restarting; ask again soon and often."""
GATEWAY_REQUEST = Backoff(initial=0.1, max_delay=0.1)
"""The gateway re-asking an idempotent request that timed out or found no service, until its deadline."""
RELAY_PUBLISH = Backoff(initial=0.1, max_delay=5.0)
"""A relay whose store or NATS failed (NATS away, stream missing, database locked): nothing is lost."""
PULL_REQUEST = Backoff(initial=0.5, max_delay=0.5)
"""A pull consumer whose pull request could not be published (the client reconnects meanwhile)."""
SUPERVISOR_RESTART = Backoff(initial=0.25, max_delay=10.0)
"""The supervisor restarting a child process or the embedded nats-server that exited."""
MODEL_STREAM = Backoff(initial=0.5, max_delay=8.0, jitter=0.25)
"""A model stream that failed with an overload, a rate limit, a 5xx or a lost connection."""
WRITE_CONFLICT = Backoff(initial=0.05, max_delay=2.0, jitter=0.25)
"""A save refused because another writer of the shared store recorded the aggregate's next version first (a
standby that took over, its paused predecessor's work in flight): read it again and decide once more."""
DRIVER_STEP = Backoff(initial=0.2, max_delay=5.0)
"""The orchestrator's drivers re-trying a workflow's or a loop session's next step while a service it needs
restarts, or after an unexpected failure (a step succeeding starts the waits over)."""


async def retry(
    call: Callable[[], Awaitable[T]],
    *,
    policy: Backoff,
    name: str,
    retry_on: Callable[[Exception], bool],
    attempts: int | None = None,
    deadline: float | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    log_level: int = logging.WARNING,
) -> T:
    """Await ``call()`` until it returns, waiting ``policy``'s delays between failed tries.

    Args:
        call: makes one try (a new awaitable each time).
        policy: the waits between tries.
        name: what is being tried, for the log line of each retry.
        retry_on: whether a failure is worth another try; any other exception propagates at once.
        attempts: tries in all (unset: no limit); after the last, its exception propagates.
        deadline: ``asyncio`` loop time after which no retry starts: a retry whose wait would end past it is
            not made, and the last exception propagates (unset: no deadline).
        sleep: how to wait (a wait that a stop request can cut short, a fake clock in tests).
        log_level: level of the "retrying" log line (``DEBUG`` where retries are routine).
    """
    loop = asyncio.get_running_loop()
    tries = 0
    for delay in policy.delays():
        tries += 1
        try:
            return await call()
        except Exception as exc:
            if not retry_on(exc):
                raise
            if attempts is not None and tries >= attempts:
                raise
            if deadline is not None and loop.time() + delay > deadline:
                raise
            log.log(log_level, "%s: %s; retrying in %.2fs (try %d)", name, exc or type(exc).__name__, delay,
                    tries + 1)
        await sleep(delay)
    raise AssertionError("unreachable: Backoff.delays() never ends")
