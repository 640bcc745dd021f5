"""Leader leases in ``AUTARCH_LEADERS``: one holder at a time, renewal, take-over after expiry, loss noticed."""

from __future__ import annotations

import asyncio
import time
import uuid

from autarch.runtime.leadership import LeaderLease, open_leaders


async def _leases(nc, *holders: str, ttl: float = 0.6) -> list[LeaderLease]:
    kv = await open_leaders(nc)
    key = f"test.{uuid.uuid4().hex[:8]}"
    return [LeaderLease(kv=kv, key=key, holder=holder, ttl=ttl) for holder in holders]


async def test_one_holder_at_a_time_and_its_own_slot_comes_back_at_once(nc):
    a, b, a_again = await _leases(nc, "orchestrator-1", "orchestrator-2", "orchestrator-1")
    results = await asyncio.gather(a.try_acquire(), b.try_acquire())
    assert sorted(results) == [False, True]
    holder = a if a.held else b
    other = b if holder is a else a
    assert await holder.holder_now() == holder.holder
    assert not await other.try_acquire()
    # A process restarted in the holder's slot (same name) takes its lease back without waiting out the TTL.
    if holder is a:
        assert await a_again.try_acquire()


async def test_a_renewed_lease_is_kept_and_a_lapsed_one_is_taken_over(nc):
    a, b = await _leases(nc, "runner-1", "runner-2", ttl=0.6)
    assert await a.try_acquire()
    for _ in range(4):  # renewed well within the TTL: nobody else gets it
        await asyncio.sleep(0.2)
        assert await a.renew()
        assert not await b.try_acquire()
    began = time.monotonic()
    await b.acquire(poll=0.05)  # a stops renewing (it died): b gets the lease once it lapsed
    assert 0.3 < time.monotonic() - began < 3
    assert not await a.renew(), "the old holder must learn it lost the lease"
    assert not a.held and b.held


async def test_keep_calls_on_lost_when_another_holder_took_over(nc):
    a, b = await _leases(nc, "relay-a", "relay-b", ttl=0.6)
    assert await a.try_acquire()
    lost = asyncio.Event()
    first = (await a.kv.get(a.key)).revision or 0
    keeper = asyncio.create_task(a.keep(lost.set))
    deadline = time.monotonic() + 5
    while ((await a.kv.get(a.key)).revision or 0) < first + 2:  # renewed twice by the keeper
        assert time.monotonic() < deadline, "the keeper did not renew its lease twice within 5 s"
        await asyncio.sleep(0.02)
    assert not lost.is_set() and a.held  # renewing by itself
    # Someone overwrote the lease behind its back (a clock far ahead, an operator): the holder notices.
    await a.kv.put(a.key, b'{"holder": "relay-b", "expires_at": 9999999999}')
    await asyncio.wait_for(lost.wait(), 2)
    await keeper
    assert not a.held
    assert await b.try_acquire()  # the recorded holder takes it as its own


async def test_release_hands_over_at_once(nc):
    a, b = await _leases(nc, "notifier-1", "notifier-2", ttl=30)
    assert await a.try_acquire()
    assert not await b.try_acquire()
    await a.release()
    assert await b.try_acquire()
