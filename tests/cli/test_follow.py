"""The follower that ``autarch watch`` and ``autarch demo`` share, against a real gateway: a stream that goes
silent is dropped and resumed after the last event seen, so nothing is missed or seen twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autarch.cli.follow import StreamLost, WorkflowEvents
from autarch.cli.gateway_client import Connection, GatewayClient
from autarch.cli.render import SseComment
from tests.system import System

from .conftest import Cli

pytestmark = pytest.mark.slow


def client_of(system: System) -> GatewayClient:
    token = (system.data_dir / "token").read_text().strip()
    return GatewayClient(Connection(system.url, token), trust_env=False)


def take(events: WorkflowEvents, count: int) -> list[tuple[int | None, str]]:
    """``(id, type)`` of the follower's next ``count`` events."""
    seen: list[tuple[int | None, str]] = []
    for item in events:
        if isinstance(item, dict):
            seen.append((events.since, item["type"]))
            if len(seen) == count:
                break
    return seen


def test_a_dropped_stream_resumes_after_the_last_event_seen(cli: Cli, system: System, repo: Path):
    created = cli.http.post("/api/workflows", json={"title": "Follow", "request": "Greet the world",
                                                    "repo": str(repo), "branch": "autarch/follow"})
    wid = created.raise_for_status().json()["id"]
    client = client_of(system)
    seen: list[tuple[int | None, str]] = []
    lost: list[StreamLost] = []
    connections, waiting, approved = 0, False, False
    # Keep-alives come every 15 s: while the scope card waits, a 0.5 s read timeout drops the stream.
    with WorkflowEvents(client, wid, since=0, read_timeout=0.5, reconnect_for=30) as events:
        for item in events:
            if isinstance(item, StreamLost):
                lost.append(item)
                if waiting and not approved:  # dropped while the card waits: approve, then read on
                    cli.http.post(f"/api/workflows/{wid}/approve").raise_for_status()
                    approved = True
                continue
            if isinstance(item, SseComment):
                connections += item.text == "connected"
                continue
            seen.append((events.since, item["type"]))
            if item["type"] == "workflow:approval_needed":
                if approved:
                    break  # the research card, well after the reconnection
                waiting = True
    client.close()
    assert approved and any("ReadTimeout" in drop.problem for drop in lost)
    assert all(drop.first for drop in lost)  # each reconnection succeeded at once
    assert connections == len(lost) + 1
    ids: list[Any] = [seq for seq, _ in seen]
    assert all(isinstance(seq, int) for seq in ids) and ids == sorted(set(ids)), "an event came twice or out of order"
    client = client_of(system)
    # Nothing missed: one uninterrupted replay from the start says the same.
    with WorkflowEvents(client, wid, since=0) as replay:
        assert take(replay, len(seen)) == seen
    # And a follower started after any event goes on with the next one.
    middle = len(seen) // 2
    with WorkflowEvents(client, wid, since=seen[middle][0]) as resumed:
        assert take(resumed, len(seen) - middle - 1) == seen[middle + 1:]
    client.close()
