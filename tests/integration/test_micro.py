"""Typed endpoints and typed requests over a real nats-server."""

from __future__ import annotations

import asyncio

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
