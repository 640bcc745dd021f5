"""Channel discussions and sessions over HTTP, against the real agent runner, tools service and scripted model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import StartSession, TurnAccepted
from autarch.runtime.bus import connect
from autarch.runtime.requests import request

from .conftest import Gateway, new_id, wait_turn

pytestmark = pytest.mark.usefixtures("runner")


async def test_a_channel_discussion_answers_then_takes_a_follow_up(gateway: Gateway, repo: Path):
    async with gateway.client() as http:
        r = await http.post("/api/channels/c1/session", json={"repo": str(repo), "message": "What is this?"})
        assert r.status_code == 201, r.text
        accepted = r.json()
        assert set(accepted) == {"session_id", "turn_id", "created"} and accepted["created"] is True
        sid = accepted["session_id"]
        view = await wait_turn(http, sid, accepted["turn_id"])
        assert (view["role"], view["channel_id"], view["root"], view["run_id"]) == (
            "discussion", "c1", str(repo.resolve()), None)
        [turn] = view["turns"]
        assert turn["user_text"] == "What is this?"
        assert turn["outcome"]["kind"] == "end_turn", turn
        [call] = turn["tool_calls"]
        assert (call["name"], call["is_error"]) == ("read_file", False) and "greeting library" in call["output"]
        assert "greeter" in turn["messages"][-1] and turn["usage"]["input_tokens"] > 0

        listed = (await http.get("/api/sessions")).json()["items"]
        assert {"session_id": sid, "role": "discussion", "status": "idle", "turns": 1, "run_id": None} \
            .items() <= next(s for s in listed if s["session_id"] == sid).items()

        # A follow-up needs a script that answers one more step: start the same discussion with it.
        r = await http.post("/api/channels/c1/session", json={"repo": str(repo), "message": "What is this?",
                                                               "script": "followup"})
        sid, first = r.json()["session_id"], r.json()["turn_id"]
        await wait_turn(http, sid, first)
        r = await http.post(f"/api/sessions/{sid}/message", json={"text": "Say it again?"})
        assert r.status_code == 202, r.text
        assert (r.json()["session_id"], r.json()["created"]) == (sid, True)
        view = await wait_turn(http, sid, r.json()["turn_id"])
        assert [t["user_text"] for t in view["turns"]] == ["What is this?", "Say it again?"]
        second = view["turns"][1]
        assert (second["outcome"]["kind"], second["messages"]) == (
            "end_turn", ["You asked again: it greets people by name."])
        assert view["status"] == "idle"


async def test_retries_are_safe_with_client_chosen_ids(gateway: Gateway, repo: Path):
    sid = new_id()
    body = {"repo": str(repo), "message": "What is this?", "session_id": sid, "script": "followup"}
    async with gateway.client() as http:
        first = await http.post("/api/channels/team.chat_1-x/session", json=body)
        again = await http.post("/api/channels/team.chat_1-x/session", json=body)
        assert (first.status_code, again.status_code) == (201, 201)
        assert again.json() == {**first.json(), "created": False}
        # The same id for another discussion is a conflict.
        r = await http.post("/api/channels/other/session", json=body)
        assert (r.status_code, r.json()["code"]) == (409, "conflict")
        await wait_turn(http, sid, first.json()["turn_id"])
        msg = {"text": "Again?", "message_id": "m-1"}
        one = await http.post(f"/api/sessions/{sid}/message", json=msg)
        two = await http.post(f"/api/sessions/{sid}/message", json=msg)
        assert (one.status_code, two.status_code) == (202, 202)
        assert two.json() == {**one.json(), "created": False}
        view = await wait_turn(http, sid, one.json()["turn_id"])
        assert len(view["turns"]) == 2


async def test_a_message_during_a_turn_is_409_stop_cancels_it_and_a_closed_session_refuses(
    gateway: Gateway, repo: Path
):
    async with gateway.client() as http:
        r = await http.post("/api/channels/c2/session", json={"repo": str(repo), "message": "Think.",
                                                               "script": "slow"})
        sid, turn_id = r.json()["session_id"], r.json()["turn_id"]
        r = await http.post(f"/api/sessions/{sid}/message", json={"text": "Hurry up"})
        assert (r.status_code, r.json()["code"]) == (409, "conflict")
        assert r.json()["details"]["turn_id"] == turn_id
        running = (await http.get("/api/sessions", params={"running": "true"})).json()["items"]
        assert sid in [s["session_id"] for s in running]

        r = await http.post(f"/api/sessions/{sid}/stop", json={"reason": "too slow"})
        assert r.status_code == 200, r.text
        assert r.json() == {"session_id": sid, "turn_id": turn_id, "closed": False}
        view = (await http.get(f"/api/sessions/{sid}")).json()
        assert view["turns"][0]["outcome"]["kind"] == "cancelled" and view["status"] == "idle"
        idle = (await http.get("/api/sessions", params={"running": "false"})).json()["items"]
        assert sid in [s["session_id"] for s in idle]

        # Nothing running: stop answers without a turn; with close the session ends.
        r = await http.post(f"/api/sessions/{sid}/stop")
        assert r.json() == {"session_id": sid, "turn_id": None, "closed": False}
        r = await http.post(f"/api/sessions/{sid}/stop", json={"close": True})
        assert r.json() == {"session_id": sid, "turn_id": None, "closed": True}
        assert (await http.get(f"/api/sessions/{sid}")).json()["status"] == "closed"
        r = await http.post(f"/api/sessions/{sid}/message", json={"text": "Still there?"})
        assert (r.status_code, r.json()["code"]) == (409, "conflict")
        assert "closed" in r.json()["message"]


async def test_list_filters_by_run_or_by_its_older_name_workflow(gateway: Gateway):
    async with gateway.client() as http:
        for name in ("run", "workflow"):
            r = await http.get("/api/sessions", params={name: new_id()})
            assert r.status_code == 200 and r.json() == {"items": []}
            for bad in ("nope", "_", "1234"):
                r = await http.get("/api/sessions", params={name: bad})
                assert (r.status_code, r.json()["code"], r.json()["details"]) == (
                    400, "bad_request", {"field": name})
        # Both given, each a filter: two runs have no session in common.
        r = await http.get("/api/sessions", params={"run": new_id(), "workflow": new_id()})
        assert r.status_code == 200 and r.json() == {"items": []}
        r = await http.get("/api/sessions", params={"running": "maybe"})
        assert (r.status_code, r.json()["code"]) == (400, "bad_request")


async def test_workflow_costs_are_what_the_workflows_sessions_spent(gateway: Gateway, repo: Path, nats_server):
    # A workflow's session is started by the orchestrator, never over HTTP: started here on the bus as it would.
    spent, idle = new_id(), new_id()
    nc = await connect(nats_server.url, name="test-orchestrator")
    try:
        accepted = await request(nc, subjects.request("agent_runner", "start_session"), StartSession(
            session_id=new_id(), role="discussion", root=str(repo), kickoff="What is this?", run_id=spent),
            TurnAccepted)
    finally:
        await nc.drain()
    async with gateway.client() as http:
        await wait_turn(http, accepted.session_id, accepted.turn_id)
        r = await http.post("/api/workflows/costs", json={"workflow_ids": [spent, idle]})
        assert r.status_code == 200, r.text
        costs = r.json()["costs"]
        listed = (await http.get("/api/sessions", params={"run": spent})).json()["items"]
        assert [s["run_id"] for s in listed] == [spent]
        assert (await http.get("/api/sessions", params={"workflow": spent})).json()["items"] == listed
        both = await http.get("/api/sessions", params={"run": spent, "workflow": spent.replace("-", "").upper()})
        assert both.json()["items"] == listed
        assert set(costs) == {spent, idle} and costs[idle] == 0.0
        assert costs[spent] > 0 and costs[spent] == pytest.approx(sum(s["cost_usd"] for s in listed), abs=1e-7)
        r = await http.post("/api/workflows/costs", json={"workflow_ids": []})
        assert (r.status_code, r.json()) == (200, {"costs": {}})
        r = await http.post("/api/workflows/costs", json={"workflow_ids": [new_id() for _ in range(1000)]})
        assert r.status_code == 200 and len(r.json()["costs"]) == 1000


COSTS_BAD_BODIES: list[object] = [
    None, [], "x", {}, {"workflow_ids": "x"}, {"workflow_ids": None}, {"workflow_ids": {"a": 1}},
    {"workflow_ids": [new_id() for _ in range(1001)]}, {"workflow_ids": ["nope"]}, {"workflow_ids": [5]},
    {"workflow_ids": ["11111111-1111-4111-8111-11111111111A"]}, {"workflow_ids": [new_id() + "\n"]},
    {"workflow_ids": [], "extra": 1},
]


async def test_bad_workflow_cost_bodies_are_400(gateway: Gateway):
    async with gateway.client() as http:
        for body in COSTS_BAD_BODIES:
            r = await http.post("/api/workflows/costs", json=body)
            assert (r.status_code, r.json()["code"]) == (400, "bad_request"), (body, r.text)
        r = await http.post("/api/workflows/costs", content=b"{nope", headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()["code"]) == (400, "bad_request"), r.text


async def test_unknown_and_malformed_session_ids_are_404(gateway: Gateway):
    async with gateway.client() as http:
        for sid in (new_id(), "not-a-uuid", "123"):
            for method, path, body in (
                ("GET", f"/api/sessions/{sid}", None),
                ("POST", f"/api/sessions/{sid}/message", {"text": "hi"}),
                ("POST", f"/api/sessions/{sid}/stop", None),
            ):
                r = await http.request(method, path, json=body)
                assert (r.status_code, r.json()["code"]) == (404, "not_found"), (method, path, r.text)


async def test_bad_channel_ids_and_repos_are_400(gateway: Gateway, repo: Path, tmp_path: Path):
    not_git = tmp_path / "plain"
    not_git.mkdir()
    async with gateway.client() as http:
        for channel in ("a" * 101, "with space", "ü", "a+b", "semi;colon", "a:b"):
            r = await http.post(f"/api/channels/{channel}/session", json={"repo": str(repo), "message": "hi"})
            assert (r.status_code, r.json()["code"]) == (400, "bad_request"), (channel, r.text)
            assert r.json()["details"] == {"field": "channel_id"}
        r = await http.post(f"/api/channels/{'a' * 100}/session",
                            json={"repo": str(repo), "message": "hi", "script": "followup"})
        assert r.status_code == 201
        await wait_turn(http, r.json()["session_id"], r.json()["turn_id"])
        for where in (tmp_path / "missing", not_git, repo / "README.md"):
            r = await http.post("/api/channels/c1/session", json={"repo": str(where), "message": "hi"})
            assert (r.status_code, r.json()["code"], r.json()["details"]) == (
                400, "bad_request", {"field": "repo"}), r.text
        assert "not a git repository" in (await http.post(
            "/api/channels/c1/session", json={"repo": str(not_git), "message": "hi"})).json()["message"]


SESSION_BAD_BODIES = [
    None, [1], "hi", {}, {"repo": "/x"}, {"message": "hi"},
    {"repo": 5, "message": "hi"}, {"repo": "/x", "message": ""}, {"repo": "", "message": "hi"},
    {"repo": "/x", "message": "hi", "extra": 1}, {"repo": "/x", "message": "hi", "session_id": "not-a-uuid"},
    {"repo": "/x", "message": "hi", "session_id": "11111111-1111-4111-8111-11111111111A"},
    {"repo": "/x", "message": "hi", "script": "bad script"}, {"repo": "/x", "message": "hi", "role": "pulsing"},
]
MESSAGE_BAD_BODIES = [None, [1], {}, {"text": ""}, {"text": 5}, {"text": "hi", "extra": 1}, {"message": "hi"},
                      {"text": "hi", "message_id": ""}, {"text": "hi", "message_id": 3}]
STOP_BAD_BODIES = [[1], {"close": "yes"}, {"reason": ""}, {"reason": 3}, {"extra": 1}, "stop"]


async def test_malformed_bodies_are_400(gateway: Gateway):
    sid = new_id()
    async with gateway.client() as http:
        cases = [("/api/channels/c1/session", b) for b in SESSION_BAD_BODIES]
        cases += [(f"/api/sessions/{sid}/message", b) for b in MESSAGE_BAD_BODIES]  # type: ignore[misc]  # any JSON
        cases += [(f"/api/sessions/{sid}/stop", b) for b in STOP_BAD_BODIES]  # type: ignore[misc]  # any JSON
        for path, body in cases:
            r = await http.post(path, json=body)
            assert (r.status_code, r.json()["code"]) == (400, "bad_request"), (path, body, r.text)
        for path in ("/api/channels/c1/session", f"/api/sessions/{sid}/message", f"/api/sessions/{sid}/stop"):
            r = await http.post(path, content=b"{nope", headers={"Content-Type": "application/json"})
            assert (r.status_code, r.json()["code"]) == (400, "bad_request"), (path, r.text)


async def test_a_missing_or_wrong_token_is_401(gateway: Gateway, repo: Path):
    sid = new_id()
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as http:
        for headers in ({}, {"Authorization": "Bearer nope"}):
            for method, path, body in (
                ("POST", "/api/channels/c1/session", {"repo": str(repo), "message": "hi"}),
                ("POST", f"/api/sessions/{sid}/message", {"text": "hi"}),
                ("GET", f"/api/sessions/{sid}", None),
                ("GET", "/api/sessions", None),
                ("POST", f"/api/sessions/{sid}/stop", None),
            ):
                r = await http.request(method, path, json=body, headers=headers)
                assert (r.status_code, r.json()["code"]) == (401, "unauthorized"), (method, path)


async def test_turn_events_of_a_channel_session_are_on_the_stream(gateway: Gateway, repo: Path):
    """Channel sessions belong to no workflow: their events carry workflow ``_`` and flow on /api/events."""
    async with gateway.client() as http:
        seen: list[str] = []

        async def follow(started: asyncio.Event) -> None:
            async with http.stream("GET", "/api/events", params={"deltas": "false"}) as stream:
                async for line in stream.aiter_lines():
                    if line == ": connected":
                        started.set()
                    if line.startswith("event: "):
                        seen.append(line.removeprefix("event: "))
                        if seen[-1] == "turn:completed":
                            return

        started = asyncio.Event()
        task = asyncio.create_task(follow(started))
        await asyncio.wait_for(started.wait(), 5)
        r = await http.post("/api/channels/c3/session", json={"repo": str(repo), "message": "What is this?"})
        assert r.status_code == 201
        await asyncio.wait_for(task, 20)
    assert seen[0] == "session:started" and "turn:tool_started" in seen and seen[-1] == "turn:completed"
