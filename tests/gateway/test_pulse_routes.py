"""``/api/pulse``: the HTTP side of loop sessions — validation, the command each route sends, error statuses.

The real gateway and nats-server; behind them a stand-in orchestrator that answers the loop verbs with canned
views and errors and records every command it was sent (so "nothing was created" is "nothing was sent").
The loop sessions themselves, end to end, are tested in ``tests/loops``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.events import LoopIterationCompleted
from autarch.contracts.loops import (
    AbortLoop,
    GetLoop,
    ListLoops,
    LoopErrorCode,
    LoopList,
    LoopSummary,
    LoopView,
    PauseLoop,
    ResumeLoop,
    StartLoop,
)
from autarch.runtime.errors import ServiceFailure

from .conftest import Gateway, assert_error, stand_in_orchestrator
from .test_events import collect

KNOWN = "7a000000-0000-4000-8000-000000000001"
"""A session the stand-in knows: every control succeeds."""
FAILING = {
    "7a000000-0000-4000-8000-000000000002": (LoopErrorCode.NOT_RUNNING, 409),
    "7a000000-0000-4000-8000-000000000003": (LoopErrorCode.NOT_RESUMABLE, 409),
    "7a000000-0000-4000-8000-000000000004": (LoopErrorCode.FINISHED, 409),
}
"""Sessions whose controls fail with a "not in this state" code, and the status the gateway must answer."""
START_ERRORS = [
    (LoopErrorCode.UNKNOWN_ANCHOR, 400),
    (LoopErrorCode.NOT_A_REPOSITORY, 400),
    (LoopErrorCode.MEMORY_UNAVAILABLE, 503),
    ("bad_request", 400),
    ("conflict", 409),
]
"""Start errors (selected by the goal ``fail:<code>``) and their statuses."""


def loop_view(session_id: str, **over: Any) -> LoopView:
    now = datetime.now(UTC)
    fields: dict[str, Any] = dict(
        id=session_id, project_name="shop", project_path="/r/shop", goal="Write a and b", max_iterations=10,
        current_iteration=1, status="running", last_signal=None, progress_log=[], anchor_turn_id=None,
        branch_name=f"autarch/loop-{session_id[:8]}", created_by="api", total_commits=0, total_tokens_used=0,
        total_cost_usd=0.0, context_strategy="prefetch", notify=[], created_at=now, updated_at=now)
    fields.update(over)
    return LoopView(**fields)


@dataclass
class StandInLoops:
    received: list[Any] = field(default_factory=list)

    async def answer(self, command: Any) -> Any:
        self.received.append(command)
        if isinstance(command, ListLoops):
            item = LoopSummary(id=KNOWN, project_name="shop", goal="Write a and b", status="running",
                               current_iteration=1, max_iterations=10, last_signal="CONTINUE", total_commits=1,
                               branch_name="autarch/loop-7a000000", updated_at=datetime.now(UTC),
                               created_at=datetime.now(UTC))
            return LoopList(items=[item], total=1)
        if isinstance(command, StartLoop):
            if command.goal.startswith("fail:"):
                code = command.goal.removeprefix("fail:")
                raise ServiceFailure(code, f"refused: {code}", {"field": "goal"})
            return loop_view(command.session_id, project_name=command.project_name,
                             project_path=command.project_path, goal=command.goal,
                             max_iterations=command.max_iterations, created_by=command.created_by)
        sid = command.session_id
        if sid in FAILING:
            raise ServiceFailure(FAILING[sid][0], f"session {sid} is not in that state", {"status": "blocked"})
        if sid != KNOWN:
            raise ServiceFailure.not_found(f"no loop session {sid}", session_id=sid)
        status = "aborted" if isinstance(command, AbortLoop) else "running"
        return loop_view(sid, status=status, pause_requested=isinstance(command, PauseLoop))


@pytest.fixture
async def loops(nats_server) -> AsyncIterator[StandInLoops]:
    stand_in = StandInLoops()
    verbs = (("start_loop", StartLoop), ("get_loop", GetLoop), ("list_loops", ListLoops), ("pause_loop", PauseLoop),
             ("resume_loop", ResumeLoop), ("abort_loop", AbortLoop))
    async with stand_in_orchestrator(nats_server.url, verbs, stand_in.answer, "pulse route"):
        yield stand_in


def start_body(**over: Any) -> dict[str, Any]:
    return {"projectName": "shop", "projectPath": "/r/shop", "goal": "Write a and b", **over}


# --- start --------------------------------------------------------------------------------------------------


async def test_start_sends_the_seeds_fields_with_a_new_session_id(gateway: Gateway, loops: StandInLoops):
    async with gateway.client() as http:
        reply = await http.post("/api/pulse/start", json=start_body(
            maxIterations=4, anchorTurnId="turn-7", branchName="loop/ab", contextStrategy="hybrid",
            notify=[{"kind": "webhook", "url": "http://127.0.0.1:9/hook"}], createdBy="cli"))
    assert reply.status_code == 201, reply.text
    view = reply.json()
    [command] = loops.received
    assert isinstance(command, StartLoop)
    assert uuid.UUID(command.session_id).version == 4 and view["id"] == command.session_id
    assert (command.project_name, command.project_path, command.goal, command.max_iterations) == (
        "shop", "/r/shop", "Write a and b", 4)
    assert (command.anchor_turn_id, command.branch_name, command.context_strategy, command.created_by) == (
        "turn-7", "loop/ab", "hybrid", "cli")
    assert [(n.kind, n.url) for n in command.notify] == [("webhook", "http://127.0.0.1:9/hook")]
    assert view["status"] == "running" and view["max_iterations"] == 4 and view["iterations"] == []


async def test_start_keeps_a_given_session_id_and_the_defaults(gateway: Gateway, loops: StandInLoops):
    sid = str(uuid.uuid4())
    async with gateway.client() as http:
        first = await http.post("/api/pulse/start", json=start_body(sessionId=sid))
        second = await http.post("/api/pulse/start", json=start_body())
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] == sid and second.json()["id"] != sid
    command = loops.received[0]
    assert (command.max_iterations, command.context_strategy, command.created_by, command.notify) == (
        10, "prefetch", "api", [])


@pytest.mark.parametrize("created_by", ["telegram", "sms", "api", "cli", "mcp"])
async def test_start_takes_every_creator_the_seed_lists_and_the_seeds_notify_targets(
        gateway: Gateway, loops: StandInLoops, created_by: str):
    notify = [{"kind": "discord", "discordThreadId": "1187654321098765432"},
              {"kind": "sms", "phoneNumber": "+15557654321"}, {"kind": "telegram", "chatId": "-1001"}]
    async with gateway.client() as http:
        reply = await http.post("/api/pulse/start", json=start_body(createdBy=created_by, notify=notify))
    assert reply.status_code == 201, reply.text
    [command] = loops.received
    assert command.created_by == created_by
    assert [(n.kind, n.discord_thread_id, n.phone_number, n.chat_id) for n in command.notify] == [
        ("discord", "1187654321098765432", None, None), ("sms", None, "+15557654321", None),
        ("telegram", None, None, "-1001")]


@pytest.mark.parametrize("over", [
    {"goal": ""},
    {"goal": "   \n\t"},
    {"maxIterations": 0},
    {"maxIterations": -1},
    {"maxIterations": 10**12},
    {"maxIterations": "ten"},
    {"projectPath": "relative/shop"},
    {"projectPath": ""},
    {"projectName": " "},
    {"projectName": "shop\x1b[2J"},
    {"projectName": "two\nlines"},
    {"projectName": "final newline\n"},
    {"branchName": "autarch/x\n"},
    {"goal": "nul \x00 inside"},
    {"goal": "escape \x1b]0;title\x07"},
    {"projectPath": "/r/\x1bshop"},
    {"unknownField": 1},
    {"project_name": "snake"},
    {"contextStrategy": "psychic"},
    {"createdBy": "robot"},
    {"branchName": "-bad"},
    {"notify": [{"kind": "webhook", "url": "ftp://x"}]},
    {"notify": [{"kind": "sms", "phoneNumber": "555-1234"}]},
    {"notify": [{"kind": "sms", "phoneNumber": "+15557654321\n"}]},
    {"notify": [{"kind": "discord", "discordThreadId": "#general"}]},
    {"notify": [{"kind": "fax", "phoneNumber": "+15557654321"}]},
    {"sessionId": "not-a-uuid"},
])
async def test_bad_starts_are_400_and_send_nothing(gateway: Gateway, loops: StandInLoops, over: dict[str, Any]):
    async with gateway.client() as http:
        reply = await http.post("/api/pulse/start", json=start_body(**over))
    assert_error(reply, 400, "bad_request")
    assert loops.received == []


@pytest.mark.parametrize("body", [None, b"not json", b"[]", b'{"goal": "x"}'])
async def test_missing_or_malformed_start_bodies_are_400(gateway: Gateway, loops: StandInLoops, body: Any):
    async with gateway.client() as http:
        reply = await http.post("/api/pulse/start", content=body, headers={"Content-Type": "application/json"})
    assert_error(reply, 400, "bad_request")
    assert loops.received == []


@pytest.mark.parametrize(("code", "status"), START_ERRORS)
async def test_start_errors_of_the_orchestrator_keep_their_code(gateway: Gateway, loops: StandInLoops, code: str,
                                                                status: int):
    async with gateway.client() as http:
        reply = await http.post("/api/pulse/start", json=start_body(goal=f"fail:{code}"))
    body = assert_error(reply, status, code)
    assert body["details"] == {"field": "goal"}


# --- show, list -------------------------------------------------------------------------------------------


async def test_show_and_list(gateway: Gateway, loops: StandInLoops):
    async with gateway.client() as http:
        shown = await http.get(f"/api/pulse/{KNOWN.upper()}")
        listed = await http.get("/api/pulse", params={"status": "running", "limit": "5", "offset": "2"})
        everything = await http.get("/api/pulse")
    assert shown.status_code == 200 and shown.json()["id"] == KNOWN and "iterations" in shown.json()
    assert listed.status_code == 200 and listed.json()["total"] == 1
    assert everything.status_code == 200
    get, filtered, unfiltered = loops.received
    assert get == GetLoop(session_id=KNOWN)
    assert filtered == ListLoops(status="running", limit=5, offset=2)
    assert unfiltered == ListLoops()


@pytest.mark.parametrize("params", [{"status": "sleeping"}, {"status": "RUNNING"}, {"limit": "0"},
                                    {"limit": "many"}, {"offset": "-1"}])
async def test_bad_list_filters_are_400(gateway: Gateway, loops: StandInLoops, params: dict[str, str]):
    async with gateway.client() as http:
        reply = await http.get("/api/pulse", params=params)
    assert_error(reply, 400, "bad_request")
    assert loops.received == []


async def test_show_asks_for_the_iterations_the_client_names(gateway: Gateway, loops: StandInLoops):
    async with gateway.client() as http:
        paged = await http.get(f"/api/pulse/{KNOWN}", params={"iterations_from": "201", "iterations_limit": "50"})
    assert paged.status_code == 200
    assert loops.received == [GetLoop(session_id=KNOWN, iterations_from=201, iterations_limit=50)]


@pytest.mark.parametrize("params", [{"iterations_from": "0"}, {"iterations_from": "first"},
                                    {"iterations_limit": "0"}, {"iterations_limit": "1001"}])
async def test_bad_iteration_pages_are_400(gateway: Gateway, loops: StandInLoops, params: dict[str, str]):
    async with gateway.client() as http:
        reply = await http.get(f"/api/pulse/{KNOWN}", params=params)
    assert_error(reply, 400, "bad_request")
    assert loops.received == []


@pytest.mark.parametrize("given", ["not-a-uuid", "7a000000", "7a000000-0000-4000-8000-00000000000g"])
async def test_malformed_ids_are_404_and_send_nothing(gateway: Gateway, loops: StandInLoops, given: str):
    async with gateway.client() as http:
        replies = [await http.get(f"/api/pulse/{given}")]
        for verb in ("pause", "resume", "abort"):
            replies.append(await http.post(f"/api/pulse/{given}/{verb}"))
    for reply in replies:
        assert_error(reply, 404, "not_found")
    assert loops.received == []


async def test_unknown_sessions_are_404(gateway: Gateway, loops: StandInLoops):
    sid = str(uuid.uuid4())
    async with gateway.client() as http:
        replies = [await http.get(f"/api/pulse/{sid}")]
        for verb in ("pause", "resume", "abort"):
            replies.append(await http.post(f"/api/pulse/{sid}/{verb}"))
    for reply in replies:
        assert_error(reply, 404, "not_found")
    assert len(loops.received) == 4


# --- controls -----------------------------------------------------------------------------------------------


async def test_controls_send_their_commands_with_optional_bodies(gateway: Gateway, loops: StandInLoops):
    async with gateway.client() as http:
        paused = await http.post(f"/api/pulse/{KNOWN}/pause")
        resumed_bare = await http.post(f"/api/pulse/{KNOWN}/resume")
        resumed = await http.post(f"/api/pulse/{KNOWN}/resume", json={"message": "use postgres"})
        aborted_bare = await http.post(f"/api/pulse/{KNOWN}/abort")
        aborted = await http.post(f"/api/pulse/{KNOWN}/abort", json={"reason": "wrong goal"})
    assert [r.status_code for r in (paused, resumed_bare, resumed, aborted_bare, aborted)] == [200] * 5
    assert paused.json()["pause_requested"] is True and aborted.json()["status"] == "aborted"
    assert loops.received == [
        PauseLoop(session_id=KNOWN),
        ResumeLoop(session_id=KNOWN),
        ResumeLoop(session_id=KNOWN, message="use postgres"),
        AbortLoop(session_id=KNOWN),
        AbortLoop(session_id=KNOWN, reason="wrong goal"),
    ]


@pytest.mark.parametrize(("verb", "body"), [("resume", {"msg": "x"}), ("abort", {"reason": ""}),
                                            ("abort", {"reason": 3}), ("resume", [1]),
                                            ("resume", {"message": " \n"}), ("resume", {"message": "a\x1b[1m"}),
                                            ("abort", {"reason": "  "}), ("abort", {"reason": "x\x00"})])
async def test_bad_control_bodies_are_400(gateway: Gateway, loops: StandInLoops, verb: str, body: Any):
    async with gateway.client() as http:
        reply = await http.post(f"/api/pulse/{KNOWN}/{verb}", json=body)
    assert_error(reply, 400, "bad_request")
    assert loops.received == []


@pytest.mark.parametrize("sid", sorted(FAILING))
async def test_not_in_this_state_is_409_with_the_loop_code(gateway: Gateway, loops: StandInLoops, sid: str):
    code, status = FAILING[sid]
    async with gateway.client() as http:
        for verb in ("pause", "resume", "abort"):
            reply = await http.post(f"/api/pulse/{sid}/{verb}")
            assert assert_error(reply, status, code)["details"] == {"status": "blocked"}


async def test_without_an_orchestrator_the_routes_answer_503(gateway: Gateway):
    async with gateway.client() as http:
        reply = await http.get(f"/api/pulse/{KNOWN}")
    assert_error(reply, 503, "unavailable")


# --- events, schema -----------------------------------------------------------------------------------------


async def test_a_sessions_events_come_on_api_events_for_its_id(gateway: Gateway, nc: Client):
    sid, other = str(uuid.uuid4()), str(uuid.uuid4())

    async def record(session_id: str, n: int) -> None:
        event = LoopIterationCompleted(
            session_id=session_id, occurred_at=datetime.now(UTC), iteration_number=n, max_iterations=3,
            status="complete", signal="CONTINUE", signal_source="explicit", output_summary=f"step {n}",
            commit_hash="a1b2c3d4e5")
        subject = subjects.event(session_id, "loop", session_id, "iteration_completed")
        await nc.jetstream().publish(subject, msgspec.json.encode(event), stream=subjects.EVENTS_STREAM)

    async def act() -> None:
        await record(other, 1)
        await record(sid, 2)

    async with gateway.client() as http:
        seen = await collect(http, {"workflow": sid, "deltas": "false"}, act,
                             until=lambda s: any(e.event == "loop:iteration_completed" for e in s))
        # The same event again from the start of the stream (how `autarch watch` replays a session).
        replayed = await asyncio.wait_for(collect(
            http, {"workflow": sid, "since": "0", "deltas": "false"}, _nothing,
            until=lambda s: any(e.event == "loop:iteration_completed" for e in s)), 15)
    for events in (seen, replayed):
        [done] = [e for e in events if e.event == "loop:iteration_completed"]
        data = msgspec.json.decode(done.data)
        assert data["session_id"] == sid and data["iteration_number"] == 2 and data["signal"] == "CONTINUE"
        assert done.fields["id"].isdigit()


async def test_a_loop_event_recorded_before_session_id_is_sent_in_todays_shape(gateway: Gateway, nc: Client):
    """A loop event on the stream from before issue 33 (version 1: the session id in ``workflow_id``) reaches a client
    replaying the session as version 2, the id in ``session_id``."""
    sid = str(uuid.uuid4())
    old = {"type": "loop:paused", "workflow_id": sid, "occurred_at": "2026-11-25T05:30:00Z", "schema_version": 1,
           "iteration_number": 2}
    await nc.jetstream().publish(subjects.event(sid, "loop", sid, "paused"), msgspec.json.encode(old),
                                 stream=subjects.EVENTS_STREAM)
    async with gateway.client() as http:
        replayed = await asyncio.wait_for(collect(
            http, {"workflow": sid, "since": "0", "deltas": "false"}, _nothing,
            until=lambda s: any(e.event == "loop:paused" for e in s)), 15)
    [paused] = [e for e in replayed if e.event == "loop:paused"]
    assert msgspec.json.decode(paused.data) == {"type": "loop:paused", "session_id": sid, "schema_version": 2,
                                                "occurred_at": "2026-11-25T05:30:00Z", "iteration_number": 2}


async def _nothing() -> None:
    return None


async def test_the_openapi_document_lists_the_pulse_routes(gateway: Gateway):
    async with gateway.client() as http:
        schema = (await http.get("/schema/openapi.json")).json()
    paths = schema["paths"]
    assert set(paths["/api/pulse/start"]) == {"post"} and "201" in paths["/api/pulse/start"]["post"]["responses"]
    assert set(paths["/api/pulse"]) == {"get"}
    assert set(paths["/api/pulse/{session_id}"]) == {"get"}
    for verb in ("pause", "resume", "abort"):
        assert set(paths[f"/api/pulse/{{session_id}}/{verb}"]) == {"post"}
    params = {p["name"] for p in paths["/api/pulse"]["get"]["parameters"]}
    assert {"status", "limit", "offset"} <= params
