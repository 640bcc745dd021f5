"""Coordination around a file someone outside the swarm holds: the worker's conflict report reaches the
coordinator, the coordinator answers, and the release reaches the waiting worker at once (no polling).
Every worker acknowledges its start and reports each bead it completes, on the epic thread."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from datetime import datetime
from pathlib import Path

import nats

from autarch.runtime.leases import LeaseTable
from tests.workflows.conftest import Client, approve_stages, finish, start

from .conftest import swarm_scenario
from .test_swarm_e2e import BEADS


def _at(event: dict) -> float:
    return datetime.fromisoformat(str(event["occurred_at"]).replace("Z", "+00:00")).timestamp()


async def _hold(url: str, scope: str, *, granted: asyncio.Event, release_after: asyncio.Event,
                released: list[float]) -> None:
    nc = await nats.connect(url)
    try:
        table = await LeaseTable.open(nc)
        grant = await table.acquire(scope, "ReviewerRuth", ["docs/units.md"], ttl=120)
        assert not hasattr(grant, "conflicts"), grant
        granted.set()
        await release_after.wait()
        await table.release(scope, "ReviewerRuth")
        released.append(time.time())
    finally:
        await nc.close()


def test_a_conflict_is_reported_answered_and_the_release_wakes_the_waiting_worker(
        client: Client, model, tmp_path: Path) -> None:
    scenario = swarm_scenario()
    scenario["scripts"]["pulsing:units-a2"] = copy.deepcopy(scenario["scripts"]["pulsing:units"])
    wid, _ = start(client, model, tmp_path, scenario, branch="autarch/mail")
    url = f"nats://127.0.0.1:{client.system.nats_port}"
    loop = asyncio.new_event_loop()
    release_after = asyncio.Event()
    released: list[float] = []
    granted = asyncio.Event()
    holder = loop.create_task(_hold(url, wid, granted=granted, release_after=release_after, released=released))
    loop.run_until_complete(asyncio.wait_for(granted.wait(), 30))  # the outside lease is granted before the swarm
    approve_stages(client, wid)

    def conflict_answered(seen: list[dict]) -> bool:
        return any(e["type"] == "mail:posted" and e["message"]["sender"] == "coordinator" for e in seen)

    events = client.events(wid, until=conflict_answered, timeout=60)
    # The coordinator tells the worker whose claim met the outside lease; nothing is posted in the worker's name.
    answer = next(e["message"] for e in events if e["type"] == "mail:posted"
                  and e["message"]["subject"] == "File conflict on units")
    claimant = next(e["holder"] for e in events if e["type"] == "lease:conflict")
    assert answer["sender"] == "coordinator" and answer["to"] == [claimant]
    assert "ReviewerRuth" in answer["body_md"] and "back in the ready list" in answer["body_md"]
    # Everything else that can run has run (no bead needs units): units must still wait.
    deadline = time.monotonic() + 90
    while True:
        beads = client.http.get("/api/beads", params={"epic_id": wid}).json()["beads"]
        status = {b["id"]: b["status"] for b in beads}
        if all(s == "closed" for bead, s in status.items() if bead != "units"):
            break
        assert time.monotonic() < deadline, f"the beads free to run did not all close within 90 s: {status}"
        time.sleep(0.1)
    assert status["units"] == "open"

    loop.call_soon_threadsafe(release_after.set)
    loop.run_until_complete(holder)
    view = client.wait_awaiting(wid, "review", timeout=120)
    assert view["stage"] == "review"
    events = client.events(wid, until="swarm:finished")
    claim = next(e for e in events if e["type"] == "bead:claimed" and e["bead_id"] == "units" and e["attempt"] == 2)
    delay_ms = (_at(claim) - released[0]) * 1000
    print(f"\nrelease → the waiting worker's claim of units: {delay_ms:.1f} ms")
    assert delay_ms < 5_000  # a kick, not a poll: far under any polling period (the figure is printed)

    mail = [e["message"] for e in events if e["type"] == "mail:posted"]
    # Each worker session reports in itself, first thing, naming both its identities (a worker whose claims never
    # started a session, its files being leased elsewhere, never ran and said nothing).
    workers = {e["worker"]: e["nickname"] for e in events if e["type"] == "worker:joined"}
    ran = {e["session_id"] for e in events if e["type"] == "turn:started"}
    worked = {e["worker"] for e in events if e["type"] == "bead:claimed" and e["session_id"] in ran}
    startups = [m for m in mail if m["subject"].startswith("[STARTUP]")]
    assert {m["sender"] for m in startups} == worked
    assert all(m["subject"] == f"[STARTUP] {workers[m['sender']]} / {m['sender']}" for m in startups), startups
    assert sorted(m["subject"] for m in mail if m["subject"].startswith("Completed ")) == sorted(
        f"Completed {b}" for b in BEADS)
    done = next(m for m in mail if m["subject"] == "Completed units")
    # What landed is the coordinator's record, sent to every worker: no worker wrote it.
    assert {m["sender"] for m in mail if m["subject"].startswith("Completed ")} == {"coordinator"}
    assert done["to"] == sorted(workers) and "Landed by " in done["body_md"]
    # A bead's files are released before its completion report goes out (seed 002).
    for bead in BEADS:
        freed = next(i for i, e in enumerate(events) if e["type"] == "lease:released"
                     and e.get("bead_id") == bead and e.get("reason") == "done")
        reported = next(i for i, e in enumerate(events) if e["type"] == "mail:posted"
                        and e["message"]["subject"] == f"Completed {bead}")
        assert freed < reported, bead
    assert "Verification: passed" in done["body_md"] and "Commit: " in done["body_md"]
    # The mailbox replays from its own events to what the stream carried.
    replayed = json.loads(client.system.cli("replay", wid).stdout)
    assert [(m["message_id"], m["sender"], m["subject"]) for m in replayed["mail"]] == [
        (m["message_id"], m["sender"], m["subject"]) for m in mail]
    loop.close()
    finish(client, wid)
