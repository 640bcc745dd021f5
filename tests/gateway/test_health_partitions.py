"""How ``/healthz`` and ``autarch status`` judge a service from its ``$SRV.PING`` answers: one answer is enough,
except for the orchestrator split in partitions, which is up only while every partition answers."""

from __future__ import annotations

from autarch.gateway.health import partitions_served, service_up


def _answer(partition: str | None = None) -> dict:
    metadata = {"host": "h"} if partition is None else {"host": "h", "partition": partition}
    return {"type": "io.nats.micro.v1.ping_response", "name": "orchestrator", "metadata": metadata}


def test_an_unpartitioned_service_is_up_with_one_answer() -> None:
    assert service_up([_answer()]) and not service_up([])
    assert service_up([_answer("0/1")])
    assert partitions_served([_answer("0/1")]) == (1, {0})


def test_a_partitioned_orchestrator_is_up_only_with_every_partition() -> None:
    assert service_up([_answer("1/2"), _answer("0/2")])
    assert not service_up([_answer("1/2")]), "partition 0 is between two holders: down"
    assert not service_up([_answer("1/3"), _answer("0/3")])
    assert partitions_served([_answer("2/3"), _answer("0/3"), _answer()]) == (3, {0, 2})


def test_answers_without_readable_partitions_count_as_instances_only() -> None:
    garbled = [_answer("x/2"), _answer("1-2"), {"metadata": None}, {}]
    assert partitions_served(garbled) == (0, set())
    assert service_up(garbled)


async def test_a_service_nobody_serves_yet_is_down_not_counted_from_the_servers_no_responders(nc) -> None:
    """A ping nobody answers gets the server's "no responders" status: that is no instance (a service still
    rebuilding its state at start has not registered its endpoints yet)."""
    from autarch.gateway.health import check_health, ping_service
    from autarch.runtime.micro import TypedService

    assert await ping_service(nc, "nobody-serves-this") == []
    health = await check_health(nc, ["nobody-serves-this"])
    assert health.status == "degraded" and not health.services["nobody-serves-this"].ok
    service = TypedService(nc, name="serves-this", description="a test service")
    await service.start()
    try:
        assert (await check_health(nc, ["serves-this"])).status == "ok"
    finally:
        await service.stop()
