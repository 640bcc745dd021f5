"""Model calls through the real runner and SDK: retried streams and their deltas, raw tool arguments, thinking
round trips, each role's model, cache usage, the cost budget and server errors."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import msgspec
import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import SessionStopped, StopSession, TurnUsage
from autarch.contracts.events import TurnCompleted
from autarch.runtime.requests import request
from autarch.services.agent_runner.agents import DEFAULT_MODELS
from autarch.services.agent_runner.pricing import cost_usd
from autarch.services.scripted_model.protocol import thinking_signature

from .conftest import RUNNER, get_session, start_session, wait_turn
from .runners import own_runner, run_turn, run_turn_collecting_deltas
from .scenarios import CACHED_USAGE, RETRIED_TEXT, ROLE_NAMES, TRUNCATED_ARGS


def _ok_request(scripted, key: str, step: int) -> dict[str, Any]:
    bodies = [r.body for r in scripted.requests if r.key == key and r.step == step and r.outcome == "ok"]
    assert bodies, f"no answered request for {key} step {step}"
    return bodies[-1]


def _shown(deltas: list[dict[str, Any]]) -> str:
    """The message text a listener shows after these deltas, honouring ``restart``."""
    shown = ""
    for delta in deltas:
        if delta["type"] == "turn:message_delta":
            shown = ("" if delta["restart"] else shown) + delta["text"]
    return shown


# --- a stream that broke mid-way and was retried ------------------------------------------------------------


async def test_a_retried_stream_restarts_the_deltas_so_a_listener_shows_the_text_once(nc, runner, repo, scripted):
    turn, got = await run_turn_collecting_deltas(nc, role="discussion", script="restart", root=repo)
    final = "An answer streamed twice, shown once."
    assert turn.outcome.kind == "end_turn" and turn.messages == [final]
    assert [r.outcome for r in scripted.requests if r.key == "discussion:restart"] == ["failed_mid_stream", "ok"]
    restarts = [d for d in got if d["restart"]]
    assert len(restarts) == 1 and restarts[0]["text"] == "An "  # the retried stream's first word
    assert "".join(d["text"] for d in got) != final  # the broken attempt's words were streamed too ...
    assert _shown(got) == final  # ... and a listener honouring restart shows the answer once


async def test_a_turn_stopped_after_a_retry_records_the_retried_text_only(nc, runner, repo):
    workflow_id = str(uuid.uuid4())
    restarted, later = asyncio.Event(), asyncio.Event()
    deltas: list[dict[str, Any]] = []

    async def watch(msg) -> None:
        delta = json.loads(msg.data)
        deltas.append(delta)
        if delta["restart"]:
            restarted.set()
        if restarted.is_set() and len(deltas) - deltas.index(next(d for d in deltas if d["restart"])) > 3:
            later.set()

    sub = await nc.subscribe(subjects.deltas(workflow_id, "*"), cb=watch)
    accepted = await start_session(nc, role="discussion", script="mid-stream-slow", root=repo,
                                   workflow_id=workflow_id)
    completed = await nc.subscribe(subjects.event(workflow_id, "turn", accepted.session_id, "completed"))
    try:
        await asyncio.wait_for(later.wait(), 20)
        stopped = await request(nc, subjects.request(RUNNER, "stop_session"),
                                StopSession(session_id=accepted.session_id, reason="stop"), SessionStopped)
        assert stopped.turn_id == accepted.turn_id
        event = msgspec.json.decode((await completed.next_msg(timeout=10)).data, type=TurnCompleted)
    finally:
        await sub.unsubscribe()
        await completed.unsubscribe()
    assert event.outcome == "cancelled"
    # Only what the retried stream sent: the broken attempt's words are not repeated in front of it.
    assert event.text.startswith("token0 token1 token2 token3") and RETRIED_TEXT.startswith(event.text)
    assert event.text.count("token0 ") == 1


# --- tool arguments that are not JSON ---------------------------------------------------------------------


async def test_tool_arguments_that_are_not_a_json_object_get_an_error_and_the_turn_goes_on(
    nc, runner, repo, scripted
):
    accepted = await start_session(nc, role="pulsing", script="raw-args", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome.kind == "end_turn", turn.outcome
    assert turn.messages == ["Reading greet.", "Read it on the second try."]
    truncated, array, fixed = turn.tool_calls
    for call, raw in ((truncated, TRUNCATED_ARGS), (array, '["greet"]')):
        error = json.loads(call.output)["error"]
        assert call.is_error and call.input == {}
        assert f"this {call.name} call are not a JSON object" in error and repr(raw) in error
    assert not fixed.is_error and "Greet someone by name" in fixed.output
    # The model was told: its next request answers each broken call with that error.
    body = _ok_request(scripted, "pulsing:raw-args", 1)
    uses = [b for b in body["messages"][1]["content"] if b["type"] == "tool_use"]
    assert [u["input"] for u in uses] == [{}, {}]  # kept, with empty input, as the API needs an object
    results = {b["tool_use_id"]: b for b in body["messages"][2]["content"]}
    for call in (truncated, array):
        assert (results[call.tool_use_id]["content"], results[call.tool_use_id]["is_error"]) == (call.output, True)


# --- thinking, models, usage --------------------------------------------------------------------------


async def test_a_signed_thinking_block_goes_back_to_the_model_with_the_tool_result(nc, runner, repo, scripted):
    accepted = await start_session(nc, role="research", script="think-and-read", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome.kind == "end_turn" and turn.model_calls == 2, turn.outcome
    thought = "The greeting is built in core.py; read it before anything else."
    assert [t.text for t in turn.thoughts] == [thought]
    body = _ok_request(scripted, "research:think-and-read", 1)
    assert body["thinking"]["type"] in ("adaptive", "enabled")
    thinking, use = body["messages"][1]["content"]
    # Handed back intact: the scripted model refuses a block whose signature does not match its text.
    assert thinking == {"type": "thinking", "thinking": thought, "signature": thinking_signature(thought)}
    assert use["name"] == "read_file"
    [result] = body["messages"][2]["content"]
    assert result["tool_use_id"] == use["id"] and "Greet someone by name" in result["content"]


def _body_for(scripted, key: str, kickoff: str) -> dict[str, Any]:
    [body] = [r.body for r in scripted.requests
              if r.key == key and r.outcome == "ok" and r.body["messages"][0]["content"][-1]["text"] == kickoff]
    return body


@pytest.mark.parametrize("role", ROLE_NAMES)
async def test_each_role_asks_its_own_model(nc, runner, repo, scripted, role):
    kickoff = f"Say hello ({uuid.uuid4()})."
    accepted = await start_session(nc, role=role, script="hello", root=repo, kickoff=kickoff)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    assert view.model == DEFAULT_MODELS[role] and view.turns[0].messages == [f"Hello from {role}."]
    assert _body_for(scripted, f"{role}:hello", kickoff)["model"] == DEFAULT_MODELS[role]


async def test_agent_models_override_the_default_model_of_a_role(nc, data_dir, scripted, tools, repo):
    chosen = {}
    async with own_runner(nc, data_dir, scripted, agent_models="*=claude-haiku-4-5,plan=claude-opus-4-8"):
        for role in ("plan", "discussion", "pulsing"):
            kickoff = f"Say hello ({uuid.uuid4()})."
            session_id, _ = await run_turn(nc, role=role, script="hello", root=repo, kickoff=kickoff)
            view = await get_session(nc, session_id)
            chosen[role] = (view.model, _body_for(scripted, f"{role}:hello", kickoff)["model"])
    assert chosen == {"plan": ("claude-opus-4-8",) * 2, "discussion": ("claude-haiku-4-5",) * 2,
                      "pulsing": ("claude-haiku-4-5",) * 2}


async def test_cache_reads_and_writes_are_recorded_on_the_turn_and_priced(nc, runner, repo):
    accepted = await start_session(nc, role="discussion", script="cached", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome.kind == "end_turn" and turn.model_calls == 2
    expected = TurnUsage(**{name: sum(u[name] for u in CACHED_USAGE) for name in CACHED_USAGE[0]})
    assert turn.usage == expected == view.usage
    assert expected.cache_creation_input_tokens == 2_040 and expected.cache_read_input_tokens == 2_000
    assert turn.cost_usd == pytest.approx(cost_usd(DEFAULT_MODELS["discussion"], expected))


# --- budgets and server errors -----------------------------------------------------------------------


async def test_the_workflow_cost_budget_ends_the_turn_before_the_next_model_call(nc, data_dir, scripted, tools, repo):
    async with own_runner(nc, data_dir, scripted, workflow_cost_budget=0.000001):
        _, turn = await run_turn(nc, role="discussion", script="budget", root=repo)
    assert turn.outcome.kind == "budget_exceeded", turn.outcome
    assert turn.outcome.detail.startswith("workflow spent $") and "$0.00 budget" in turn.outcome.detail
    assert turn.model_calls == 1 and turn.cost_usd > 0.000001


async def test_a_server_error_is_retried_through_the_runner(nc, runner, repo, scripted):
    accepted = await start_session(nc, role="discussion", script="server-error", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome.kind == "end_turn" and turn.messages == ["Answer after a server error."]
    attempts = [(r.status, r.outcome) for r in scripted.requests if r.key == "discussion:server-error"]
    assert attempts == [(500, "injected_error"), (200, "ok")]
