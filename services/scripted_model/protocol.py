"""The Anthropic Messages API on the wire: request checks, reply shapes, SSE frames, error bodies.

Shapes follow what the ``anthropic`` SDK sends and parses: a ``Message`` for a non-streaming reply;
for a streaming one ``message_start``, ``ping``, per block ``content_block_start`` / ``*_delta`` /
``content_block_stop``, then ``message_delta`` and ``message_stop``. Request checks cover the
mistakes a client can make against the real API and would only discover in production (a missing
field, tool_use without tool_result, a tampered thinking signature, temperature with thinking), with
the real API's wording where it is known.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from .scenario import ERROR_STATUSES, Step, TextBlock, ThinkingBlock, ToolUseBlock

__all__ = [
    "DEFAULT_ERROR_MESSAGES",
    "MessageUsage",
    "cut_tool_use",
    "error_body",
    "error_frame",
    "estimate_tokens",
    "message_body",
    "raw_tool_inputs",
    "sse_frames",
    "system_marker",
    "thinking_enabled",
    "thinking_signature",
    "tool_names",
    "validate_count_tokens",
    "validate_request",
]

DEFAULT_ERROR_MESSAGES: dict[int, str] = {
    400: "Invalid request",
    401: "invalid x-api-key",
    403: "Your API key does not have permission to use the specified resource.",
    404: "Not found",
    413: "Request exceeds the maximum allowed number of bytes.",
    429: "Number of request tokens has exceeded your per-minute rate limit (scripted)",
    500: "Internal server error (scripted)",
    529: "Overloaded (scripted)",
}
"""The message of an injected error when the scenario gives none."""

_encode = msgspec.json.Encoder().encode
_WORD_BOUNDARY = re.compile(r"(?<=\s)(?=\S)")
_JSON_CHUNKS = 4


class MessageUsage(msgspec.Struct, kw_only=True):
    """The usage block of a reply."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


def error_body(status: int, message: str) -> bytes:
    """The JSON error body the API sends with ``status``."""
    kind = ERROR_STATUSES.get(status, "api_error")
    return _encode({"type": "error", "error": {"type": kind, "message": message}})


def estimate_tokens(text: str | bytes) -> int:
    """A deterministic stand-in for a tokenizer: one token per four characters, at least one."""
    return max(1, math.ceil(len(text) / 4))


