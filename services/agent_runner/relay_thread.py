"""The runner's relay on a thread of its own: its own event loop and its own NATS connection.

Under 20 concurrent workflows on a busy 2-core machine, a relay round on the runner's event loop waited behind
the turns' work there (the SDK's request building and stream decoding for every session): each step of the
round (the store read's hop to a worker thread and back, the JetStream acks, the tracking write's hop) is a
callback that queues behind theirs. On a loop of its own a step waits at most for the GIL, which the
interpreter hands over every few milliseconds. Measured with ``tests/benchmarks/workflows.py``, three runs
each, alternated: ``turn`` events reached SSE after p50 50-83 ms and p99 0.20-0.47 s before, 30-38 ms and
0.11-0.15 s after; the runner spent 2.9-3.3 CPU seconds instead of 2.5-2.9 (more, smaller rounds).

Nothing else changes: the same :class:`~.pacing.PacedRelay` (so the same ``EventRelay``) publishes every event
exactly once and in store order; the runner tells it of saves and model waits with
``call_soon_threadsafe``, and on stop it finishes its round, publishes what is left and closes its connection
before the store is closed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from eventsourcing.application import Application
from nats.aio.client import Client

from autarch.runtime.bus import close_quietly, connect

from .contract_events import ContractMapper
from .domainmodel import Session
from .pacing import PacedRelay

__all__ = ["RelayThread"]


class RelayThread:
    """A :class:`PacedRelay` running on its own thread; its methods are called from the runner's loop."""

    def __init__(self, *, app: Application, nc: Client, run_of: Callable[[str], str | None],
                 store_path: str = "", stream_path: str = "", **pacing: float) -> None:
        """``pacing``: :class:`PacedRelay`'s ``interval`` and ``poll_interval`` when not the defaults (tests);
        ``store_path``, ``stream_path``: what the relay's storage problems name (``EventRelay``)."""
        self._app = app
        self._paths: dict[str, Any] = {"store_path": store_path, "stream_path": stream_path}
        self._pacing: dict[str, Any] = pacing
        # The runner's connection names the servers (a cluster's list included); the relay opens its own to them.
        self._servers = ",".join(uri.geturl() for uri in nc.servers)
        self._mapper = ContractMapper(run_of=run_of)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="agent-runner-relay", daemon=True)
        self._nc: Client | None = None
        self.relay: PacedRelay | None = None

    @property
    def alive(self) -> bool:
        """Whether the relay's thread runs."""
        return self._thread.is_alive()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _on_thread(self, make: Callable[[], Any]) -> Any:
        """Run the coroutine ``make()`` on the relay's loop and wait for it here."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(make(), self._loop))

    async def start(self) -> None:
        self._thread.start()

        async def open_relay() -> None:
            self._nc = await connect(self._servers, name="autarch-agent_runner-relay")
            self.relay = PacedRelay(app=self._app, nc=self._nc, to_contract=self._mapper, **self._paths,
                                    **self._pacing)
            self.relay.start()

        try:
            await self._on_thread(open_relay)
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise

    def saved(self, session: Session) -> None:
        """``session``'s events were just committed (read here: the session is the runner loop's to change)."""
        turn_running = session.current_turn is not None
        if self.relay is not None:
            self._loop.call_soon_threadsafe(self.relay.committed, turn_running)

    def model_wait(self) -> None:
        """A turn's model request is on the wire."""
        if self.relay is not None:
            self._loop.call_soon_threadsafe(self.relay.model_wait)

    async def stop(self, *, last_round_timeout: float = 5.0) -> str | None:
        """Finish the round in flight, publish what is left, close the connection and end the thread.

        Returns why the last round failed (then what is left waits for the next start: nothing is lost), or None.
        A second stop (a service stopped twice) finds the thread ended and does nothing.
        """
        if not self._thread.is_alive():
            return None
        relay, failure = self.relay, None
        if relay is not None:
            async def close() -> str | None:
                # The loop's own round first, then one more: a last round beside the loop's would record the same
                # tracking position twice.
                await relay.stop()
                try:
                    await asyncio.wait_for(relay.publish_pending(), timeout=last_round_timeout)
                    return None
                except Exception as exc:
                    return str(exc) or type(exc).__name__
                finally:
                    if self._nc is not None:
                        await close_quietly(self._nc)

            failure = await self._on_thread(close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join, 10)
        return failure
