"""A swarm's real mail through ``/api/mail`` and ``autarch mail``: what the driver posted, as people read it.

Every service as its own process (``autarch up``) with the scripted model playing the bundled swarm scenario.
The swarm runs to its end; then the epic's mailbox holds each worker's startup acknowledgment and a
completion report per bead, all to the coordinator on the epic thread, and the HTTP API, the CLI and the
``mail:posted`` events on SSE agree on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.services.scripted_model import ScriptedModelServer
from tests.swarm.conftest import swarm_scenario
from tests.swarm.test_swarm_e2e import BEADS
from tests.system import System
from tests.workflows.conftest import Client, approve_stages, finish, scripted_system, start

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer("swarm") as server:
        yield server


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    yield from scripted_system(tmp_path_factory, model, "mail-api", services="orchestrator,tools,git,agent_runner",
                               AUTARCH_SWARM_WORKERS="3", AUTARCH_LEASE_TTL="5", AUTARCH_AGENT_MAX_STEPS="10",
                               AUTARCH_REQUEST_TIMEOUT="30")


def test_a_swarms_mail_is_listed_and_shown_over_http_and_the_cli(system: System, model: ScriptedModelServer,
                                                                 tmp_path: Path) -> None:
    client = Client(system)
    try:
        wid, _ = start(client, model, tmp_path, swarm_scenario(), branch="autarch/mail-api")
        approve_stages(client, wid)
        finish(client, wid)
        events = client.events(wid)
        posted = [e["message"] for e in events if e["type"] == "mail:posted"]

        listed = client.http.get("/api/mail", params={"epic_id": wid}).raise_for_status().json()
        messages = listed["messages"]
        assert listed["epic_id"] == wid
        # The API lists exactly what SSE announced, oldest first, ids in posting order.
        assert [m["message_id"] for m in messages] == [m["message_id"] for m in posted]
        assert [m["message_id"] for m in messages] == [f"m{n}" for n in range(1, len(messages) + 1)]
        subjects = [m["subject"] for m in messages]
        startups = [m for m in messages if m["subject"].startswith("[STARTUP] ")]
        # Every worker that ran reports in itself, first thing in each of its sessions.
        ran = {e["session_id"] for e in events if e["type"] == "turn:started"}
        assert {m["sender"] for m in startups} == {
            e["worker"] for e in events if e["type"] == "bead:claimed" and e["session_id"] in ran}
        assert sorted(s for s in subjects if s.startswith("Completed ")) == sorted(f"Completed {b}" for b in BEADS)
        assert all(m["thread_id"] == wid and m["topic"] == f"epic-{wid}" for m in messages)
        # A worker's own mail goes to the coordinator; what landed is the coordinator's record, to every worker.
        completed = [m for m in messages if m["subject"].startswith("Completed ")]
        assert all(m["to"] == ["coordinator"] for m in messages if m not in completed)
        assert all(m["sender"] == "coordinator" and len(m["to"]) > 1 for m in completed)

        worker = startups[0]["sender"]
        theirs = client.http.get("/api/mail", params={"epic_id": wid, "agent": worker}).raise_for_status().json()
        assert [m["message_id"] for m in theirs["messages"]] == [
            m["message_id"] for m in messages if m["sender"] == worker or worker in m["to"]]
        other_topic = client.http.get("/api/mail", params={"epic_id": wid, "topic": "elsewhere"}).json()
        assert other_topic == {"epic_id": wid, "messages": []}

        done = next(m for m in messages if m["subject"].startswith("Completed "))
        one = client.http.get(f"/api/mail/{wid}/{done['message_id']}").raise_for_status().json()
        assert one == done and "Commit: " in one["body_md"] and "Verification: " in one["body_md"]
        missing = client.http.get(f"/api/mail/{wid}/m{len(messages) + 1}")
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"

        # The CLI, with the epic as a prefix of the workflow id.
        out = system.cli("mail", "list", wid[:8])
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert [line.split()[0] for line in lines] == [m["message_id"] for m in messages]
        assert all(f"{m['sender']} → {', '.join(m['to'])}  {m['subject']}" in line
                   for m, line in zip(messages, lines, strict=True))
        shown = system.cli("mail", "show", wid, done["message_id"])
        assert shown.returncode == 0, shown.stderr
        headers, body = shown.stdout.split("\n\n", 1)
        assert f"subject:   {done['subject']}" in headers.splitlines() and f"from:      {done['sender']}" in headers
        assert body.rstrip("\n") == done["body_md"]
        as_json = system.cli("mail", "show", wid, done["message_id"], "--json")
        assert as_json.returncode == 0 and json.loads(as_json.stdout) == done
    finally:
        client.http.close()
