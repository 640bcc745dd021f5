"""People working on an epic while its swarm runs: ``/api/beads`` and ``autarch beads``, answers and refusals.

The workflow's workers are held on their first model call (a long latency), so the epic stays open while the
test reads and edits it; the system is shared, and the workflow is left to the package's teardown.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.workflows.conftest import Client, approve_stages, start

from .conftest import swarm_scenario


@pytest.fixture(scope="module")
def epic(system, model, tmp_path_factory) -> str:
    client = Client(system)
    scenario = swarm_scenario()
    for key, steps in scenario["scripts"].items():
        if key.startswith("pulsing:"):
            steps[0]["latency_ms"] = 60_000  # the workers stay busy with their first beads
    wid, _ = start(client, model, tmp_path_factory.mktemp("api"), scenario, branch="autarch/bead-api")
    approve_stages(client, wid)
    client.wait(wid, lambda v: v["stage"] == "execution" and _swarm(client, wid) is not None
                and sum(1 for w in _swarm(client, wid)["workers"] if w["status"] == "working") == 3,  # type: ignore[index, misc]  # not None: checked just before
                "three workers busy", timeout=60)
    client.http.close()
    return wid


def _swarm(client: Client, wid: str) -> dict[str, Any] | None:
    reply = client.http.get("/api/beads/swarm", params={"epic_id": wid})
    return reply.json() if reply.status_code == 200 else None


def test_the_graph_the_ready_list_and_the_swarm_are_served(client: Client, epic: str) -> None:
    beads = client.http.get("/api/beads", params={"epic_id": epic}).raise_for_status().json()
    status = {b["id"]: b["status"] for b in beads["beads"]}
    assert status == {"base": "in_progress", "units": "in_progress", "naming": "in_progress", "square": "open",
                      "circle": "open", "summary": "open"}
    assert beads["critical_path"] == ["base", "circle", "summary"]
    swarm = client.http.get("/api/beads/swarm", params={"epic_id": epic}).raise_for_status().json()
    assert swarm["mode"] == "swarm" and swarm["max_workers"] == 3
    held = {lease["pattern"]: lease["holder"] for lease in swarm["leases"]}
    working = {w["bead_id"]: w["name"] for w in swarm["workers"]}
    assert held["shapes/base.py"] == working["base"] and held["docs/units.md"] == working["units"]
    assert all(lease["expires_at"] for lease in swarm["leases"])  # the live table, not the record
    one = client.http.get(f"/api/beads/{epic}/square").raise_for_status().json()
    assert one["dependencies"] == [{"bead_id": "base", "type": "blocks"}] and one["verify"]


def test_a_person_creates_edits_links_and_closes_a_bead(client: Client, epic: str) -> None:
    made = client.http.post("/api/beads", json={"epic_id": epic, "id": "tidy", "title": "Tidy the notes",
                                                "files": ["NOTES.md"]})
    assert made.status_code == 201, made.text
    assert made.json()["status"] == "bounced" and "verify" in made.json()["bounce_reason"]
    edited = client.http.patch(f"/api/beads/{epic}/tidy", json={"verify": ["test -s NOTES.md"], "priority": 1})
    assert edited.status_code == 200 and edited.json()["status"] == "open" and edited.json()["priority"] == 1
    ready = client.http.get("/api/beads/ready", params={"epic_id": epic}).raise_for_status().json()
    assert [r["bead_id"] for r in ready["ready"]] == ["tidy"]  # every worker is busy: it waits, ready
    linked = client.http.post(f"/api/beads/{epic}/tidy/dependencies", json={"depends_on": "summary"})
    assert linked.status_code == 200 and {"bead_id": "summary", "type": "blocks"} in linked.json()["dependencies"]
    closed = client.http.post(f"/api/beads/{epic}/tidy/close", json={"reason": "done by hand"})
    assert closed.status_code == 200 and closed.json()["status"] == "closed"
    assert closed.json()["close_reason"] == "done by hand"


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("post", "/api/beads", {"epic_id": "EPIC", "id": "base", "title": "again", "files": ["x"], "verify": ["true"]},
     409, "duplicate_bead"),
    ("post", "/api/beads/EPIC/base/dependencies", {"depends_on": "summary"}, 409, "dependency_cycle"),
    ("post", "/api/beads/EPIC/base/dependencies", {"depends_on": "nope"}, 404, "not_found"),
    ("patch", "/api/beads/EPIC/base", {"title": "renamed"}, 409, "not_editable"),
    ("post", "/api/beads/EPIC/base/close", {"reason": "no"}, 409, "not_closable"),
    ("get", "/api/beads/EPIC/nope", None, 404, "not_found"),
    ("get", f"/api/beads?epic_id={uuid.UUID(int=7)}", None, 404, "no_epic"),
    ("get", "/api/beads?epic_id=not-a-uuid", None, 404, "not_found"),
    ("post", "/api/beads", {"epic_id": "EPIC", "title": "x", "colour": "red"}, 400, "bad_request"),
    ("patch", "/api/beads/EPIC/square", {"priority": 9}, 400, "bad_request"),
    ("post", "/api/beads/EPIC/square/close", {}, 400, "bad_request"),
])
def test_refusals_are_typed_and_change_nothing(client: Client, epic: str, method: str, path: str,
                                               body: dict[str, Any] | None, status: int, code: str) -> None:
    before = client.http.get("/api/beads", params={"epic_id": epic}).json()
    if body is not None:
        body = json.loads(json.dumps(body).replace("EPIC", epic))
    reply = client.http.request(method.upper(), path.replace("EPIC", epic), json=body)
    assert reply.status_code == status, reply.text
    assert reply.json()["code"] == code
    after = client.http.get("/api/beads", params={"epic_id": epic}).json()
    assert [(b["id"], b["status"], b["title"], b["dependencies"]) for b in after["beads"]] == \
        [(b["id"], b["status"], b["title"], b["dependencies"]) for b in before["beads"]]


def test_the_cli_lists_ranks_shows_creates_links_and_closes(client: Client, epic: str, tmp_path: Path) -> None:
    cli = client.system.cli
    listed = cli("beads", "list", epic[:8])
    assert listed.returncode == 0, listed.stderr
    assert "base" in listed.stdout and "in_progress" in listed.stdout and "critical path: base → " in listed.stdout
    made = cli("beads", "create", epic, "--id", "polish", "--title", "Polish", "--file", "README.md",
               "--verify", "test -s README.md", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["status"] == "open"
    ready = cli("beads", "ready", epic)
    assert ready.returncode == 0 and "polish" in ready.stdout
    shown = cli("beads", "show", epic, "polish")
    assert "verify: test -s README.md" in shown.stdout
    dep = cli("beads", "dep", epic, "polish", "--on", "summary")
    assert dep.returncode == 0 and "after summary" in dep.stdout
    refused = cli("beads", "dep", epic, "base", "--on", "polish")
    assert refused.returncode != 0 and "dependency_cycle" in refused.stderr
    closed = cli("beads", "close", epic, "polish", "--reason", "not needed")
    assert closed.returncode == 0 and "closed" in closed.stdout
