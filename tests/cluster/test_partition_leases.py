"""Partition leases (``runtime/standby.partitioned``): instances started together share the partitions out, a
graceful stop hands its partitions over at once, and a dead instance's partitions are taken once their leases
lapse. Real leases in a real nats-server; the partitions' ``start`` only records what runs where."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

from autarch.runtime.leadership import open_leaders
from autarch.runtime.standby import partitioned

TTL = 0.8


def _settings(instance: str, partitions: int) -> SimpleNamespace:
    return SimpleNamespace(instance=instance, orchestrator_partitions=partitions, stream_replicas=1, leader_ttl=TTL)


class _Runs:
    """Which instance runs which partition right now."""

    def __init__(self) -> None:
        self.running: dict[int, str] = {}

    def starter(self, instance: str) -> Callable[..., Awaitable[Callable[[], Awaitable[None]]]]:
        async def start(_nc: object, _settings: object, partition: int) -> Callable[[], Awaitable[None]]:
            assert partition not in self.running, f"partition {partition} started twice"
            self.running[partition] = instance

            async def stop() -> None:
                self.running.pop(partition, None)

            return stop

        return start


async def _until(check: Callable[[], bool], timeout: float) -> float:
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < timeout, "timed out"
        await asyncio.sleep(0.02)
    return time.monotonic() - began


async def test_two_instances_take_one_partition_each_and_a_stop_hands_over(nc):
    name, runs = f"svc{uuid.uuid4().hex[:6]}", _Runs()
    stop_a = await partitioned(name, runs.starter("a"))(nc, _settings("a", 2))
    stop_b = await partitioned(name, runs.starter("b"))(nc, _settings("b", 2))
    await _until(lambda: len(runs.running) == 2, 5)
    # A quiet window, past the wait an instance leaves a free partition to the others: nothing moves.
    await asyncio.sleep(TTL)
    assert sorted(runs.running.values()) == ["a", "b"], runs.running
    await stop_a()  # graceful: its partition's lease is released, and b takes it without waiting out the TTL
    waited = await _until(lambda: sorted(runs.running.values()) == ["b", "b"], 5)
    assert waited < TTL + 0.5
    await stop_b()
    assert runs.running == {}


async def test_a_dead_instances_partitions_are_taken_once_their_leases_lapse(nc):
    name, runs = f"svc{uuid.uuid4().hex[:6]}", _Runs()
    stop_a = await partitioned(name, runs.starter("a"))(nc, _settings("a", 3))
    await _until(lambda: len(runs.running) == 3, 10)  # alone, it takes all three (one at a time)
    # "a" dies: its renewals stop and nothing is released (what a SIGKILL leaves behind).
    for task in asyncio.all_tasks():
        if task.get_name().startswith((f"keep-{name}", f"lead-{name}", f"run-{name}")):
            task.cancel()
    runs.running.clear()
    kv = await open_leaders(nc)
    began = time.monotonic()
    stop_b = await partitioned(name, runs.starter("b"))(nc, _settings("b", 3))
    await _until(lambda: len(runs.running) == 3, 10)
    assert set(runs.running.values()) == {"b"}
    assert time.monotonic() - began > TTL * 0.5  # not before a's leases lapsed
    holders = {(await kv.get(f"service.{name}.p{k}")).value for k in range(3)}
    assert all(b'"holder":"b"' in value for value in holders), holders
    await stop_b()
    del stop_a


async def test_one_partition_is_the_exclusive_lease(nc):
    name, runs = f"svc{uuid.uuid4().hex[:6]}", _Runs()
    stop = await partitioned(name, runs.starter("a"))(nc, _settings("a", 1))
    await _until(lambda: runs.running == {0: "a"}, 5)
    entry = await (await open_leaders(nc)).get(f"service.{name}")
    assert b'"holder":"a"' in entry.value
    await stop()


async def test_without_an_instance_name_one_process_runs_every_partition(nc):
    runs = _Runs()
    stop = await partitioned("orchestrator", runs.starter("local"))(nc, _settings("", 3))
    assert runs.running == {0: "local", 1: "local", 2: "local"}
    await stop()
    assert runs.running == {}
