"""``/api/beads``: the HTTP side of the bead verbs — validation, the request each route sends, error statuses.

The real gateway and nats-server; behind them a stand-in orchestrator that answers the eight bead verbs with
canned views and typed errors and records every request it was sent (so "refused before the orchestrator" is
"nothing was sent"). The bead graph itself, end to end under a running swarm, is tested in ``tests/swarm``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from autarch.contracts.beads import (
    AddDependency,
    BeadErrorCode,
    BeadList,
    BeadView,
    CloseBead,
    CreateBead,
    Dependency,
    EditBead,
    GetBead,
    GetSwarm,
    ListBeads,
    RankedBead,
    ReadyBeads,
    ReadyList,
    SwarmView,
    WorkerView,
)
from autarch.runtime.errors import ServiceFailure

from .conftest import Gateway, assert_error, stand_in_orchestrator

EPIC = "7b000000-0000-4000-8000-000000000001"
"""An epic the stand-in knows."""
NO_EPIC = "7b000000-0000-4000-8000-000000000002"
"""A workflow without an epic: every verb answers ``no_epic``."""
REFUSING = {
    "dup": (BeadErrorCode.DUPLICATE_BEAD, 409),
    "busy": (BeadErrorCode.NOT_EDITABLE, 409),
    "held": (BeadErrorCode.NOT_CLOSABLE, 409),
    "loop": (BeadErrorCode.CYCLE, 409),
    "ghost": ("not_found", 404),
    "weird": ("surprise", 500),
}
"""Bead ids (the bead, or the one depended on) the stand-in refuses, with the status the gateway must answer."""
VERBS = (("list_beads", ListBeads), ("get_bead", GetBead), ("ready_beads", ReadyBeads), ("get_swarm", GetSwarm),
         ("create_bead", CreateBead), ("edit_bead", EditBead), ("add_dependency", AddDependency),
         ("close_bead", CloseBead))


def bead_view(bead_id: str, **over: Any) -> BeadView:
    now = datetime.now(UTC)
    fields: dict[str, Any] = dict(id=bead_id, epic_id=EPIC, title=f"bead {bead_id}", status="open",
                                  files=["a.py"], verify=["pytest -q"], created_at=now, updated_at=now)
    fields.update(over)
    return BeadView(**fields)


@dataclass
class StandInBeads:
    received: list[Any] = field(default_factory=list)

    async def answer(self, request: Any) -> Any:
        self.received.append(request)
        if request.epic_id == NO_EPIC:
            raise ServiceFailure(BeadErrorCode.NO_EPIC, f"workflow {request.epic_id} has no epic")
        if request.epic_id != EPIC:
            raise ServiceFailure.not_found(f"no workflow {request.epic_id}", workflow_id=request.epic_id)
        named = getattr(request, "depends_on", None) or getattr(request, "bead_id", None) or getattr(
            request, "id", None)
        if named in REFUSING:
            code = REFUSING[named][0]
            raise ServiceFailure(code, f"refused: {code}", {"bead_id": named})
        if isinstance(request, ListBeads):
            beads = [bead_view("a", status="closed"), bead_view("b", dependencies=[Dependency(bead_id="a")])]
            return BeadList(epic_id=EPIC, beads=[b for b in beads if request.status in (None, b.status)],
                            critical_path=["a", "b"])
        if isinstance(request, ReadyBeads):
            ranked = RankedBead(bead_id="b", title="bead b", score=0.9, pagerank=1.0, betweenness=0.0,
                                blocker_ratio=0.5, staleness=1.0, priority=1, on_critical_path=True, unblocks=["c"])
            return ReadyList(epic_id=EPIC, ready=[ranked], critical_path=["b", "c"])
        if isinstance(request, GetSwarm):
            worker = WorkerView(name="AmberFalcon", nickname="w1", status="working", bead_id="b", attempt=1)
            return SwarmView(epic_id=EPIC, mode="swarm", max_workers=3, workers=[worker], merged=["a"])
        if isinstance(request, CreateBead):
            return bead_view(request.id or "u1", title=request.title, priority=request.priority,
                             dependencies=request.dependencies, created_by="user")
        if isinstance(request, EditBead):
            return bead_view(request.bead_id, **{k: v for k, v in (("title", request.title),
                                                                     ("priority", request.priority)) if v is not None})
        if isinstance(request, AddDependency):
            return bead_view(request.bead_id, dependencies=[Dependency(bead_id=request.depends_on,
                                                                       type=request.type)])
        if isinstance(request, CloseBead):
            return bead_view(request.bead_id, status="closed", close_reason=request.reason)
        return bead_view(request.bead_id)


@pytest.fixture
async def beads(nats_server) -> AsyncIterator[StandInBeads]:
    stand_in = StandInBeads()
    async with stand_in_orchestrator(nats_server.url, VERBS, stand_in.answer, "bead route"):
        yield stand_in



# --- reads ----------------------------------------------------------------------------------------------


async def test_list_sends_the_canonical_epic_and_the_status(gateway: Gateway, beads: StandInBeads):
    async with gateway.client() as http:
        everything = await http.get("/api/beads", params={"epic_id": EPIC.upper()})
        still_open = await http.get("/api/beads", params={"epic_id": EPIC, "status": "open"})
    assert everything.status_code == still_open.status_code == 200, everything.text
    assert [(q.epic_id, q.status) for q in beads.received] == [(EPIC, None), (EPIC, "open")]
    assert [b["id"] for b in everything.json()["beads"]] == ["a", "b"]
    assert everything.json()["critical_path"] == ["a", "b"]
    assert [b["id"] for b in still_open.json()["beads"]] == ["b"]
    assert still_open.json()["beads"][0]["dependencies"] == [{"bead_id": "a", "type": "blocks"}]


async def test_ready_and_swarm_pass_the_orchestrators_views_through(gateway: Gateway, beads: StandInBeads):
    async with gateway.client() as http:
        ready = await http.get("/api/beads/ready", params={"epic_id": EPIC})
        swarm = await http.get("/api/beads/swarm", params={"epic_id": EPIC})
    assert ready.status_code == swarm.status_code == 200, (ready.text, swarm.text)
    assert [type(q) for q in beads.received] == [ReadyBeads, GetSwarm]
    [top] = ready.json()["ready"]
    assert top == {"bead_id": "b", "title": "bead b", "score": 0.9, "pagerank": 1.0, "betweenness": 0.0,
                   "blocker_ratio": 0.5, "staleness": 1.0, "priority": 1, "on_critical_path": True,
                   "unblocks": ["c"]}
    assert ready.json()["critical_path"] == ["b", "c"]
    view = swarm.json()
    assert (view["mode"], view["max_workers"], view["merged"]) == ("swarm", 3, ["a"])
    assert view["workers"][0]["nickname"] == "w1" and view["workers"][0]["bead_id"] == "b"


async def test_get_one_bead(gateway: Gateway, beads: StandInBeads):
    async with gateway.client() as http:
        reply = await http.get(f"/api/beads/{EPIC.upper()}/b.2_x-y")
    assert reply.status_code == 200, reply.text
    assert reply.json()["id"] == "b.2_x-y" and reply.json()["verify"] == ["pytest -q"]
    [query] = beads.received
    assert isinstance(query, GetBead) and (query.epic_id, query.bead_id) == (EPIC, "b.2_x-y")


@pytest.mark.parametrize("path", ["/api/beads", "/api/beads/ready", "/api/beads/swarm"])
async def test_an_epic_query_needs_a_well_formed_epic(gateway: Gateway, beads: StandInBeads, path: str):
    async with gateway.client() as http:
        missing = await http.get(path)
        malformed = await http.get(path, params={"epic_id": "not-a-uuid"})
        unknown = await http.get(path, params={"epic_id": NO_EPIC})
    assert_error(missing, 400, "bad_request")
    assert_error(malformed, 404, "not_found")
    assert_error(unknown, 404, BeadErrorCode.NO_EPIC)
    assert len(beads.received) == 1  # only the well-formed one reached the orchestrator


async def test_a_bad_status_filter_is_refused(gateway: Gateway, beads: StandInBeads):
    async with gateway.client() as http:
        reply = await http.get("/api/beads", params={"epic_id": EPIC, "status": "done"})
    assert_error(reply, 400, "bad_request")
    assert beads.received == []


@pytest.mark.parametrize(("path", "code"), [
    (f"/api/beads/{EPIC}/ghost", "not_found"),
    (f"/api/beads/{NO_EPIC}/a", BeadErrorCode.NO_EPIC),
    ("/api/beads/nope/a", "not_found"),
    (f"/api/beads/{EPIC}/-starts-with-a-dash", "not_found"),
    (f"/api/beads/{EPIC}/{'x' * 65}", "not_found"),
])
async def test_unknown_or_malformed_ids_are_404(gateway: Gateway, beads: StandInBeads, path: str, code: str):
    async with gateway.client() as http:
        reply = await http.get(path)
    assert_error(reply, 404, code)


# --- changes --------------------------------------------------------------------------------------------


async def test_create_sends_every_field_and_answers_201(gateway: Gateway, beads: StandInBeads):
    body = {"epic_id": EPIC, "id": "tidy", "title": "Tidy the notes", "description": "why",
            "dependencies": [{"bead_id": "a"}, {"bead_id": "g", "type": "parent-child"}], "files": ["NOTES.md"],
            "verify": ["test -s NOTES.md"], "verification_evidence": "history/x/verification/tidy.md",
            "testing_mode": "tdd-required", "tdd_steps": {"red": "false", "green": "true"},
            "decision_refs": ["D1"], "learning_refs": ["learnings/x.md"], "priority": 0}
    async with gateway.client() as http:
        reply = await http.post("/api/beads", json=body)
        default_id = await http.post("/api/beads", json={"epic_id": EPIC, "title": "Untitled work"})
    assert reply.status_code == default_id.status_code == 201, (reply.text, default_id.text)
    command, second = beads.received
    assert isinstance(command, CreateBead) and command.epic_id == EPIC and command.id == "tidy"
    assert [(d.bead_id, d.type) for d in command.dependencies] == [("a", "blocks"), ("g", "parent-child")]
    assert (command.files, command.verify, command.testing_mode, command.priority) == (
        ["NOTES.md"], ["test -s NOTES.md"], "tdd-required", 0)
    assert (command.tdd_steps.red, command.tdd_steps.green) == ("false", "true")
    assert (command.description, command.decision_refs, command.learning_refs, command.verification_evidence) == (
        "why", ["D1"], ["learnings/x.md"], "history/x/verification/tidy.md")
    assert (second.id, second.priority, second.files, second.testing_mode) == (None, 2, [], "standard")
    assert reply.json()["id"] == "tidy" and reply.json()["created_by"] == "user"
    assert default_id.json()["id"] == "u1"


@pytest.mark.parametrize("body", [
    {"epic_id": EPIC, "title": "x", "colour": "red"},  # unknown field
    {"epic_id": EPIC},  # no title
    {"epic_id": EPIC, "title": ""},
    {"epic_id": "not-a-uuid", "title": "x"},
    {"epic_id": EPIC, "title": "x", "id": "has space"},
    {"epic_id": EPIC, "title": "x", "priority": 5},
    {"epic_id": EPIC, "title": "x", "dependencies": [{"bead_id": "a", "type": "related"}]},
    {"epic_id": EPIC, "title": "x", "testing_mode": "tdd-required", "tdd_steps": {"red": "false"}},
    {"epic_id": EPIC, "title": "x", "verify": [""]},
    {"epic_id": EPIC, "title": "   "},
    {"epic_id": EPIC, "title": "red \x1b[31m"},
    {"epic_id": EPIC, "title": "two\nlines"},
    {"epic_id": EPIC, "title": "final newline\n"},  # Python's ``$`` matches before it: the pattern says (?!\n)
    {"epic_id": EPIC, "title": "x", "description": "nul \x00"},
    # A blank command would pass every verification; a blank or control-character path leases nothing.
    {"epic_id": EPIC, "title": "x", "verify": [" "]},
    {"epic_id": EPIC, "title": "x", "verify": ["make\ttest"]},
    {"epic_id": EPIC, "title": "x", "files": ["a\x00b.py"]},
    {"epic_id": EPIC, "title": "x", "files": [" a.py"]},
    {"epic_id": EPIC, "title": "x", "verification_evidence": "two\nlines.md"},
    {"epic_id": EPIC, "title": "x", "decision_refs": [""]},
    {"epic_id": EPIC, "title": "x", "learning_refs": ["\x1b[31m"]},
    {"epic_id": EPIC, "title": "x", "testing_mode": "tdd-required", "tdd_steps": {"red": "\t", "green": "true"}},
])
async def test_a_bad_create_body_is_400_and_sends_nothing(gateway: Gateway, beads: StandInBeads,
                                                          body: dict[str, Any]):
    async with gateway.client() as http:
        reply = await http.post("/api/beads", json=body)
    assert_error(reply, 400, "bad_request")
    assert beads.received == []


async def test_edit_sends_only_the_fields_given(gateway: Gateway, beads: StandInBeads):
    async with gateway.client() as http:
        reply = await http.patch(f"/api/beads/{EPIC}/b", json={"title": "Renamed", "priority": 1,
                                                               "verify": ["make test"]})
    assert reply.status_code == 200, reply.text
    [command] = beads.received
    assert isinstance(command, EditBead) and (command.epic_id, command.bead_id) == (EPIC, "b")
    assert (command.title, command.priority, command.verify) == ("Renamed", 1, ["make test"])
    assert command.files is None and command.description is None and command.tdd_steps is None
    assert reply.json()["title"] == "Renamed" and reply.json()["priority"] == 1


async def test_add_dependency_and_close(gateway: Gateway, beads: StandInBeads):
    async with gateway.client() as http:
        linked = await http.post(f"/api/beads/{EPIC}/b/dependencies", json={"depends_on": "a"})
        grouped = await http.post(f"/api/beads/{EPIC}/b/dependencies", json={"depends_on": "g",
                                                                             "type": "parent-child"})
        closed = await http.post(f"/api/beads/{EPIC}/b/close", json={"reason": "done by hand"})
    assert linked.status_code == grouped.status_code == closed.status_code == 200, (linked.text, closed.text)
    first, second, close = beads.received
    assert isinstance(first, AddDependency) and (first.bead_id, first.depends_on, first.type) == ("b", "a", "blocks")
    assert (second.depends_on, second.type) == ("g", "parent-child")
    assert isinstance(close, CloseBead) and (close.epic_id, close.bead_id, close.reason) == (EPIC, "b", "done by hand")
    assert linked.json()["dependencies"] == [{"bead_id": "a", "type": "blocks"}]
    assert closed.json()["status"] == "closed" and closed.json()["close_reason"] == "done by hand"


@pytest.mark.parametrize(("method", "path", "body"), [
    ("PATCH", f"/api/beads/{EPIC}/b", {"status": "closed"}),  # not an editable field
    ("PATCH", f"/api/beads/{EPIC}/b", {"priority": -1}),
    ("PATCH", f"/api/beads/{EPIC}/b", {"files": [""]}),
    ("POST", f"/api/beads/{EPIC}/b/dependencies", {}),
    ("POST", f"/api/beads/{EPIC}/b/dependencies", {"depends_on": "a", "type": "related"}),
    ("POST", f"/api/beads/{EPIC}/b/dependencies", {"depends_on": "a b"}),
    ("POST", f"/api/beads/{EPIC}/b/close", {}),
    ("POST", f"/api/beads/{EPIC}/b/close", {"reason": ""}),
    ("POST", f"/api/beads/{EPIC}/b/close", {"reason": " \t"}),
    ("POST", f"/api/beads/{EPIC}/b/close", {"reason": "done \x1b[2J"}),
    ("PATCH", f"/api/beads/{EPIC}/b", {"title": " "}),
    ("PATCH", f"/api/beads/{EPIC}/b", {"title": "c1 \x9b"}),
    ("PATCH", f"/api/beads/{EPIC}/b", {"description": "bell \x07"}),
    ("POST", f"/api/beads/{EPIC}/b/close", {"reason": "x", "force": True}),
])
async def test_a_bad_change_body_is_400_and_sends_nothing(gateway: Gateway, beads: StandInBeads, method: str,
                                                          path: str, body: dict[str, Any]):
    async with gateway.client() as http:
        reply = await http.request(method, path, json=body)
    assert_error(reply, 400, "bad_request")
    assert beads.received == []


@pytest.mark.parametrize(("method", "path", "body", "named"), [
    ("POST", "/api/beads", {"epic_id": EPIC, "id": "dup", "title": "again"}, "dup"),
    ("PATCH", f"/api/beads/{EPIC}/busy", {"title": "renamed"}, "busy"),
    ("POST", f"/api/beads/{EPIC}/held/close", {"reason": "no"}, "held"),
    ("POST", f"/api/beads/{EPIC}/b/dependencies", {"depends_on": "loop"}, "loop"),
    ("POST", f"/api/beads/{EPIC}/b/dependencies", {"depends_on": "ghost"}, "ghost"),
    ("POST", f"/api/beads/{EPIC}/ghost/close", {"reason": "no"}, "ghost"),
    ("GET", f"/api/beads/{EPIC}/weird", None, "weird"),
])
async def test_the_orchestrators_refusals_keep_their_code(gateway: Gateway, beads: StandInBeads, method: str,
                                                          path: str, body: dict[str, Any] | None, named: str):
    code, status = REFUSING[named]
    async with gateway.client() as http:
        reply = await http.request(method, path, json=body)
    assert assert_error(reply, status, code)["details"] == {"bead_id": named}
    assert len(beads.received) == 1


async def test_a_change_to_a_workflow_without_an_epic_is_404(gateway: Gateway, beads: StandInBeads):
    async with gateway.client() as http:
        created = await http.post("/api/beads", json={"epic_id": NO_EPIC, "title": "x"})
        closed = await http.post(f"/api/beads/{NO_EPIC}/a/close", json={"reason": "x"})
        malformed = await http.patch("/api/beads/nope/a", json={"title": "x"})
    assert_error(created, 404, BeadErrorCode.NO_EPIC)
    assert_error(closed, 404, BeadErrorCode.NO_EPIC)
    assert_error(malformed, 404, "not_found")
    assert len(beads.received) == 2


# --- auth and documentation -----------------------------------------------------------------------------

ROUTES = [
    ("GET", f"/api/beads?epic_id={EPIC}", None),
    ("GET", f"/api/beads/ready?epic_id={EPIC}", None),
    ("GET", f"/api/beads/swarm?epic_id={EPIC}", None),
    ("POST", "/api/beads", {"epic_id": EPIC, "title": "x"}),
    ("GET", f"/api/beads/{EPIC}/b", None),
    ("PATCH", f"/api/beads/{EPIC}/b", {"title": "x"}),
    ("POST", f"/api/beads/{EPIC}/b/dependencies", {"depends_on": "a"}),
    ("POST", f"/api/beads/{EPIC}/b/close", {"reason": "x"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
async def test_every_bead_route_needs_the_token(gateway: Gateway, beads: StandInBeads, method: str, path: str,
                                                body: dict[str, Any] | None):
    async with httpx.AsyncClient(base_url=gateway.url, timeout=15) as http:
        wrong = await http.request(method, path, json=body, headers={"Authorization": "Bearer wrong"})
        missing = await http.request(method, path, json=body)
    assert_error(wrong, 401, "unauthorized")
    assert_error(missing, 401, "unauthorized")
    assert beads.received == []


async def test_the_bead_routes_are_documented(gateway: Gateway):
    async with gateway.client() as http:
        schema = (await http.get("/schema/openapi.json")).json()
    expected = {("/api/beads", "get"): {"400", "404"}, ("/api/beads/ready", "get"): {"400", "404"},
                ("/api/beads/swarm", "get"): {"400", "404"}, ("/api/beads", "post"): {"201", "400", "409"},
                ("/api/beads/{epic_id}/{bead_id}", "get"): {"404"},
                ("/api/beads/{epic_id}/{bead_id}", "patch"): {"400", "404", "409"},
                ("/api/beads/{epic_id}/{bead_id}/dependencies", "post"): {"400", "404", "409"},
                ("/api/beads/{epic_id}/{bead_id}/close", "post"): {"400", "404", "409"}}
    for (path, method), statuses in expected.items():
        operation = schema["paths"][path][method]
        assert operation["summary"] and len(operation["description"]) > 40, (path, method)
        assert operation["tags"] == ["beads"], (path, method)
        assert statuses | {"401", "503", "504"} <= set(operation["responses"]), (path, method)
    assert {"BeadList", "BeadView", "ReadyList", "RankedBead", "SwarmView", "CreateBeadBody", "EditBeadBody",
            "AddDependencyBody", "CloseBeadBody"} <= set(schema["components"]["schemas"])
