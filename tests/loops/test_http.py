"""Loop sessions over the HTTP API and SSE, as a client sees them (``/api/pulse``, ``/api/events``)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from .conftest import FILES, iteration, write


@pytest.fixture
def http(system):
    with httpx.Client(base_url=system.url, headers=system.headers, timeout=30, trust_env=False) as client:
        yield client


def events(http: httpx.Client, session_id: str, until: str, timeout: float = 30) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    params = {"workflow": session_id, "since": "0", "deltas": "false"}
    with http.stream("GET", "/api/events", params=params, timeout=timeout) as reply:
        assert reply.status_code == 200
        name = None
        for line in reply.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and name:
                found.append({"type": name, **json.loads(line.split(":", 1)[1])})
                if name == until:
                    return found
    return found


def test_start_follow_and_show_a_session_over_http(model, loops, http):
    model.use({"files": FILES, "scripts": {
        "loop:http.i1": iteration([write("a.txt", "a\n")], "feat(shop): a\n<signal>CONTINUE</signal>"),
        "loop:http.i2": iteration([write("b.txt", "b\n")], "feat(shop): b\n<signal>COMPLETE</signal>"),
    }})
    repo = loops.repo("http")
    reply = http.post("/api/pulse/start", json={"projectName": "shop", "projectPath": str(repo),
                                                 "goal": "Write a and b", "maxIterations": 4, "script": "http",
                                                 "createdBy": "api"})
    assert reply.status_code == 201, reply.text
    session = reply.json()
    assert session["status"] == "pending" and session["max_iterations"] == 4 and session["created_by"] == "api"
    seen = events(http, session["id"], "loop:completed")
    kinds = [e["type"] for e in seen if e["type"].startswith("loop:")]
    assert kinds == ["loop:started", "loop:iteration_started", "loop:iteration_completed",
                     "loop:iteration_started", "loop:iteration_completed", "loop:completed"]
    done = [e for e in seen if e["type"] == "loop:iteration_completed"]
    assert [(e["iteration_number"], e["max_iterations"], e["signal"]) for e in done] == [(1, 4, "CONTINUE"),
                                                                                         (2, 4, "COMPLETE")]
    assert seen[-1]["iterations"] == 2 and seen[-1]["commits"] == 2
    view = http.get(f"/api/pulse/{session['id']}").json()
    assert view["status"] == "complete" and [it["signal"] for it in view["iterations"]] == ["CONTINUE", "COMPLETE"]
    listed = http.get("/api/pulse", params={"status": "complete"}).json()
    assert session["id"] in {s["id"] for s in listed["items"]}
    assert all(s["status"] == "complete" for s in listed["items"])


def test_controls_over_http(model, loops, http):
    model.use({"files": FILES, "scripts": {
        "loop:ctl.i1": iteration("<signal>BLOCKED: which database?</signal>"),
        "loop:ctl.i2": iteration([write("db.txt", "postgres\n")], "chore(shop): db\n<signal>COMPLETE</signal>"),
    }})
    repo = loops.repo("ctl")
    session = http.post("/api/pulse/start", json={"projectName": "shop", "projectPath": str(repo),
                                                   "goal": "Pick a database", "script": "ctl"}).json()
    deadline = time.monotonic() + 30
    while (status := http.get(f"/api/pulse/{session['id']}").json()["status"]) != "blocked":
        assert time.monotonic() < deadline, f"the loop is {status}, not blocked, after 30 s"
        time.sleep(0.1)
    paused = http.post(f"/api/pulse/{session['id']}/pause")
    assert paused.status_code == 409 and paused.json()["code"] == "loop_not_running"
    resumed = http.post(f"/api/pulse/{session['id']}/resume", json={"message": "postgres"})
    assert resumed.status_code == 200 and resumed.json()["status"] == "running"
    events(http, session["id"], "loop:completed")
    again = http.post(f"/api/pulse/{session['id']}/abort", json={"reason": "late"})
    assert again.status_code == 409 and again.json()["code"] == "loop_finished"


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"goal": ""}, 400, "bad_request"),
    ({"goal": "   "}, 400, "bad_request"),
    ({"maxIterations": 0}, 400, "bad_request"),
    ({"maxIterations": -1}, 400, "bad_request"),
    ({"maxIterations": 1_000_000}, 400, "bad_request"),
    ({"projectPath": "relative"}, 400, "bad_request"),
    ({"projectPath": "/nonexistent/autarch"}, 400, "not_a_repository"),
    ({"anchorTurnId": "no-such-turn"}, None, None),
    ({"unknownField": 1}, 400, "bad_request"),
    ({"contextStrategy": "psychic"}, 400, "bad_request"),
    ({"branchName": "main"}, 409, "branch_exists"),
])
def test_bad_starts_over_http_create_nothing(loops, http, body, status, code):
    repo = loops.repo("badhttp")
    before = http.get("/api/pulse").json()["total"]
    reply = http.post("/api/pulse/start", json={"projectName": "shop", "projectPath": str(repo),
                                                 "goal": "Something", **body})
    if status is None:  # an anchor the turn memory cannot confirm: refused either way, never ignored
        assert reply.status_code in (400, 503)
        assert reply.json()["code"] in ("unknown_anchor", "turn_memory_unavailable")
    else:
        assert reply.status_code == status, reply.text
        assert reply.json()["code"] == code
    assert set(reply.json()) == {"code", "message", "details"}
    assert http.get("/api/pulse").json()["total"] == before


def test_unknown_and_malformed_ids_are_404(http):
    for path in ("/api/pulse/not-a-uuid", "/api/pulse/5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13"):
        reply = http.get(path)
        assert reply.status_code == 404 and reply.json()["code"] == "not_found"
    reply = http.post("/api/pulse/5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13/pause")
    assert reply.status_code == 404
    assert http.get("/api/pulse", params={"status": "sleeping"}).status_code == 400


def test_the_openapi_document_lists_the_pulse_routes(http):
    paths = http.get("/schema/openapi.json").json()["paths"]
    assert {"/api/pulse/start", "/api/pulse", "/api/pulse/{session_id}", "/api/pulse/{session_id}/pause",
            "/api/pulse/{session_id}/resume", "/api/pulse/{session_id}/abort"} <= set(paths)
