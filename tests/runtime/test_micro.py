"""Typed endpoints and typed requests over a real nats-server."""

from __future__ import annotations

import asyncio
import json
import time

import msgspec
import pytest

from autarch.contracts.errors import ErrorCode
from autarch.runtime.errors import RemoteError, ServiceFailure
from autarch.runtime.micro import TypedService
from autarch.runtime.requests import request


class Echo(msgspec.Struct, kw_only=True):
    text: str
    delay: float = 0.0


class Echoed(msgspec.Struct, kw_only=True):
    text: str


async def _echo(req: Echo) -> Echoed:
    if req.text == "missing":
        raise ServiceFailure.not_found("no such thing", thing=req.text)
    if req.text == "boom":
        raise ZeroDivisionError("bug")
    if req.text.startswith("huge:"):
        return Echoed(text="x" * int(req.text[5:]))
    if req.text == "late":
        await asyncio.sleep(req.delay)
        raise ServiceFailure(ErrorCode.UNAVAILABLE, "gave up late")
    await asyncio.sleep(req.delay)
    return Echoed(text=req.text.upper())


@pytest.fixture
async def echo_service(nc):
    svc = TypedService(nc, name="echo_test", description="test service")
    svc.endpoint("echo", Echo, _echo, subject="test.echo")
    await svc.start()
    yield svc
    await svc.stop()


async def test_typed_round_trip(nc, echo_service):
    assert await request(nc, "test.echo", Echo(text="hi"), Echoed) == Echoed(text="HI")


async def test_garbage_payload_is_a_typed_bad_request_and_service_survives(nc, echo_service):
    for garbage in (b"not json", b'{"text": 5}', b"{}", b"\xff\xfe"):
        msg = await nc.request("test.echo", garbage, timeout=2)
        assert msg.headers["Autarch-Error"] == ErrorCode.BAD_REQUEST
        assert msg.headers["Nats-Service-Error-Code"] == "400"
    assert await request(nc, "test.echo", Echo(text="still up"), Echoed) == Echoed(text="STILL UP")


async def test_an_answer_over_the_bus_limit_is_a_typed_refusal_not_a_timeout(nc, echo_service):
    started = time.monotonic()
    with pytest.raises(RemoteError) as err:
        await request(nc, "test.echo", Echo(text=f"huge:{nc.max_payload + 1}"), Echoed, timeout=10)
    assert err.value.code == ErrorCode.BAD_REQUEST and "size limit" in err.value.message
    assert err.value.reply.details["reply_bytes"] > nc.max_payload
    assert time.monotonic() - started < 5  # answered, not waited out
    assert await request(nc, "test.echo", Echo(text="still up"), Echoed) == Echoed(text="STILL UP")


async def test_handler_failures_are_typed(nc, echo_service):
    with pytest.raises(RemoteError) as missing:
        await request(nc, "test.echo", Echo(text="missing"), Echoed)
    assert missing.value.code == ErrorCode.NOT_FOUND
    assert missing.value.reply.details == {"thing": "missing"}
    with pytest.raises(RemoteError) as bug:
        await request(nc, "test.echo", Echo(text="boom"), Echoed)
    assert bug.value.code == ErrorCode.INTERNAL
    assert "ZeroDivisionError" in bug.value.message


async def test_requests_are_handled_concurrently(nc, echo_service):
    loop = asyncio.get_running_loop()
    started = loop.time()
    replies = await asyncio.gather(*(request(nc, "test.echo", Echo(text=str(i), delay=0.3), Echoed) for i in range(20)))
    assert [r.text for r in replies] == [str(i) for i in range(20)]
    assert loop.time() - started < 3.0  # serial handling would take 6 s


async def test_no_responders_and_timeout_are_typed(nc, echo_service):
    with pytest.raises(RemoteError) as none:
        await request(nc, "test.nobody", Echo(text="x"), Echoed, timeout=1)
    assert none.value.code == ErrorCode.UNAVAILABLE
    with pytest.raises(RemoteError) as slow:
        await request(nc, "test.echo", Echo(text="x", delay=2), Echoed, timeout=0.2)
    assert slow.value.code == ErrorCode.TIMEOUT


async def test_service_answers_srv_ping(nc, echo_service):
    msg = await nc.request("$SRV.PING.echo_test", b"", timeout=2)
    assert msgspec.json.decode(msg.data)["name"] == "echo_test"


async def _stats(nc, svc) -> dict:
    msg = await nc.request(f"$SRV.STATS.{svc.name}.{svc.instance_id}", b"", timeout=2)
    (endpoint,) = json.loads(msg.data)["endpoints"]
    return endpoint