def thinking_signature(thinking: str) -> str:
    """The signature the scripted model gives a thinking block: a digest of its text."""
    digest = hashlib.sha256(b"autarch-scripted-thinking\0" + thinking.encode()).digest()
    return "scripted_" + base64.b64encode(digest).decode()


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    """Whether the request asks for extended thinking (``enabled`` or ``adaptive``)."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def tool_names(body: Mapping[str, Any]) -> list[str]:
    """Names of the tools the request offers."""
    return [t["name"] for t in body.get("tools") or () if isinstance(t, dict) and isinstance(t.get("name"), str)]


def system_marker(body: Mapping[str, Any], marker: str) -> str | None:
    """The value of a ``<marker>: <value>`` line in the system prompt, if any."""
    system = body.get("system")
    if isinstance(system, list):
        system = "\n".join(b.get("text", "") for b in system if isinstance(b, dict))
    if not isinstance(system, str):
        return None
    match = re.search(rf"^\s*{re.escape(marker)}:\s*(\S+)\s*$", system, re.MULTILINE)
    return match[1] if match else None


def _blocks(content: Any) -> list[Any]:
    return content if isinstance(content, list) else []


def _check_messages(messages: list[Any]) -> str | None:
    previous_tool_uses: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{i}: Input should be a valid dictionary"
        role = message.get("role")
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        if "content" not in message:
            return f"messages.{i}.content: Field required"
        if not isinstance(content, str | list):
            return f"messages.{i}.content: Input should be a valid string or list"
        if previous_tool_uses:
            answered = {
                b.get("tool_use_id") for b in _blocks(content) if isinstance(b, dict) and b.get("type") == "tool_result"
            }
            missing = [tid for tid in previous_tool_uses if tid not in answered]
            if role != "user" or missing:
                ids = ", ".join(missing or previous_tool_uses)
                return (
                    f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{ids}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
                )
        uses: list[str] = []
        for j, block in enumerate(_blocks(content)):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                return f"messages.{i}.content.{j}.type: Field required"
            kind = block["type"]
            if kind == "tool_result" and role == "user":
                if block.get("tool_use_id") not in previous_tool_uses:
                    return (
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding `tool_use` "
                        "block in the previous message."
                    )
            elif kind == "tool_use" and role == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                    return f"messages.{i}.content.{j}.tool_use: `id` and `name` are required"
                uses.append(block["id"])
            elif kind == "thinking" and role == "assistant":
                if not isinstance(block.get("signature"), str):
                    return f"messages.{i}.content.{j}.thinking.signature: Field required"
                if block["signature"] != thinking_signature(str(block.get("thinking", ""))):
                    return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        # A final assistant message is a prefill; only a tool_use followed by another message needs results.
        previous_tool_uses = uses
    return None


def _check_tools(tools: Any) -> str | None:
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            return f"tools.{i}: Input should be a valid dictionary"
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            return f"tools.{i}.name: Field required"
        if tool.get("type") in (None, "custom") and not isinstance(tool.get("input_schema"), dict):
            return f"tools.{i}.custom.input_schema: Field required"
        if tool["name"] in seen:
            return "tools: Tool names must be unique."
        seen.add(tool["name"])
    return None


def _check_thinking(body: Mapping[str, Any], max_tokens: int) -> str | None:
    thinking = body.get("thinking")
    if thinking is None:
        return None
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled", "adaptive"):
        return "thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'"
    if thinking["type"] == "disabled":
        return None
    if thinking["type"] == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool):
            return "thinking.enabled.budget_tokens: Field required"
        if budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if max_tokens <= budget:
            return "`max_tokens` must be greater than `thinking.budget_tokens`."
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        return "`temperature` may only be set to 1 when thinking is enabled."
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        return "Thinking may not be enabled when tool_choice forces tool use."
    return None


def validate_request(body: Any) -> str | None:
    """Check a ``POST /v1/messages`` body; the ``invalid_request_error`` message, or None when it is fine."""
    if not isinstance(body, dict):
        return "Request body must be a JSON object."
    for field in ("model", "max_tokens", "messages"):
        if field not in body:
            return f"{field}: Field required"
    if not isinstance(body["model"], str) or not body["model"]:
        return "model: Input should be a valid string"
    max_tokens = body["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        return "max_tokens: Input should be a valid integer"
    if max_tokens < 1:
        return "max_tokens: Input should be greater than or equal to 1"
    messages = body["messages"]
    if not isinstance(messages, list):
        return "messages: Input should be a valid list"
    if not messages:
        return "messages: at least one message is required"
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list) or not all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in system
        ):
            return "system: Input should be a valid string or a list of text blocks"
    if "stream" in body and not isinstance(body["stream"], bool):
        return "stream: Input should be a valid boolean"
    temperature = body.get("temperature")
    if temperature is not None and (
        not isinstance(temperature, int | float) or isinstance(temperature, bool) or not 0 <= temperature <= 1
    ):
        return "temperature: Input should be a number between 0 and 1"
    if "tools" in body and (problem := _check_tools(body["tools"])):
        return problem
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            return "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
        if choice["type"] == "tool" and not isinstance(choice.get("name"), str):
            return "tool_choice.tool.name: Field required"
    return _check_thinking(body, max_tokens) or _check_messages(messages)


def validate_count_tokens(body: Any) -> str | None:
    """Check a ``POST /v1/messages/count_tokens`` body (like a message request, without ``max_tokens``)."""
    if isinstance(body, dict) and "max_tokens" not in body:
        body = {**body, "max_tokens": 1 << 30}
    return validate_request(body)


def _usage(step: Step, *, estimate: MessageUsage) -> MessageUsage:
    override = step.usage
    if override is None:
        return estimate
    return MessageUsage(
        input_tokens=estimate.input_tokens if override.input_tokens is None else override.input_tokens,
        output_tokens=estimate.output_tokens if override.output_tokens is None else override.output_tokens,
        cache_creation_input_tokens=(
            estimate.cache_creation_input_tokens
            if override.cache_creation_input_tokens is None
            else override.cache_creation_input_tokens
        ),
        cache_read_input_tokens=(
            estimate.cache_read_input_tokens
            if override.cache_read_input_tokens is None
            else override.cache_read_input_tokens
        ),
    )


def _tool_ids(step: Step, *, tool_id_prefix: str) -> Iterator[tuple[ToolUseBlock, str]]:
    """Each tool_use block of ``step`` with the id it is sent with (explicit, else ``<prefix>_<n>``)."""
    n = 0
    for block in step.content:
        if isinstance(block, ToolUseBlock):
            yield block, block.id or f"{tool_id_prefix}_{n}"
            n += 1


def cut_tool_use(step: Step) -> ToolUseBlock | None:
    """The tool call a ``max_tokens`` step is cut inside: its last block, when that is a tool_use."""
    if step.effective_stop_reason != "max_tokens" or not step.content:
        return None
    last = step.content[-1]
    return last if isinstance(last, ToolUseBlock) else None


def raw_tool_inputs(step: Step, *, tool_id_prefix: str) -> dict[str, str]:
    """tool_use id → the raw argument text a streamed reply sends for it instead of ``input`` as JSON.

    A call cut by ``max_tokens`` sends the first half of its arguments' JSON (unless the step gives
    ``raw_input``): the budget ran out while the model was writing them.
    """
    cut = cut_tool_use(step)
    raw = {}
    for block, tool_id in _tool_ids(step, tool_id_prefix=tool_id_prefix):
        if block.raw_input is not None:
            raw[tool_id] = block.raw_input
        elif block is cut:
            text = _encode(block.input).decode()
            raw[tool_id] = text[: max(1, len(text) // 2)]
    return raw


def _reply_blocks(step: Step, *, tool_id_prefix: str, thinking: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    cut = cut_tool_use(step)
    ids = (tool_id for _, tool_id in _tool_ids(step, tool_id_prefix=tool_id_prefix))
    for block in step.content:
        if isinstance(block, TextBlock):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingBlock):
            # The real API only thinks when asked to; a scenario's thinking is dropped otherwise.
            if thinking:
                blocks.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": thinking_signature(block.thinking)}
                )
        elif isinstance(block, ToolUseBlock):
            # A call cut by max_tokens has no complete arguments to give: a non-streaming reply carries {}.
            arguments = {} if block is cut else block.input
            blocks.append({"type": "tool_use", "id": next(ids), "name": block.name, "input": arguments})
    return blocks


def message_body(
    step: Step,
    *,
    message_id: str,
    model: str,
    tool_id_prefix: str,
    thinking: bool,
    estimate: MessageUsage,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The complete ``Message`` a step answers with (the non-streaming reply).

    ``max_tokens`` is the request's: a reply that stops with ``max_tokens`` used all of it (unless the step
    gives its own ``usage``). A refusal carries ``stop_details`` (category and explanation, or nulls).
    """
    content = _reply_blocks(step, tool_id_prefix=tool_id_prefix, thinking=thinking)
    output = sum(
        estimate_tokens(b.get("text") or b.get("thinking") or _encode(b.get("input", {}))) for b in content
    )
    if step.effective_stop_reason == "max_tokens" and max_tokens is not None:
        output = max_tokens
    usage = _usage(step, estimate=msgspec.structs.replace(estimate, output_tokens=max(1, output)))
    body: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": step.effective_stop_reason,
        "stop_sequence": None,
        "usage": msgspec.to_builtins(usage),
    }
    if step.effective_stop_reason == "refusal":
        details = step.stop_details
        body["stop_details"] = {"type": "refusal", "category": details.category if details else None,
                                "explanation": details.explanation if details else None}
    return body


