"""A used action link stays used: the claim is made on the NATS server (JetStream key-value, file storage), so it
holds for every gateway and notifier at once and across a restart of the server itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.runtime.action_links import LinkRefused, UsedLinks, mint, verify

KEY = b"k" * 43


async def test_a_use_is_claimed_once_among_many_and_survives_a_server_restart(tmp_path: Path) -> None:
    server = await EmbeddedNats(tmp_path / "nats").start_async()
    try:
        token, _ = mint(KEY, run_id="0b7f6c1e-3a51-4d5e-9a57-5a3c2f0e8b11", stage="scoping", card_version=5,
                        action="approve", channel="telegram", ttl=600)
        link = verify(KEY, token)
        clients = [await nats.connect(server.url) for _ in range(3)]
        # Three processes (a gateway, another gateway, the notifier) redeem the same link at once: one wins.
        outcomes = await asyncio.gather(*(UsedLinks(nc).claim(link) for nc in clients), return_exceptions=True)
        assert sorted(type(o).__name__ for o in outcomes) == ["LinkRefused", "LinkRefused", "NoneType"]
        assert {o.reply.code for o in outcomes if isinstance(o, LinkRefused)} == {"link_used"}
        for nc in clients:
            await nc.close()
        server.stop()
        await server.start_async()
        nc = await nats.connect(server.url)
        try:
            with pytest.raises(LinkRefused) as refused:
                await UsedLinks(nc).claim(link)
            assert refused.value.reply.code == "link_used" and "used already at " in refused.value.reply.message
            # A link given back (the orchestrator could not be asked) works again.
            other = verify(KEY, mint(KEY, run_id=link.run_id, stage="scoping", card_version=5,
                                     action="approve", channel="slack", ttl=600)[0])
            await UsedLinks(nc).claim(other)
            await UsedLinks(nc).release(other.nonce)
            await UsedLinks(nc).claim(other)
        finally:
            await nc.close()
    finally:
        server.stop()
