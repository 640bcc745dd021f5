"""Turn lifecycle: stop commands, orphaned tool calls, follow-up messages, idempotency, the event stream."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import msgspec
from nats.js.api import ConsumerConfig, DeliverPolicy

from autarch.contracts import subjects
from autarch.contracts.agents import SendMessage, SessionStopped, StartSession, StopSession, TurnAccepted
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import AnyEvent, TurnCompleted
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request

from .conftest import RUNNER, get_session, start_session, wait_turn
from .scenarios import SCOPE


async def _send(nc, session_id: str, text: str, **fields) -> TurnAccepted:
    return await request(
        nc,
        subjects.request(RUNNER, "send_message"),
        SendMessage(session_id=session_id, text=text, **fields),
        TurnAccepted,
    )


async def _stop(nc, session_id: str, **fields) -> SessionStopped:
    return await request(
        nc, subjects.request(RUNNER, "stop_session"), StopSession(session_id=session_id, **fields), SessionStopped
    )


async def _wait_for(predicate, *, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_stop_ends_a_streaming_turn_within_a_second_and_records_what_happened(nc, runner, repo):
    workflow_id = str(uuid.uuid4())
    deltas = 0
    some_words = asyncio.Event()

    async def on_delta(msg) -> None:
        nonlocal deltas
        deltas += 1
        if deltas == 3:  # the turn is well under way: a few words have arrived
            some_words.set()

    sub = await nc.subscribe(subjects.deltas(workflow_id, "*"), cb=on_delta)
    accepted = await start_session(nc, role="discussion", script="slow", root=repo, workflow_id=workflow_id)
    await asyncio.wait_for(some_words.wait(), 10)
    began = time.monotonic()
    stopped = await _stop(nc, accepted.session_id, reason="user pressed stop")
    elapsed = time.monotonic() - began
    await sub.unsubscribe()
    assert stopped.turn_id == accepted.turn_id and not stopped.closed
    view = await get_session(nc, accepted.session_id)
    turn = view.turns[0]
    assert turn.outcome is not None and turn.outcome.kind == "cancelled"
    assert "user pressed stop" in turn.outcome.detail and "model call 1" in turn.outcome.detail
    assert view.status == "idle"
    # Recorded facts, not a timing assertion: the stop command answered once the outcome was recorded.
    print(f"stop took {elapsed * 1000:.1f} ms")


async def test_a_tool_call_cut_off_by_stop_gets_a_synthesized_error_result_in_the_next_turn(nc, runner, repo, scripted):
    accepted = await start_session(nc, role="pulsing", script="slow-tool", root=repo)

    async def tool_started() -> bool:
        view = await get_session(nc, accepted.session_id)
        return bool(view.turns[0].tool_calls)

    await _wait_for(tool_started)
    await _stop(nc, accepted.session_id, reason="stop")
    view = await get_session(nc, accepted.session_id)
    assert view.turns[0].outcome.kind == "cancelled" and view.turns[0].tool_calls[0].output is None
    follow = await _send(nc, accepted.session_id, "Carry on.")
    view = await wait_turn(nc, accepted.session_id, follow.turn_id)
    assert view.turns[1].outcome.kind == "end_turn"
    body = next(r.body for r in reversed(scripted.requests) if r.key == "pulsing:slow-tool" and r.step == 1)
    opening = body["messages"][-1]["content"]
    [result] = [b for b in opening if b["type"] == "tool_result"]
    assert result["is_error"] is True and "interrupted" in result["content"]
    assert opening[-1]["text"] == "Carry on."


async def test_a_block_result_is_sent_with_the_next_message_and_the_session_continues(nc, runner, repo, scripted):
    accepted = await start_session(nc, role="scoping", script="two-turns", root=repo,
                                   notes=["Empty names are the only case to change."])
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    first = view.turns[0]
    assert (first.outcome.kind, first.outcome.tool) == ("block", "ask_questions")
    follow = await _send(nc, accepted.session_id, "world", message_id="answer-1")
    again = await _send(nc, accepted.session_id, "world", message_id="answer-1")
    assert again.turn_id == follow.turn_id and not again.created
    view = await wait_turn(nc, accepted.session_id, follow.turn_id)
    assert (view.turns[1].outcome.tool, view.turns[1].outcome.arguments) == ("submit_scope", SCOPE)
    body = next(r.body for r in reversed(scripted.requests) if r.key == "scoping:two-turns" and r.step == 1)
    opening = body["messages"][-1]["content"]
    assert opening[0]["type"] == "tool_result" and json.loads(opening[0]["content"])["status"] == "submitted"
    assert opening[-1]["text"] == "world"
    # The stage's notes are injected into every turn, just before the user's text.
    assert "Empty names are the only case to change." in opening[-2]["text"]
    assert "<stage-notes>" in body["messages"][0]["content"][0]["text"]


async def test_start_is_idempotent_and_busy_or_closed_sessions_refuse_messages(nc, runner, repo):
    command = StartSession(
        session_id=str(uuid.uuid4()),
        role="discussion",
        root=str(repo),
        kickoff="hi",
        script="slow",
        notes=["Greeter has one module."],
    )
    first = await request(nc, subjects.request(RUNNER, "start_session"), command, TurnAccepted)
    again = await request(nc, subjects.request(RUNNER, "start_session"), command, TurnAccepted)
    assert (again.turn_id, again.created) == (first.turn_id, False)
    try:
        await _send(nc, command.session_id, "are you there?")
        raise AssertionError("a busy session took a message")
    except RemoteError as exc:
        assert exc.code == ErrorCode.CONFLICT and "still running" in exc.message
    other = msgspec.structs.replace(command, kickoff="something else")
    try:
        await request(nc, subjects.request(RUNNER, "start_session"), other, TurnAccepted)
        raise AssertionError("a start with other fields was accepted")
    except RemoteError as exc:
        assert exc.code == ErrorCode.CONFLICT
    stopped = await _stop(nc, command.session_id, close=True)
    assert stopped.closed
    view = await get_session(nc, command.session_id)
    assert view.status == "closed" and view.notes == ["Greeter has one module."]
    try:
        await _send(nc, command.session_id, "hello?")
        raise AssertionError("a closed session took a message")
    except RemoteError as exc:
        assert exc.code == ErrorCode.CONFLICT and "closed" in exc.message


async def test_session_and_turn_events_reach_the_stream_in_order(nc, runner, repo):
    workflow_id = str(uuid.uuid4())
    accepted = await start_session(nc, role="research", script="read-and-submit", root=repo, workflow_id=workflow_id)
    await wait_turn(nc, accepted.session_id, accepted.turn_id)
    sub = await nc.jetstream().subscribe(
        subjects.run_events(workflow_id),
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    events = []
    try:
        while len(events) < 7:
            msg = await sub.next_msg(timeout=5)
            events.append(msgspec.json.decode(msg.data, type=AnyEvent))
    finally:
        await sub.unsubscribe()
    kinds = [type(e).__struct_config__.tag for e in events]
    assert kinds == [
        "session:started",
        "turn:started",
        "turn:tool_started",
        "turn:tool_completed",
        "turn:tool_started",
        "turn:tool_completed",
        "turn:completed",
    ]
    done = events[-1]
    assert isinstance(done, TurnCompleted) and done.tool == "submit_research"
    assert done.text == "Let me read the code.\n\nI have what I need." and done.thoughts
    assert done.input_tokens > 0 and done.cost_usd > 0 and done.model_calls == 2 and done.tool_calls == 3
