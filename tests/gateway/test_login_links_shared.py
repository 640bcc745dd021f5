"""A UI sign-in link works once on the whole system, not once per gateway (``gateway/ui/redeemed.py``)."""

from __future__ import annotations

import httpx
import pytest

from autarch.gateway.ui.redeemed import SharedRedemptions
from autarch.gateway.ui.signin import SESSION_COOKIE, LoginLinks, login_link
from autarch.runtime.bus import connect
from autarch.runtime.settings import Settings
from tests.gateway.conftest import REQUEST_TIMEOUT, serve_gateway


async def test_a_link_redeemed_on_one_gateway_is_refused_by_another(nats_server, tmp_path) -> None:
    settings = Settings(data_dir=str(tmp_path), nats_url=nats_server.url, request_timeout=REQUEST_TIMEOUT)
    async for first in serve_gateway(settings):
        async for second in serve_gateway(settings):  # the same data dir: the same token, as on a cluster
            link = login_link(first.url, first.token)
            path = link.removeprefix(first.url)
            async with httpx.AsyncClient(base_url=first.url, follow_redirects=False) as http:
                reply = await http.get(path)
                assert reply.status_code == 303 and SESSION_COOKIE in reply.cookies
            async with httpx.AsyncClient(base_url=second.url, follow_redirects=False) as http:
                reply = await http.get(path)
                assert reply.status_code == 401
                assert "already used" in reply.text and SESSION_COOKIE not in reply.cookies
            # A fresh link still works on the second gateway.
            fresh = login_link(second.url, second.token).removeprefix(second.url)
            async with httpx.AsyncClient(base_url=second.url, follow_redirects=False) as http:
                assert (await http.get(fresh)).status_code == 303


async def test_only_the_first_claim_of_a_nonce_wins_across_connections(nats_server) -> None:
    one, two = await connect(nats_server.url, name="gw-1"), await connect(nats_server.url, name="gw-2")
    try:
        a, b = SharedRedemptions(one), SharedRedemptions(two)
        assert await a.claim("nonce-1")
        assert not await b.claim("nonce-1") and not await a.claim("nonce-1")
        assert await b.claim("nonce-2")
        assert not await a.claim("not a valid key!")  # never a key the bucket would refuse with an error
    finally:
        await one.drain()
        await two.drain()


async def test_a_link_whose_claim_cannot_be_made_stays_unused(tmp_path) -> None:
    token = "t" * 43
    calls: list[str] = []

    async def unreachable(nonce: str) -> bool:
        calls.append(nonce)
        if len(calls) == 1:
            raise TimeoutError("NATS away")
        return True

    links = LoginLinks(unreachable)
    parts = httpx.URL(login_link("http://127.0.0.1:9", token)).params
    args = (token, parts["n"], parts["e"], parts["s"])
    with pytest.raises(TimeoutError):
        await links.redeem(*args)
    assert await links.redeem(*args)  # NATS back: the same link signs in, once
    assert not await links.redeem(*args)
    assert calls == [parts["n"], parts["n"]]