def _frame(event: str, data: Mapping[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + _encode(data) + b"\n\n"


def _pieces(text: str) -> list[str]:
    # Word by word, whitespace kept with the word before it, so the pieces join back exactly.
    return [p for p in _WORD_BOUNDARY.split(text) if p]


def _json_pieces(text: str) -> list[str]:
    size = max(1, math.ceil(len(text) / _JSON_CHUNKS))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _start(index: int, block: Mapping[str, Any]) -> bytes:
    return _frame("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def _delta(index: int, delta: Mapping[str, Any]) -> bytes:
    return _frame("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _block_frames(index: int, block: Mapping[str, Any], raw_input: str | None) -> Iterator[bytes]:
    kind = block["type"]
    if kind == "text":
        yield _start(index, {"type": "text", "text": ""})
        for piece in _pieces(block["text"]):
            yield _delta(index, {"type": "text_delta", "text": piece})
    elif kind == "thinking":
        yield _start(index, {"type": "thinking", "thinking": "", "signature": ""})
        for piece in _pieces(block["thinking"]):
            yield _delta(index, {"type": "thinking_delta", "thinking": piece})
        yield _delta(index, {"type": "signature_delta", "signature": block["signature"]})
    else:
        yield _start(index, {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}})
        # Like the real API: an empty first chunk, then the arguments' JSON in a few pieces.
        text = raw_input
        if text is None:
            text = _encode(block["input"]).decode() if block["input"] else ""
        pieces = [""] + (_json_pieces(text) if text else [])
        for piece in pieces:
            yield _delta(index, {"type": "input_json_delta", "partial_json": piece})
    yield _frame("content_block_stop", {"type": "content_block_stop", "index": index})


def sse_frames(message: Mapping[str, Any], *, raw_inputs: Mapping[str, str] | None = None) -> list[bytes]:
    """The server-sent events that stream ``message`` (from :func:`message_body`), one per item.

    ``raw_inputs`` (from :func:`raw_tool_inputs`) replaces the streamed arguments of those tool calls.
    """
    raw_inputs = raw_inputs or {}
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start.pop("stop_details", None)  # sent with the stop reason, on message_delta
    start["usage"] = {**usage, "output_tokens": 1}
    frames = [_frame("message_start", {"type": "message_start", "message": start}), _frame("ping", {"type": "ping"})]
    for index, block in enumerate(message["content"]):
        frames.extend(_block_frames(index, block, raw_inputs.get(block.get("id", ""))))
    delta: dict[str, Any] = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    if "stop_details" in message:
        delta["stop_details"] = message["stop_details"]
    frames.append(_frame("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    frames.append(_frame("message_stop", {"type": "message_stop"}))
    return frames


def error_frame(status: int, message: str) -> bytes:
    """An ``error`` event, as the API sends when a stream fails after it started."""
    return b"event: error\ndata: " + error_body(status, message) + b"\n\n"
