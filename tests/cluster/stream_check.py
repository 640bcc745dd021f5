"""Reading back what relays put on ``AUTARCH_EVENTS``, to compare with the stores they relay."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from autarch.contracts import subjects

__all__ = ["relayed_ids"]


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
