"""The model client: one streaming Messages API call through the ``anthropic`` SDK.

The SDK sends the request, authenticates, and retries it with backoff when the API answers 429,
529, other 5xx or not at all (``model_max_retries``, honouring ``retry-after``). The reply is
accumulated here from the raw stream events rather than by ``messages.stream()``: its accumulator
raises on a tool input that is not valid JSON, which would lose the whole reply, while here such a
call is kept (with empty input) and answered with an error the model can read. An error event in
the middle of a stream (``overloaded_error``) is retried here, as the SDK cannot; the retried stream
sends the reply again from its start, so its first delta of each kind carries ``restart`` and
listeners drop what the broken attempt had shown.

The request body is encoded here (msgspec, once per call, reused by retries) and given to the SDK's
``post("/v1/messages", content=...)``: ``messages.create`` would copy the whole body (system prompt,
tool schemas, the conversation so far) node by node and encode it again with the standard ``json``
module on every call, for a body that is plain JSON data already. On the 2-core machine that took the
SDK from the call to the request on the wire from 0.9 ms to 0.3 ms for a 12-step history (1.3 ms to
0.6 ms inside the overhead benchmark). The endpoint, headers, authentication, retries, timeouts and
the decoding of the event stream are still the SDK's.

The stream's events are taken as the JSON objects the API sent (``AsyncStream[object]``: the SDK's own way
to skip building its models), not as the SDK's pydantic event models: the accumulator reads a handful of
fields, and building a model for each of a reply's dozens of events (a union of event types, validated
member by member) was the largest single part of the runner's work on the stream. With
``tests/benchmarks/workflows.py`` (20 workflows, six runs each, alternated) the runner used 3.43 CPU s per
run instead of 3.56 (medians).

The SDK is imported when the first call needs it (or when :meth:`ModelClient.warm` asks, once the runner serves),
not with this module: its import took 2 s of the runner's start-up on the 2-core machine (``python -X importtime``),
before the runner could answer anything.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from autarch.contracts.agents import TurnUsage
from autarch.runtime.retry import MODEL_STREAM
from autarch.runtime.settings import AgentRunnerSettings

from .agents import AgentConfig
from .pricing import model_info

if TYPE_CHECKING:
    import anthropic

__all__ = ["ContextOverflow", "ModelClient", "ModelError", "ModelReply"]

log = logging.getLogger(__name__)

_BLOCK_FIELDS = {
    "text": ("type", "text"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
    "tool_use": ("type", "id", "name", "input"),
}
_encode_body = msgspec.json.Encoder().encode
_RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
_TOO_LONG = "prompt is too long"
"""How the API's 400 for a request over the context window begins (``prompt is too long: N tokens > M maximum``)."""


class ModelError(Exception):
    """The model API refused or failed the request for good (after retries)."""


class ContextOverflow(ModelError):
    """The API refused the request as longer than the model's context window (400 ``prompt is too long``):
    the same request can never succeed, a shorter one can."""


@dataclass
class ModelReply:
    """One complete reply, ready to be recorded."""

    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: TurnUsage
    model: str
    malformed: dict[str, str] = field(default_factory=dict)
    """``tool_use`` id → the raw input text that was not a JSON object."""
    cut: str | None = None
    """The ``tool_use`` whose arguments ``max_tokens`` cut short (the reply's last block), if any."""
    stop_details: dict[str, Any] | None = None
    """What the API says of the stop (a refusal's ``category`` and ``explanation``), if anything."""
    received_at: float = 0.0
    """``time.perf_counter()`` when the last stream event was read (for overhead measurements)."""