async def test_stats_count_what_happened(nc, echo_service):
    """Requests run in their own tasks, yet ``$SRV.STATS`` counts their errors and their whole time."""
    assert (await _stats(nc, echo_service))["num_requests"] == 0
    with pytest.raises(RemoteError) as late:
        await request(nc, "test.echo", Echo(text="late", delay=0.15), Echoed)
    assert late.value.code == ErrorCode.UNAVAILABLE
    stats = await _stats(nc, echo_service)
    assert (stats["num_requests"], stats["num_errors"]) == (1, 1)
    assert stats["processing_time"] >= 150_000_000
    assert stats["average_processing_time"] == stats["processing_time"]
    assert stats["last_error"] == "unavailable: gave up late"
    assert stats["data"] == {"in_flight": 0}

    await request(nc, "test.echo", Echo(text="fine"), Echoed)
    with pytest.raises(RemoteError):
        await request(nc, "test.echo", Echo(text="boom"), Echoed)
    await nc.request("test.echo", b"not json", timeout=2)
    stats = await _stats(nc, echo_service)
    assert (stats["num_requests"], stats["num_errors"]) == (4, 3)  # a bad payload is an error reply too
    assert stats["last_error"].startswith("bad_request: invalid echo payload")

    slow = asyncio.create_task(request(nc, "test.echo", Echo(text="slow", delay=2.0), Echoed))
    deadline = time.monotonic() + 2.0  # the slow request is counted as soon as it runs, long before it ends
    while (stats := await _stats(nc, echo_service))["num_requests"] < 5 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert not slow.done()
    assert stats["num_requests"] == 5
    assert stats["data"] == {"in_flight": 1}
    assert (await slow).text == "SLOW"
    stats = await _stats(nc, echo_service)
    assert (stats["num_errors"], stats["data"]) == (3, {"in_flight": 0})
    assert stats["average_processing_time"] == stats["processing_time"] // 5


async def test_a_service_holding_requests_until_loaded_answers_ping_first_and_each_request_after_the_load(nc):
    """A service that serves before it has loaded its state (``hold_until_loaded``): ``$SRV.PING`` answers at once
    (a health check sees it up), a request sent meanwhile waits, held, and is answered by the handler only once the
    load is done."""
    state: dict[str, str] = {}

    async def from_state(req: Echo) -> Echoed:
        return Echoed(text=state[req.text])

    svc = TypedService(nc, name="loading_test")
    svc.endpoint("echo", Echo, from_state, subject="test.loading")
    loaded = svc.hold_until_loaded()
    await svc.start()
    try:
        assert msgspec.json.decode((await nc.request("$SRV.PING.loading_test", b"", timeout=2)).data)["name"] == (
            "loading_test")
        waiting = asyncio.create_task(request(nc, "test.loading", Echo(text="a"), Echoed, timeout=10))
        deadline = time.monotonic() + 5.0
        while (stats := await _stats(nc, svc))["num_requests"] < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert stats["data"] == {"in_flight": 1} and not waiting.done()  # received, and held: not answered
        state["a"] = "loaded"  # the handler would fail (KeyError) had it run before this
        loaded(None)
        assert await waiting == Echoed(text="loaded")
        assert await request(nc, "test.loading", Echo(text="a"), Echoed) == Echoed(text="loaded")
    finally:
        await svc.stop()


async def test_a_load_that_fails_answers_the_waiting_requests_with_its_error(nc):
    async def never(req: Echo) -> Echoed:
        raise AssertionError("the handler runs only on a loaded state")

    svc = TypedService(nc, name="failing_load_test")
    svc.endpoint("echo", Echo, never, subject="test.failing_load")
    loaded = svc.hold_until_loaded()
    await svc.start()
    try:
        waiting = asyncio.create_task(request(nc, "test.failing_load", Echo(text="a"), Echoed, timeout=10))
        deadline = time.monotonic() + 5.0
        while (await _stats(nc, svc))["num_requests"] < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        loaded(ServiceFailure(ErrorCode.UNAVAILABLE, "the store could not be read"))
        with pytest.raises(RemoteError) as failed:
            await waiting
        assert (failed.value.code, failed.value.message) == (ErrorCode.UNAVAILABLE, "the store could not be read")
        with pytest.raises(RemoteError) as later:
            await request(nc, "test.failing_load", Echo(text="b"), Echoed, timeout=2)
        assert later.value.code == ErrorCode.UNAVAILABLE
    finally:
        await svc.stop()
