"""Two ways a real model call goes wrong that a scenario can play: arguments that are not JSON, a full context."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from autarch.services.scripted_model import ScenarioError, parse_scenario

from .support import TOOLS, client

TRUNCATED = '{"reason": "Read it", "path": "app/ma'

SCENARIO: dict[str, Any] = {
    "scripts": {
        "pulsing": [
            {
                "content": [
                    {"type": "tool_use", "name": "read_file", "raw_input": TRUNCATED},
                    {"type": "tool_use", "name": "read_file", "input": {"path": "t.py"}},
                    {"type": "tool_use", "name": "shell", "raw_input": "[1, 2]", "input": {"command": "true"}},
                ]
            }
        ]
    },
}


async def test_raw_input_is_streamed_verbatim_while_other_calls_keep_their_json(start_server):
    server = start_server(SCENARIO)
    stream = await client(server, role="pulsing").messages.create(
        model="m", max_tokens=1024, messages=[{"role": "user", "content": "Go."}], tools=TOOLS, stream=True
    )
    argument_text: dict[int, str] = {}
    async for event in stream:
        if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            argument_text[event.index] = argument_text.get(event.index, "") + event.delta.partial_json
    assert argument_text == {0: TRUNCATED, 1: '{"path":"t.py"}', 2: "[1, 2]"}


async def test_a_non_streaming_reply_carries_input_for_a_raw_input_call(start_server):
    server = start_server(SCENARIO)
    message = await client(server, role="pulsing").messages.create(
        model="m", max_tokens=1024, messages=[{"role": "user", "content": "Go."}], tools=TOOLS
    )
    assert [b.input for b in message.content] == [{}, {"path": "t.py"}, {"command": "true"}]
    assert [b.id for b in message.content] == ["toolu_pulsing_0_0", "toolu_pulsing_0_1", "toolu_pulsing_0_2"]


async def test_a_request_over_the_context_window_is_refused_as_the_api_does(start_server):
    server = start_server({"context_window": 300, "scripts": {"discussion": ["Short answer."]}})
    model = client(server, role="discussion")
    small = await model.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": "Hi."}])
    assert small.content[0].text == "Short answer."
    with pytest.raises(anthropic.BadRequestError) as caught:
        await model.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": "x" * 2000}])
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert caught.value.body["error"]["message"].startswith("prompt is too long: ")
    assert caught.value.body["error"]["message"].endswith(" tokens > 300 maximum")
    assert [r.outcome for r in server.requests] == ["ok", "rejected"]


def test_context_window_must_be_positive():
    with pytest.raises(ScenarioError, match="context_window"):
        parse_scenario({"context_window": 0, "scripts": {"discussion": ["hi"]}})
