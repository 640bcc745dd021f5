"""How a scripted reply ends, as the real Messages API ends one: cut by ``max_tokens`` inside a tool call, paused
(``pause_turn``) and carried on, refused with ``stop_details``; streamed and not."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autarch.services.scripted_model import ScenarioError, parse_scenario

from .support import TOOLS, client

EDIT = {"reason": "Rewrite the module", "path": "greeter/core.py", "oldString": "a" * 40, "newString": "b" * 40}

SCENARIO: dict[str, Any] = {
    "scripts": {
        "pulsing": [
            {"stop_reason": "max_tokens", "content": [
                {"type": "text", "text": "Rewriting the module."},
                {"type": "tool_use", "name": "edit_file", "input": EDIT},
            ]},
        ],
        "research": [
            {"stop_reason": "pause_turn", "content": [{"type": "text", "text": "Still searching"}]},
            "Found it.",
        ],
        "review": [
            {"stop_reason": "refusal", "content": [{"type": "text", "text": "I can't help with"}],
             "stop_details": {"category": "cyber", "explanation": "This request could enable cyber harm."}},
        ],
        "plan": [{"stop_reason": "refusal", "content": [{"type": "text", "text": "No."}]}],
    },
}


async def _stream(server, role: str, messages: list[dict[str, Any]], max_tokens: int = 512) -> list[Any]:
    stream = await client(server, role=role).messages.create(
        model="m", max_tokens=max_tokens, messages=messages, tools=TOOLS, stream=True)  # type: ignore[arg-type]  # plain JSON
    return [event async for event in stream]


async def test_a_reply_cut_inside_a_tool_call_streams_half_its_arguments(start_server):
    server = start_server(SCENARIO)
    events = await _stream(server, "pulsing", [{"role": "user", "content": "Go."}], max_tokens=700)
    arguments = "".join(e.delta.partial_json for e in events
                        if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
    whole = json.dumps(EDIT, separators=(",", ":"))
    assert arguments == whole[: len(whole) // 2]
    with pytest.raises(ValueError):
        json.loads(arguments)
    [delta] = [e for e in events if e.type == "message_delta"]
    # The budget ran out: the reply used all of the request's max_tokens.
    assert delta.delta.stop_reason == "max_tokens" and delta.usage.output_tokens == 700
    assert [e.index for e in events if e.type == "content_block_stop"] == [0, 1]

    message = await client(server, role="pulsing").messages.create(
        model="m", max_tokens=700, messages=[{"role": "user", "content": "Go."}], tools=TOOLS)
    assert message.stop_reason == "max_tokens" and message.content[1].input == {}


async def test_a_paused_reply_sent_back_as_the_last_assistant_message_is_carried_on(start_server):
    server = start_server(SCENARIO)
    first = await client(server, role="research").messages.create(
        model="m", max_tokens=512, messages=[{"role": "user", "content": "Search."}], tools=TOOLS)
    assert first.stop_reason == "pause_turn"
    paused = [b.model_dump() for b in first.content]
    events = await _stream(server, "research", [{"role": "user", "content": "Search."},
                                                {"role": "assistant", "content": paused}])
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert text == "Found it."


async def test_a_refusal_carries_its_stop_details_streamed_and_not(start_server):
    server = start_server(SCENARIO)
    events = await _stream(server, "review", [{"role": "user", "content": "Review."}])
    [delta] = [e for e in events if e.type == "message_delta"]
    assert delta.delta.stop_reason == "refusal"
    assert delta.delta.stop_details.category == "cyber"
    assert delta.delta.stop_details.explanation == "This request could enable cyber harm."
    [start] = [e for e in events if e.type == "message_start"]
    assert start.message.stop_details is None
    message = await client(server, role="plan").messages.create(
        model="m", max_tokens=512, messages=[{"role": "user", "content": "Plan."}], tools=TOOLS)
    assert message.stop_reason == "refusal" and message.content[0].text == "No."
    assert message.stop_details is not None and message.stop_details.type == "refusal"
    assert message.stop_details.category is None and message.stop_details.explanation is None


@pytest.mark.parametrize(("step", "problem"), [
    ({"stop_reason": "pause_turn", "content": [{"type": "tool_use", "name": "shell", "input": {}}]},
     "cannot stop with 'pause_turn'"),
    ({"stop_reason": "end_turn", "content": [{"type": "text", "text": "x"}],
      "stop_details": {"category": "bio"}}, "stop_details go with stop_reason 'refusal' only"),
    ({"stop_reason": "refusal", "content": [{"type": "text", "text": "x"}],
      "stop_details": {"category": "weather"}}, "stop_details.category"),
])
def test_endings_a_real_reply_cannot_have_are_refused(step, problem):
    with pytest.raises(ScenarioError, match=problem):
        parse_scenario({"scripts": {"pulsing": [step]}})
