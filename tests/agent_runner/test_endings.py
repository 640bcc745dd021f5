"""How the runner handles each way a model reply can end, through the real SDK against the scripted model:
cut by ``max_tokens`` inside a tool call, paused (``pause_turn``), refused; and a request the API finds too long."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import SendMessage, TurnAccepted
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.agent_runner.agents import AgentRegistry
from autarch.services.scripted_model import ScriptedModelServer

from .conftest import RUNNER, wait_turn
from .runners import own_runner, run_turn
from .scenarios import NEW, OLD, PULSE_DONE, step, text, tool

EDIT = {"reason": "Greet the world", "path": "greeter/core.py", "oldString": OLD, "newString": NEW}
READ = step(tool("read_file", reason="Read greet before editing it", path="greeter/core.py"))
CUT = step(text("Editing greet."), tool("edit_file", **EDIT), stop_reason="max_tokens")
REFUSED_WORDS = "I won't continue with"
EXPLANATION = "This request was declined because it could enable cyber harm."

SCENARIO = {
    "scripts": {
        "pulsing:cut": [READ, CUT, step(tool("edit_file", **EDIT)), step(text("Edited."))],
        "pulsing:cut-at-the-cap": [CUT, CUT, step(text("I will write it in parts."))],
        "pulsing:cut-then-complete": [
            READ, CUT, step({"type": "tool_use", "name": "edit_file", "raw_input": '{"path": "greeter/co'}),
            step(tool("edit_file", reason="Edit greet", path=["greeter/core.py"], oldString=7)),
            step(tool("edit_file", **EDIT)), step(tool("complete_pulse", **PULSE_DONE)),
        ],
        "pulsing:paused": [
            step(text("Looking through the module first"), stop_reason="pause_turn"),
            step(text("and now reading it."), tool("read_file", reason="Read greet", path="greeter/core.py")),
            step(text("Read.")),
        ],
        "pulsing:refused": [
            step(tool("read_file", reason="Read greet", path="greeter/core.py")),
            step(text(REFUSED_WORDS), stop_reason="refusal",
                 stop_details={"category": "cyber", "explanation": EXPLANATION}),
        ],
    },
}


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCENARIO) as server:
        yield server


def _requests(model: ScriptedModelServer, key: str) -> list:
    return [r for r in model.requests if r.key == key and r.outcome == "ok"]


def _pulsing_max_tokens() -> int:
    return AgentRegistry(settings=Settings(data_dir="/tmp/unused")).get("pulsing").max_tokens


async def test_a_call_cut_by_max_tokens_does_not_run_and_the_turn_goes_on_with_twice_the_budget(
        nc, data_dir, tools, model, repo: Path):
    async with own_runner(nc, data_dir, model):
        _, turn = await run_turn(nc, role="pulsing", script="cut", root=repo)
    assert turn.outcome is not None and turn.outcome.kind == "end_turn", turn.outcome
    _, cut, edit = turn.tool_calls
    base = _pulsing_max_tokens()
    assert cut.is_error and cut.name == "edit_file"
    error = json.loads(cut.output or "")["error"]
    assert f"max_tokens limit ({base} tokens)" in error and "did not run" in error
    assert f"up to {2 * base} tokens" in error
    assert not edit.is_error
    # The edit ran once, from the complete call.
    assert (repo / "greeter/core.py").read_text().count(NEW) == 1
    budgets = [r.body["max_tokens"] for r in _requests(model, "pulsing:cut")]
    assert budgets == [base, base, 2 * base, 2 * base]


async def test_at_the_models_most_output_the_error_says_why_the_budget_stays(nc, data_dir, tools, model, repo):
    # Opus 4.1 writes at most 32,000 tokens a reply: one doubling of the 16,000 reaches it.
    async with own_runner(nc, data_dir, model, agent_models="pulsing=claude-opus-4-1"):
        _, turn = await run_turn(nc, role="pulsing", script="cut-at-the-cap", root=repo)
    assert turn.outcome is not None and turn.outcome.kind == "end_turn"
    first, second = (json.loads(c.output or "")["error"] for c in turn.tool_calls)
    assert "up to 32000 tokens" in first
    assert "32000 tokens is the most this model may write in one reply" in second
    assert "cannot be raised" in second and "smaller calls" in second
    assert [r.body["max_tokens"] for r in _requests(model, "pulsing:cut-at-the-cap")] == [16000, 32000, 32000]


async def test_a_paused_reply_is_sent_back_and_the_model_carries_on(nc, data_dir, tools, model, repo):
    async with own_runner(nc, data_dir, model):
        _, turn = await run_turn(nc, role="pulsing", script="paused", root=repo)
    assert turn.outcome is not None and turn.outcome.kind == "end_turn", turn.outcome
    assert turn.model_calls == 3 and [c.name for c in turn.tool_calls] == ["read_file"]
    carried_on = _requests(model, "pulsing:paused")[1].body["messages"]
    # The paused reply is the request's last message: the model continues it, nothing was added after it.
    assert carried_on[-1]["role"] == "assistant"
    assert carried_on[-1]["content"] == [{"type": "text", "text": "Looking through the module first"}]
    assert turn.messages[:2] == ["Looking through the module first", "and now reading it."]


async def test_a_refusal_ends_the_turn_with_the_models_words_and_is_left_out_of_later_requests(
        nc, data_dir, tools, model, repo):
    model.reset()
    async with own_runner(nc, data_dir, model):
        session_id, turn = await run_turn(nc, role="pulsing", script="refused", root=repo)
        assert turn.outcome is not None and turn.outcome.kind == "refusal", turn.outcome
        detail = turn.outcome.detail
        assert 'stop_reason "refusal", category cyber' in detail and EXPLANATION in detail
        assert f'its words: "{REFUSED_WORDS}"' in detail
        assert turn.model_calls == 2 and [c.name for c in turn.tool_calls] == ["read_file"]
        # The session goes on: the next turn's request leaves the refused reply out, as the API asks.
        accepted = await request(nc, subjects.request(RUNNER, "send_message"),
                                 SendMessage(session_id=session_id, text="Carry on with the task."), TurnAccepted)
        view = await wait_turn(nc, session_id, accepted.turn_id)
    messages = _requests(model, "pulsing:refused")[-1].body["messages"]
    assert REFUSED_WORDS not in json.dumps(messages)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert "Carry on with the task." in json.dumps(messages[-1])
    # The scripted model answers by step (assistant messages in the request): the same step, refused again.
    assert view.turns[1].outcome is not None and view.turns[1].outcome.kind == "refusal"


async def test_calls_that_never_ran_leave_nothing_unresolved_for_complete_pulse(nc, data_dir, tools, model, repo):
    # Cut by max_tokens, not JSON, of the wrong type: each is an error the model reads, none blocks completion.
    async with own_runner(nc, data_dir, model):
        _, turn = await run_turn(nc, role="pulsing", script="cut-then-complete", root=repo)
    assert turn.outcome is not None and turn.outcome.kind == "block", turn.outcome
    assert turn.outcome.tool == "complete_pulse"
    errors = [json.loads(c.output or "")["error"] for c in turn.tool_calls[1:4]]
    assert "max_tokens limit" in errors[0]
    assert "not a JSON object" in errors[1]
    assert "Invalid arguments for edit_file" in errors[2]
