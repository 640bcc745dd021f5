"""Callers of a service with no instance wait on one shared probe, and all go on when an instance appears."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from autarch.contracts.errors import ErrorCode
from autarch.runtime.errors import RemoteError
from autarch.runtime.micro import TypedService
from autarch.runtime.requests import request
from autarch.runtime.service_gate import gate_for


class Ping(msgspec.Struct, kw_only=True):
    n: int


class Pong(msgspec.Struct, kw_only=True):
    n: int


async def _pong(req: Ping) -> Pong:
    return Pong(n=req.n)


async def _serve(nc) -> TypedService:
    svc = TypedService(nc, name="gated", description="a service that comes late")
    svc.endpoint("ping", Ping, _pong)
    await svc.start()
    return svc


async def test_a_service_nobody_serves_is_marked_down_and_opens_when_an_instance_starts(nc):
    gate = gate_for(nc)
    with pytest.raises(RemoteError) as exc:
        await request(nc, "autarch.svc.gated.ping", Ping(n=1), Pong, retry_unavailable=0.2)
    assert exc.value.code == ErrorCode.UNAVAILABLE
    assert gate.is_down("gated")
    assert await gate.until_up("gated", timeout=0.3) is False  # still nobody: the wait times out

    svc = await _serve(nc)
    try:
        started = time.monotonic()
        assert await gate.until_up("gated", timeout=5) is True
        assert time.monotonic() - started < 2  # the probe asks at least every 0.5 s
        assert not gate.is_down("gated")
    finally:
        await svc.stop()


async def test_callers_waiting_on_a_down_service_all_get_their_answer_once_it_is_back(nc):
    gate = gate_for(nc)
    with pytest.raises(RemoteError):
        await request(nc, "autarch.svc.gated.ping", Ping(n=0), Pong, retry_unavailable=0.1)
    assert gate.is_down("gated")
    # Fifty callers that would each have polled now wait on the gate; an instance comes a moment later.
    calls = [asyncio.create_task(request(nc, "autarch.svc.gated.ping", Ping(n=i), Pong, retry_unavailable=5))
             for i in range(50)]
    await asyncio.sleep(0.3)  # a quiet window (no event marks "none answered"): nobody serves, so none may end
    assert not any(call.done() for call in calls)
    svc = await _serve(nc)
    try:
        answers = await asyncio.wait_for(asyncio.gather(*calls), 10)
        assert [a.n for a in answers] == list(range(50))
    finally:
        await svc.stop()