class _Accumulator:
    """Builds the reply's content blocks from raw stream events."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json_parts: dict[int, list[str]] = {}
        self.malformed: dict[str, str] = {}
        self.usage = TurnUsage()
        self.stop_reason: str | None = None
        self.stop_details: dict[str, Any] | None = None
        self.empty_inputs: set[str] = set()
        """tool_use ids whose streamed arguments were empty (a call without arguments, or one cut at once)."""
        self.model = ""

    def feed(self, event: dict[str, Any]) -> tuple[bool, str] | None:
        """Take one stream event (its JSON object); returns ``(is_thinking, text)`` for a text or thinking delta."""
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event["delta"]
            block = self.blocks[event["index"]]
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] += delta["text"]
                return False, delta["text"]
            elif dtype == "input_json_delta":
                self.json_parts.setdefault(event["index"], []).append(delta["partial_json"])
            elif dtype == "thinking_delta":
                block["thinking"] += delta["thinking"]
                return True, delta["thinking"]
            elif dtype == "signature_delta":
                block["signature"] = block.get("signature", "") + delta["signature"]
            # citations_delta and unknown deltas carry nothing the runner acts on.
        elif kind == "content_block_start":
            block = {k: v for k, v in event["content_block"].items() if v is not None}
            keep = _BLOCK_FIELDS.get(block.get("type", ""))
            # Only the fields the API takes back: a newer API may add read-only ones.
            self.blocks[event["index"]] = {k: v for k, v in block.items() if k in keep} if keep else block
        elif kind == "content_block_stop":
            self._finish(event["index"])
        elif kind == "message_start":
            message = event["message"]
            self.model = message.get("model", "")
            self._usage(message.get("usage"))
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop_reason = delta.get("stop_reason")
            details = delta.get("stop_details")
            self.stop_details = details if isinstance(details, dict) else None
            self._usage(event.get("usage"))
        return None

    def _usage(self, usage: dict[str, Any] | None) -> None:
        # message_delta carries cumulative counts; a field it leaves out keeps message_start's value.
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            value = (usage or {}).get(name)
            if value is not None:
                setattr(self.usage, name, value)

    def _finish(self, index: int) -> None:
        block = self.blocks.get(index)
        if block is None or block.get("type") != "tool_use":
            return
        raw = "".join(self.json_parts.pop(index, ()))
        if not raw.strip():
            block["input"] = block.get("input") or {}
            self.empty_inputs.add(block["id"])
            return
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if isinstance(value, dict):
            block["input"] = value
        else:
            # Keep the call (the API needs an object as input) and let the runner answer it with an error.
            block["input"] = {}
            self.malformed[block["id"]] = raw

    def content(self) -> list[dict[str, Any]]:
        for index in list(self.json_parts):
            self._finish(index)  # a stream cut short never sent content_block_stop
        return [self.blocks[i] for i in sorted(self.blocks)]

    def cut(self, content: list[dict[str, Any]]) -> str | None:
        """The tool call ``max_tokens`` stopped in: the reply's last block, its arguments incomplete."""
        if self.stop_reason != "max_tokens" or not content or content[-1].get("type") != "tool_use":
            return None
        last = content[-1]["id"]
        # Arguments that parsed whole were finished just as the budget ran out: that call is complete.
        return last if last in self.malformed or last in self.empty_inputs else None


