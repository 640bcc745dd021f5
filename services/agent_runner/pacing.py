"""The runner's relay, paced so that its rounds stay off the turns' tool round trips.

A relay round (a store read in a worker thread, the JetStream publishes and their acks, the tracking
write: ~3 ms of wall time on the 2-core machine) that runs while a turn goes from a model reply through
its tool call to the next model request slows that round trip down: it competes with the tool call for
the runner's event loop, the GIL and NATS. Left to itself the relay starts a round as soon as a save
wakes it and, after any round that published something, at once another, so a busy turn had a round in
flight nearly all the time (delaying the wake changed nothing).

So while a turn runs, rounds start at most every :data:`INTERVAL` seconds, preferably when a turn waits
on the model (its request is on the wire and the runner has nothing else to do), otherwise when the
interval after a save is up (a long tool call's ``turn:tool_started``). A save after which its session
runs no turn (a turn completed, a session closed) starts a round at once. Nothing else changes: every
event is still published exactly once, in store order, by the same relay code; only the moment a round
starts is chosen here. The stream lags a running turn by at most about :data:`INTERVAL` plus one round;
live deltas do not go through the relay and are not delayed. Measured once, with the overhead benchmark's
sessions alternating between this pacing and none (a change not kept in the benchmark): p50 per tool
round trip 2.5-3.0 ms instead of 3.4-3.8 ms, most of the difference on the tool call's hop through NATS.

Since then the runner runs this relay on a thread of its own (``relay_thread.py``): it no longer shares the
runner's event loop or NATS connection, only the GIL, so the pacing still spares the tool round trips that.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from autarch.runtime.relay import EventRelay

from .domainmodel import Session

__all__ = ["INTERVAL", "PacedRelay"]

INTERVAL = 0.05
"""Seconds at least between two relay rounds while a turn runs; at most between a save and its round."""


@dataclass
class PacedRelay(EventRelay):
    """An :class:`EventRelay` whose rounds start when :meth:`permit` (or a save's deadline) allows."""

    interval: float = INTERVAL
    """Seconds at least between two rounds while a turn runs, and at most between a save and its round."""
    _permit: asyncio.Event = field(default_factory=asyncio.Event)
    _deadline: asyncio.TimerHandle | None = None
    _last_round: float = float("-inf")
    _released: bool = False

    def __post_init__(self) -> None:
        self._permit.set()  # the first round publishes what an earlier process left unpublished

    def permit(self) -> None:
        """Let the next round start now."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._permit.set()
        self.wake()

    def saved(self, session: Session) -> None:
        """``session``'s events were just committed."""
        self.committed(session.current_turn is not None)

    def committed(self, turn_running: bool) -> None:
        """A session's events were just committed; ``turn_running``: it runs a turn now."""
        if not turn_running or self._released:
            self.permit()
        elif self._deadline is None:
            self._deadline = asyncio.get_running_loop().call_later(self.interval, self.permit)

    def model_wait(self) -> None:
        """A turn's model request is on the wire: a good moment for a round, unless one started lately."""
        if time.monotonic() - self._last_round >= self.interval:
            self.permit()

    def release(self) -> None:
        """Stop pacing: every round starts as soon as the relay wants it (stopping)."""
        self._released = True
        self.permit()

    async def publish_pending(self) -> int:
        if not self._released:
            # Without a permit the relay still polls (the base loop's poll_interval): events another writer
            # of a shared store saved wake no permit here, and must not wait for this process's next save.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._permit.wait(), self.poll_interval)
            self._permit.clear()
        self._last_round = time.monotonic()
        try:
            published = await super().publish_pending()
        except BaseException:
            self._permit.set()  # a failed round is retried on the relay's own schedule
            raise
        if published >= self.batch:
            self._permit.set()  # a backlog: keep going
        return published

    async def stop(self, *, timeout: float = 15.0) -> None:
        self.release()
        await super().stop(timeout=timeout)
