"""Approval over HTTP end to end: the agent's submissions go over NATS (as the agent runner will send them),
the user's approve / request-changes / artifacts go through the gateway, every bad case is a typed 4xx."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import msgspec
import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import SubmitScopeArgs
from autarch.contracts.workflows import SubmitScope, WorkflowView
from autarch.runtime.bus import connect
from autarch.runtime.requests import request
from tests.system import System, work_tree

pytestmark = pytest.mark.slow

SCOPE = SubmitScopeArgs(title="JWT", description="validate JWTs", in_scope=["middleware"], out_of_scope=[],
                        recommended_path="full")


async def submit_scope(system: System, workflow_id: str, **over: Any) -> WorkflowView:
    nc = await connect(f"nats://127.0.0.1:{system.nats_port}", name="e2e-agent")
    try:
        scope = msgspec.structs.replace(SCOPE, **over)
        return await request(nc, subjects.request("orchestrator", "submit_scope"),
                             SubmitScope(workflow_id=workflow_id, scope=scope), WorkflowView)
    finally:
        await nc.drain()


async def test_approve_request_changes_and_artifacts_over_http(system: System, tmp_path):
    async with httpx.AsyncClient(base_url=system.url, headers=system.headers, timeout=10) as http:
        created = (await http.post("/api/workflows", json={"title": "JWT", "request": "add JWT",
                                                            "repo": str(work_tree(tmp_path))})).json()
        wf = created["id"]
        # Nothing awaits approval yet: 409 with the precise code, for both actions.
        r = await http.post(f"/api/workflows/{wf}/approve")
        assert (r.status_code, r.json()["code"]) == (409, "not_awaiting_approval")
        r = await http.post(f"/api/workflows/{wf}/request-changes", json={"feedback": "x"})
        assert (r.status_code, r.json()["code"]) == (409, "not_awaiting_approval")

        await submit_scope(system, wf)
        r = await http.post(f"/api/workflows/{wf}/request-changes", json={"feedback": "leave out tests"})
        assert r.status_code == 200
        assert (r.json()["awaiting_approval"], r.json()["last_feedback"]) == (False, "leave out tests")
        await submit_scope(system, wf, title="JWT only")
        cards = (await http.get(f"/api/workflows/{wf}/artifacts")).json()
        assert cards["scope"]["title"] == "JWT only" and cards["awaiting_approval"] is True
        assert cards["feedback"] == [{"stage": "scoping", "feedback": "leave out tests"}]

        r = await http.post(f"/api/workflows/{wf}/approve", json={"path": "quick"})
        assert r.status_code == 200
        view = r.json()
        assert (view["stage"], view["path"], view["pulses_count"], view["awaiting_approval"]) == (
            "execution", "quick", 1, False)
        assert (await http.get(f"/api/workflows/{wf}")).json() == view
        cards = (await http.get(f"/api/workflows/{wf}/artifacts")).json()
        assert [p["id"] for p in cards["pulses"]] == ["pulse-1"] and cards["path"] == "quick"

        # Approving again (a double click) is refused, not a second transition.
        r = await http.post(f"/api/workflows/{wf}/approve", json={"path": "full"})
        assert (r.status_code, r.json()["code"]) == (409, "not_awaiting_approval")

    # `autarch replay` rebuilds the same state and cards from the event store alone.
    replayed = system.cli("replay", wf)
    assert replayed.returncode == 0, replayed.stderr
    out = json.loads(replayed.stdout)
    assert out["workflow"] == view and out["artifacts"] == cards


async def test_bad_requests_are_typed(system: System, tmp_path):
    async with httpx.AsyncClient(base_url=system.url, headers=system.headers, timeout=10) as http:
        body: Any = {"title": "t", "request": "r", "repo": str(work_tree(tmp_path))}
        wf = (await http.post("/api/workflows", json=body)).json()["id"]
        missing = str(uuid.uuid4())
        for method, path, body in (
            ("POST", f"/api/workflows/{missing}/approve", None),
            ("POST", "/api/workflows/not-a-uuid/approve", None),
            ("POST", f"/api/workflows/{missing}/request-changes", {"feedback": "x"}),
            ("POST", "/api/workflows/not-a-uuid/request-changes", {"feedback": "x"}),
            ("GET", f"/api/workflows/{missing}/artifacts", None),
            ("GET", "/api/workflows/not-a-uuid/artifacts", None),
        ):
            r = await http.request(method, path, json=body)
            assert (r.status_code, r.json()["code"]) == (404, "not_found"), (method, path)
        for path, body in (
            ("approve", {"path": "sideways"}),
            ("approve", {"path": "quick", "extra": 1}),
            ("approve", [1]),
            ("request-changes", {}),
            ("request-changes", {"feedback": ""}),
            ("request-changes", {"feedback": 5}),
            ("request-changes", None),
        ):
            r = await http.post(f"/api/workflows/{wf}/{path}", json=body)
            assert (r.status_code, r.json()["code"]) == (400, "bad_request"), (path, body, r.text)
        r = await http.post(f"/api/workflows/{wf}/approve", content=b"{not json", headers={
            "Content-Type": "application/json"})
        assert (r.status_code, r.json()["code"]) == (400, "bad_request")
        # Nothing was recorded by any of them.
        view = (await http.get(f"/api/workflows/{wf}")).json()
        assert (view["version"], view["stage"], view["awaiting_approval"]) == (1, "scoping", False)
        # The path is chosen at scope approval only.
        await submit_scope(system, wf)
        await http.post(f"/api/workflows/{wf}/approve")
        cards = (await http.get(f"/api/workflows/{wf}/artifacts")).json()
        assert (cards["stage"], cards["path"]) == ("research", "full")
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = httpx.post(f"{system.url}/api/workflows/{wf}/approve", headers=headers)
            assert r.status_code == 401
        schema = (await http.get("/schema/openapi.json")).json()
        assert {"/api/workflows/{workflow_id}/approve", "/api/workflows/{workflow_id}/request-changes",
                "/api/workflows/{workflow_id}/artifacts"} <= set(schema["paths"])
