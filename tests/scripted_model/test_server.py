"""The scripted model against the real anthropic SDK: replies, streaming, step selection, errors and retries."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import httpx
import pytest

from .support import TOOLS, client

THINKING = {"type": "enabled", "budget_tokens": 1024}

SCENARIO: dict[str, Any] = {
    "scripts": {
        "research": [
            {
                "content": [
                    {"type": "thinking", "thinking": "First I should read the main module to see how it works."},
                    {"type": "text", "text": "Let me read the main module first."},
                    {"type": "tool_use", "name": "read_file", "input": {"reason": "Read it", "path": "app/main.py"}},
                    {"type": "tool_use", "name": "read_file", "input": {"reason": "And its test", "path": "t.py"}},
                ]
            },
            {
                "content": [
                    {
                        "type": "tool_use",
                        "name": "submit_research",
                        "input": {"summary": "It works.", "keyFiles": [], "recommendations": ["Keep it."]},
                    }
                ]
            },
            "Research submitted.",
        ],
        "pulsing": ["The default pulse script."],
        "pulsing:pulse-2": ["The second pulse's script."],
    }
}

USER = [{"role": "user", "content": "Research the app."}]


async def test_non_streaming_reply_has_text_thinking_and_tool_use(start_server):
    server = start_server(SCENARIO)
    message = await client(server, role="research").messages.create(
        model="claude-test", max_tokens=4096, messages=USER, tools=TOOLS, thinking=THINKING
    )
    assert message.model == "claude-test"
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[0].thinking.startswith("First I should read")
    assert message.content[0].signature
    assert message.content[1].text == "Let me read the main module first."
    assert [b.id for b in message.content[2:]] == ["toolu_research_0_0", "toolu_research_0_1"]
    assert message.content[2].name == "read_file"
    assert message.content[2].input == {"reason": "Read it", "path": "app/main.py"}
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


async def test_thinking_is_only_sent_when_the_request_enables_it(start_server):
    server = start_server(SCENARIO)
    message = await client(server, role="research").messages.create(
        model="claude-test", max_tokens=1024, messages=USER, tools=TOOLS
    )
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]


async def test_stream_helper_builds_the_same_message(start_server):
    server = start_server(SCENARIO)
    model = client(server, role="research")
    request = {"model": "claude-test", "max_tokens": 4096, "messages": USER, "tools": TOOLS, "thinking": THINKING}
    expected = await model.messages.create(**request)
    texts, thoughts = [], []
    async with model.messages.stream(**request) as stream:
        async for event in stream:
            if event.type == "text":
                texts.append(event.text)
            elif event.type == "thinking":
                thoughts.append(event.thinking)
        final = await stream.get_final_message()
    assert final.model_dump(exclude={"content"}) == expected.model_dump(exclude={"content"})
    fields = {"type", "text", "thinking", "signature", "id", "name", "input"}
    assert [b.model_dump(include=fields) for b in final.content] == [
        b.model_dump(include=fields) for b in expected.content
    ]
    # Word by word, as the real API streams.
    assert len(texts) > 1 and "".join(texts) == "Let me read the main module first."
    assert len(thoughts) > 1


async def test_raw_stream_follows_the_api_event_sequence(start_server):
    server = start_server(SCENARIO)
    stream = await client(server, role="research").messages.create(
        model="claude-test", max_tokens=4096, messages=USER, tools=TOOLS, thinking=THINKING, stream=True
    )
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert events[0].message.content == [] and events[0].message.stop_reason is None
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 4
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"} <= set(deltas)
    tool_json = "".join(
        e.delta.partial_json for e in events if e.type == "content_block_delta" and e.index == 2
    )
    assert tool_json == '{"reason":"Read it","path":"app/main.py"}'
    assert sum(1 for e in events if e.type == "content_block_delta" and e.index == 2) > 2
    assert events[-2].delta.stop_reason == "tool_use" and events[-2].usage.output_tokens > 1


async def test_step_is_the_number_of_assistant_messages(start_server):
    server = start_server(SCENARIO)
    model = client(server, role="research")
    messages: list[Any] = list(USER)
    first = await model.messages.create(model="m", max_tokens=4096, messages=messages, tools=TOOLS, thinking=THINKING)
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": "file text"}
                for b in first.content
                if b.type == "tool_use"
            ],
        },
    ]
    second = await model.messages.create(model="m", max_tokens=4096, messages=messages, tools=TOOLS, thinking=THINKING)
    assert second.content[0].name == "submit_research" and second.content[0].id == "toolu_research_1_0"
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": second.content[0].id, "content": "ok"}]},
    ]
    third = await model.messages.create(model="m", max_tokens=4096, messages=messages, tools=TOOLS)
    assert third.content[0].text == "Research submitted." and third.stop_reason == "end_turn"
    # Replaying the first call (a restarted runner) gets the very same answer.
    again = await model.messages.create(model="m", max_tokens=4096, messages=USER, tools=TOOLS, thinking=THINKING)
    assert again.model_dump() == first.model_dump()
    assert [(r.key, r.step) for r in server.requests] == [("research", 0), ("research", 1), ("research", 2),
                                                          ("research", 0)]


async def test_script_header_and_system_markers_select_the_script(start_server):
    server = start_server(SCENARIO)
    model = client(server)

    async def reply(**options: Any) -> str:
        message = await model.messages.create(model="m", max_tokens=100, messages=USER, **options)
        return message.content[0].text

    pulse = {"x-autarch-role": "pulsing"}
    assert await reply(extra_headers={**pulse, "x-autarch-script": "pulse-2"}) == "The second pulse's script."
    # No "pulsing:pulse-1" script: the role's plain script answers.
    assert await reply(extra_headers={**pulse, "x-autarch-script": "pulse-1"}) == "The default pulse script."
    assert await reply(extra_headers=pulse) == "The default pulse script."
    system = [{"type": "text", "text": "You are the pulsing agent.\nautarch-role: pulsing\nautarch-script: pulse-2"}]
    assert await reply(system=system) == "The second pulse's script."


async def test_a_missing_step_says_which_role_and_step(start_server):
    server = start_server(SCENARIO)
    model = client(server, role="pulsing")
    history = [*USER, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Again?"}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        await model.messages.create(model="m", max_tokens=100, messages=history)
    message = caught.value.body["error"]["message"]
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "no step 1 for script 'pulsing'" in message and "(it has 1 step, 0-0)" in message

    with pytest.raises(anthropic.BadRequestError, match="no script 'review' for role 'review'"):
        await client(server, role="review").messages.create(model="m", max_tokens=100, messages=USER)
    with pytest.raises(anthropic.BadRequestError, match="no agent role"):
        await client(server).messages.create(model="m", max_tokens=100, messages=USER)


async def test_a_step_calling_a_tool_the_request_does_not_offer_is_refused(start_server):
    server = start_server(SCENARIO)
    with pytest.raises(anthropic.BadRequestError, match="calls tool 'read_file', which the request does not offer"):
        await client(server, role="research").messages.create(
            model="m", max_tokens=100, messages=USER, tools=[t for t in TOOLS if t["name"] != "read_file"]
        )


FAULTS: dict[str, Any] = {
    "scripts": {
        "research": [{"fail_first": [429, 529, 500], "content": [{"type": "text", "text": "Finally."}]}],
        "discussion": [
            {
                "fail_first": [{"status": 529, "mid_stream": True}],
                "content": [{"type": "text", "text": "one two three"}],
            }
        ],
        "pulsing": [{"delay_ms": 20, "content": [{"type": "text", "text": " ".join(["word"] * 200)}]}],
    }
}


async def test_fail_first_errors_are_retried_by_the_sdk(start_server):
    server = start_server(FAULTS)
    message = await client(server, role="research", max_retries=3).messages.create(
        model="m", max_tokens=100, messages=USER
    )
    assert message.content[0].text == "Finally."
    assert server.attempts("research", 0) == 4
    assert [(r.status, r.outcome, r.attempt) for r in server.requests] == [
        (429, "injected_error", 1),
        (529, "injected_error", 2),
        (500, "injected_error", 3),
        (200, "ok", 4),
    ]


async def test_each_injected_error_has_the_api_shape(start_server):
    server = start_server(FAULTS)
    model = client(server, role="research")
    for error_class in (anthropic.RateLimitError, anthropic.OverloadedError, anthropic.InternalServerError):
        with pytest.raises(error_class) as caught:
            await model.messages.create(model="m", max_tokens=100, messages=USER)
        assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "api_error"
    server.reset()
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        response = await http.post(
            "/v1/messages",
            json={"model": "m", "max_tokens": 10, "messages": USER},
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01", "x-autarch-role": "research"},
        )
    assert response.status_code == 429
    assert response.json()["error"]["type"] == "rate_limit_error"
    assert response.headers["retry-after"] == "1" and response.headers["retry-after-ms"] == "1"


async def test_an_error_mid_stream_then_success(start_server):
    server = start_server(FAULTS)
    model = client(server, role="discussion")
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with model.messages.stream(model="m", max_tokens=100, messages=USER) as stream:
            async for _ in stream:
                pass
    assert caught.value.body["error"]["type"] == "overloaded_error"
    async with model.messages.stream(model="m", max_tokens=100, messages=USER) as stream:
        final = await stream.get_final_message()
    assert final.content[0].text == "one two three"
    assert [r.outcome for r in server.requests] == ["failed_mid_stream", "ok"]


async def test_a_slow_stream_can_be_cancelled(start_server):
    server = start_server(FAULTS)
    model = client(server, role="pulsing")
    async with model.messages.stream(model="m", max_tokens=100, messages=USER) as stream:
        async for event in stream:
            if event.type == "text":
                break  # leaving the block closes the connection midway
    deadline = time.monotonic() + 5
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r.outcome for r in server.requests] == ["cancelled"]


async def test_requests_are_checked_like_the_real_api(start_server):
    server = start_server(SCENARIO)
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "x-autarch-role": "research"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers) as http:

        async def error(body: Any, **options: Any) -> tuple[int, str]:
            response = await http.post("/v1/messages", json=body, **options)
            return response.status_code, response.json()["error"]["message"]

        assert await error({"model": "m", "messages": USER}) == (400, "max_tokens: Field required")
        assert await error({"max_tokens": 5, "messages": USER}) == (400, "model: Field required")
        assert await error({"model": "m", "max_tokens": 5}) == (400, "messages: Field required")
        assert (await error({"model": "m", "max_tokens": 5, "messages": USER}, headers={"x-api-key": ""}))[0] == 401
        dangling = [*USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "shell",
                                                              "input": {}}]},
                    {"role": "user", "content": "go on"}]
        status, message = await error({"model": "m", "max_tokens": 5, "messages": dangling})
        assert status == 400 and "tool_use` ids were found without `tool_result`" in message and "toolu_1" in message
        stray = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}]
        status, message = await error({"model": "m", "max_tokens": 5, "messages": stray})
        assert status == 400 and "unexpected `tool_use_id`" in message
        forged = [*USER, {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "x"}]},
                  {"role": "user", "content": "go on"}]
        status, message = await error({"model": "m", "max_tokens": 2000, "messages": forged, "thinking": THINKING})
        assert status == 400 and "Invalid `signature`" in message
        hot = {"model": "m", "max_tokens": 2000, "messages": USER, "thinking": THINKING, "temperature": 0.7}
        assert "temperature" in (await error(hot))[1]
    assert all(r.outcome == "rejected" for r in server.requests)


async def test_count_tokens_and_usage(start_server):
    server = start_server({"scripts": {"plan": ["First.", {"content": [{"type": "text", "text": "x"}],
                                                            "usage": {"output_tokens": 7}}]}})
    model = client(server, role="plan")
    counted = await model.messages.count_tokens(model="m", messages=USER)
    assert counted.input_tokens > 0
    # A cached system prompt: the first call of a session writes the cache, later calls read it.
    system = [{"type": "text", "text": "You are careful. " * 50, "cache_control": {"type": "ephemeral"}}]
    first = await model.messages.create(model="m", max_tokens=100, messages=USER, system=system)
    assert first.usage.cache_creation_input_tokens > 0 and first.usage.cache_read_input_tokens == 0
    later = [*USER, {"role": "assistant", "content": "First."}, {"role": "user", "content": "more"}]
    second = await model.messages.create(model="m", max_tokens=100, messages=later, system=system)
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.output_tokens == 7 and second.usage.input_tokens > 0