class ModelClient:
    """Streams model replies; one instance (one connection pool) per runner process."""

    def __init__(self, *, settings: AgentRunnerSettings, http_client: Any | None = None) -> None:
        self._max_retries = settings.model_max_retries
        self._settings = settings
        self._http_client = http_client
        self._client: anthropic.AsyncAnthropic | None = None
        self._sdk: ModuleType | None = None

    async def warm(self) -> None:
        """Import the SDK now (in a worker thread), so that the first call does not wait for it."""
        await self._connect()

    async def _connect(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            sdk = await asyncio.to_thread(importlib.import_module, "anthropic")
            if self._client is None:  # another caller may have made it while this one imported
                self._sdk = sdk
                self._client = sdk.AsyncAnthropic(
                    api_key=self._settings.anthropic_api_key or "scripted",
                    base_url=self._settings.anthropic_base_url,
                    max_retries=self._settings.model_max_retries,
                    http_client=self._http_client,
                )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def reply(
        self,
        *,
        agent: AgentConfig,
        messages: list[dict[str, Any]],
        headers: dict[str, str],
        on_delta: Callable[[bool, str, bool], Awaitable[None]],
        on_sent: Callable[[], None] | None = None,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> ModelReply:
        """Stream one reply to ``messages``; ``on_delta(is_thinking, text, restart)`` is awaited for each delta.

        ``restart`` is True on the first delta of a kind (text or thinking) after a broken stream was retried:
        what was streamed of that kind before is void and the reply starts again with this delta (a kind the
        retry never streams again gets an empty ``restart`` delta once the reply is complete).
        ``on_sent()`` is called once the API has taken the request (it answers with a stream): from then on
        the call only waits for the model. ``tools`` replaces ``agent.tools`` in the request when given, and
        ``max_tokens`` the agent's ``max_tokens``.

        Raises:
            ContextOverflow: the API refused the request as too long for the model's context window.
            ModelError: the API refused the request, or kept failing after every retry.
        """
        params: dict[str, Any] = {
            "model": agent.model,
            "max_tokens": max_tokens or agent.max_tokens,
            "system": agent.system,
            "tools": agent.tools if tools is None else tools,
            "messages": messages,
            "stream": True,
        }
        if agent.thinking_budget:
            # Newer models decide how much to think (and deprecate a fixed budget); older ones take the budget.
            if model_info(agent.model).adaptive_thinking:
                params["thinking"] = {"type": "adaptive"}
            else:
                params["thinking"] = {"type": "enabled", "budget_tokens": agent.thinking_budget}
        # Encoded once, sent (and resent by the SDK's retries) as is: see the module docstring.
        body = _encode_body(params)
        client = await self._connect()
        sdk = self._sdk
        assert sdk is not None
        attempt = 0
        shown: set[bool] = set()  # kinds of delta (True: thinking) listeners hold text of, for this reply
        restart: set[bool] = set()  # kinds whose next delta tells listeners to drop a broken attempt's text
        while True:
            acc = _Accumulator()
            try:
                stream = await client.post(
                    "/v1/messages", cast_to=sdk.types.Message, content=body, options={"headers": headers},
                    stream=True, stream_cls=sdk.AsyncStream[object],
                )
            except sdk.APIStatusError as exc:
                message = f"model API answered {exc.status_code}: {_message(exc)}"
                if exc.status_code == 400 and _message(exc).startswith(_TOO_LONG):
                    raise ContextOverflow(message) from exc
                raise ModelError(message) from exc
            except sdk.APIConnectionError as exc:
                raise ModelError(f"model API unreachable: {exc}") from exc
            if on_sent is not None:
                on_sent()
            try:
                async for event in stream:
                    if not isinstance(event, dict):  # not an API event (the SDK passes the JSON through as is)
                        continue
                    delta = acc.feed(event)
                    if delta is not None:
                        is_thinking, text = delta
                        again = is_thinking in restart
                        restart.discard(is_thinking)
                        shown.add(is_thinking)
                        await on_delta(is_thinking, text, again)
                received = time.perf_counter()
            except (sdk.APIStatusError, sdk.APIConnectionError) as exc:
                kind = _error_type(exc)
                attempt += 1
                if attempt > self._max_retries or (kind is not None and kind not in _RETRYABLE_STREAM_ERRORS):
                    raise ModelError(f"model stream failed: {kind or type(exc).__name__}: {_message(exc)}") from exc
                delay = MODEL_STREAM.delay(attempt)
                log.warning("model stream failed (%s); retry %d in %.2fs", kind or exc, attempt, delay)
                restart = set(shown)
                await asyncio.sleep(delay)
                continue
            finally:
                await stream.close()
            for is_thinking in sorted(restart):
                await on_delta(is_thinking, "", True)  # the retry streamed nothing of this kind: clear it
            content = acc.content()
            return ModelReply(content=content, stop_reason=acc.stop_reason, usage=acc.usage,
                              model=acc.model or agent.model, malformed=acc.malformed, cut=acc.cut(content),
                              stop_details=acc.stop_details, received_at=received)


def _error_type(exc: Exception) -> str | None:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return error.get("type")
    return None


def _message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", exc))
    return str(exc)
