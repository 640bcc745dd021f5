"""Reading back what relays put on ``AUTARCH_EVENTS``, to compare with the stores they relay."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from autarch.contracts import subjects

__all__ = ["check_stores_against_stream", "relayed_ids", "store_vs_stream"]


async def relayed_ids(nc: Client, prefix: str, *, quiet: float = 1.0) -> Counter[str]:
    """How many times each ``Nats-Msg-Id`` starting with ``prefix`` is on the stream (read to its end)."""
    js = nc.jetstream()
    last = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    seen: Counter[str] = Counter()
    if last == 0:
        return seen
    sub = await js.subscribe(subjects.EVENTS_ALL, stream=subjects.EVENTS_STREAM, ordered_consumer=True,
                             config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                msg = await asyncio.wait_for(sub.next_msg(timeout=quiet), quiet + 1)
                msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
                if msg_id.startswith(prefix):
                    seen[msg_id] += 1
                if msg.metadata.sequence.stream >= last:
                    return seen
                continue
            return seen
    finally:
        await sub.unsubscribe()


def store_vs_stream(stored: list, to_contract: Callable[[Any], Any], app: Any, on_stream: Counter[str],
                    prefix: str) -> tuple[set[str], set[str], list[str]]:
    """(missing from the stream, on the stream but not in the store, doubled) for one store's notifications."""
    expected = {f"{prefix}{n.id}" for n in stored if to_contract(app.mapper.to_domain_event(n)) is not None}
    return expected - set(on_stream), set(on_stream) - expected, [k for k, n in on_stream.items() if n > 1]


async def check_stores_against_stream(nc: Client, postgres_url: str) -> dict[str, int]:
    """Every distributed event of the orchestrator's and the agent runner's PostgreSQL stores is on the stream
    exactly once, and nothing else of theirs is; how many each store has there."""
    from autarch.runtime.eventstore import event_store_env
    from autarch.runtime.settings import Settings
    from autarch.services.agent_runner.application import SessionApplication
    from autarch.services.agent_runner.contract_events import ContractMapper
    from autarch.services.orchestrator.application import WorkflowApplication
    from autarch.services.orchestrator.workflow.views import to_contract

    settings = Settings(postgres_url=postgres_url)
    counts = {}
    for name, cls, mapper in (("orchestrator", WorkflowApplication, to_contract),
                              ("agent_runner", SessionApplication, ContractMapper(run_of=lambda _sid: None))):
        app = cls(env=event_store_env(settings, name))
        try:
            stored = app.recorder.select_notifications(start=1, limit=1_000_000)
            assert stored, f"the {name} store is empty"
            prefix = f"{name}:{stored[0].originator_id.hex[:12]}:"
            on_stream = await relayed_ids(nc, prefix)
            missing, foreign, doubled = store_vs_stream(stored, mapper, app, on_stream, prefix)  # type: ignore[arg-type]  # a Sequence
            assert not missing, f"{len(missing)} {name} events missing from the stream: {sorted(missing)[:5]}"
            assert not foreign, f"{len(foreign)} {name} events on the stream are not in its store"
            assert not doubled, f"{name} events on the stream twice: {doubled[:5]}"
            counts[name] = sum(on_stream.values())
        finally:
            app.close()
    return counts
