"""The scripted model server: the Anthropic Messages API answered from a scenario.

:class:`ScriptedModelApp` is a raw ASGI app (no framework between the socket and the reply, so it
answers in about a millisecond and the platform-overhead benchmark measures the platform).
:class:`ScriptedModelServer` runs it on a free loopback port in a background thread for tests and
the demo; :func:`serve` runs it in the foreground for ``autarch model serve-scripted``.

The server keeps no session state: the agent role comes with each request (``x-autarch-role``
header, or an ``autarch-role: <role>`` line in the system prompt), the optional script name likewise
(``x-autarch-script`` / ``autarch-script:``), and the step is the number of assistant messages in
the request. So a restarted client that replays a conversation gets the same answers. The only state
is how many attempts each (script, step) has had, which drives ``fail_first`` error injection, plus
a log of requests for tests to inspect.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import math
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Self

import msgspec
import uvicorn

from autarch.runtime.process import settle_heap

from . import protocol
from .scenario import Failure, Scenario, Step, TextBlock, ToolUseBlock, load_scenario, parse_scenario

__all__ = [
    "ROLE_HEADER",
    "SCRIPT_HEADER",
    "RecordedRequest",
    "ScriptedModelApp",
    "ScriptedModelServer",
    "serve",
]

ROLE_HEADER = "x-autarch-role"
"""Request header naming the agent role (fallback: an ``autarch-role: <role>`` line in the system prompt)."""
SCRIPT_HEADER = "x-autarch-script"
"""Request header naming the script within the role (fallback: an ``autarch-script: <name>`` system line)."""

Outcome = Literal["ok", "injected_error", "failed_mid_stream", "cancelled", "rejected"]

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")
_RECALL = re.compile(r"\{\{recall:(.+?)\}\}")
"""``{{recall:REGEX}}`` in a step's text: replaced by what REGEX captures (group 1, else the whole match) in the
request's first user message, so a script can answer with something only known at run time (a turn id)."""


def _first_user_text(body: Mapping[str, Any]) -> str:
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _recall(step: Step, body: Mapping[str, Any]) -> Step:
    if "{{recall:" not in _encode(step.content).decode():
        return step
    source = _first_user_text(body)

    def fill(match: re.Match[str]) -> str:
        found = re.search(match.group(1), source)
        if found is None:
            return "(nothing to recall)"
        return found.group(1) if found.groups() else found.group(0)

    def filled(value: Any) -> Any:
        # Tool inputs too: a call can name what only the request knows (a worker's handoff file).
        if isinstance(value, str):
            return _RECALL.sub(fill, value)
        if isinstance(value, dict):
            return {k: filled(v) for k, v in value.items()}
        if isinstance(value, list):
            return [filled(v) for v in value]
        return value

    content = []
    for b in step.content:
        if isinstance(b, TextBlock):
            b = msgspec.structs.replace(b, text=_RECALL.sub(fill, b.text))
        elif isinstance(b, ToolUseBlock) and isinstance(b.input, dict):
            b = msgspec.structs.replace(b, input=filled(b.input))
        content.append(b)
    return msgspec.structs.replace(step, content=content)


class RecordedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One request the server answered, for tests to inspect (``ScriptedModelServer.requests``)."""

    path: str
    status: int
    """HTTP status of the answer (200 also for a stream that later failed or was cancelled)."""
    outcome: Outcome
    """ok; injected_error (fail_first); failed_mid_stream; cancelled (client went away); rejected (400/401/404)."""
    role: str | None = None
    script: str | None = None
    key: str | None = None
    """The scenario key that answered (``"pulsing:pulse-2"`` or ``"pulsing"``)."""
    step: int | None = None
    attempt: int = 0
    """1 for the first request at this key and step, 2 for the retry after it, …"""
    stream: bool = False
    error: str | None = None
    """The error message sent, if any."""
    body: Any = None
    """The decoded request body."""


class _Reply(msgspec.Struct, kw_only=True):
    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]] = []


def _error(status: int, message: str, **headers: str) -> _Reply:
    extra = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return _Reply(status=status, body=protocol.error_body(status, message), headers=extra)


class ScriptedModelApp:
    """The ASGI app answering ``POST /v1/messages`` from a scenario.

    Also: ``POST /v1/messages/count_tokens``; ``GET /healthz``; ``GET /_scripted/requests`` (the
    request log, for tests driving a server in another process) and ``POST /_scripted/reset``.
    """

    def __init__(self, scenario: Scenario, *, keep_requests: int = 1000) -> None:
        self.scenario = scenario
        self._attempts: dict[tuple[str, int], int] = {}
        # Bounded: a benchmark sends many thousands of requests, each holding a whole conversation.
        self._log: collections.deque[RecordedRequest] = collections.deque(maxlen=keep_requests)
        self._lock = threading.Lock()
        self._request_ids = itertools.count(1)

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests answered so far (the last ``keep_requests``), oldest first."""
        with self._lock:
            return list(self._log)

    def attempts(self, key: str, step: int) -> int:
        """How many requests reached ``step`` of script ``key`` (``"research"``, ``"pulsing:pulse-2"``)."""
        with self._lock:
            return self._attempts.get((key, step), 0)

    def reset(self) -> None:
        """Forget attempts (so ``fail_first`` fires again) and the request log."""
        with self._lock:
            self._attempts.clear()
            self._log.clear()

    def _record(self, entry: RecordedRequest) -> None:
        with self._lock:
            self._log.append(entry)

    def _next_attempt(self, key: str, step: int) -> int:
        with self._lock:
            count = self._attempts.get((key, step), 0) + 1
            self._attempts[(key, step)] = count
            return count

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            return  # no lifespan or websocket handling needed
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        method, path = scope["method"], scope["path"]
        request_id = f"req_scripted_{next(self._request_ids):06d}"
        if path == "/v1/messages" and method == "POST":
            await self._messages(raw, headers, request_id, receive, send)
            return
        if path == "/v1/messages/count_tokens" and method == "POST":
            reply = self._count_tokens(raw, headers)
        elif path == "/healthz" and method == "GET":
            reply = _Reply(status=200, body=_encode({"ok": True, "scenario": self.scenario.source}))
        elif path == "/_scripted/requests" and method == "GET":
            reply = _Reply(status=200, body=_encode(self.requests))
        elif path == "/_scripted/reset" and method == "POST":
            self.reset()
            reply = _Reply(status=200, body=_encode({"ok": True}))
        else:
            reply = _error(404, f"Not found: {method} {path}")
        await _send_reply(send, reply, request_id)

    def _check_headers(self, headers: Mapping[str, str]) -> _Reply | None:
        if not headers.get("x-api-key") and not headers.get("authorization"):
            return _error(401, "x-api-key header is required")
        if not headers.get("anthropic-version"):
            return _error(400, "anthropic-version: header is required")
        return None

    def _count_tokens(self, raw: bytes, headers: Mapping[str, str]) -> _Reply:
        if reply := self._check_headers(headers):
            return reply
        try:
            body = _decode(raw)
        except msgspec.DecodeError:
            return _error(400, "There was an error parsing the body of your request: not valid JSON")
        if problem := protocol.validate_count_tokens(body):
            return _error(400, problem)
        return _Reply(status=200, body=_encode({"input_tokens": _input_tokens(body)}))

    def _select(self, role: str, script: str | None, step: int, *, assistant_messages: int) -> tuple[str, Step] | str:
        keys = [f"{role}:{script}", role] if script else [role]
        for key in keys:
            steps = self.scenario.scripts.get(key)
            if steps is None:
                continue
            if step < len(steps):
                return key, steps[step]
            return (
                f"scripted model: scenario {self.scenario.source!r} has no step {step} for script {key!r} "
                f"(it has {len(steps)} step{'s' if len(steps) != 1 else ''}, 0-{len(steps) - 1}); "
                f"step = the number of assistant messages in the request ({assistant_messages})"
            )
        tried = " or ".join(repr(k) for k in keys)
        return (
            f"scripted model: scenario {self.scenario.source!r} has no script {tried} for role {role!r} "
            f"(step {step}); it has scripts: {', '.join(sorted(self.scenario.scripts))}"
        )

    async def _messages(
        self,
        raw: bytes,
        headers: Mapping[str, str],
        request_id: str,
        receive: Callable[..., Any],
        send: Callable[..., Any],
    ) -> None:
        path = "/v1/messages"

        async def reject(reply: _Reply, **fields: Any) -> None:
            error = msgspec.json.decode(reply.body)["error"]["message"]
            self._record(RecordedRequest(path=path, status=reply.status, outcome="rejected", error=error, **fields))
            await _send_reply(send, reply, request_id)

        if reply := self._check_headers(headers):
            await reject(reply)
            return
        try:
            body = _decode(raw)
        except msgspec.DecodeError:
            await reject(_error(400, "There was an error parsing the body of your request: not valid JSON"))
            return
        if problem := protocol.validate_request(body):
            await reject(_error(400, problem), body=body)
            return
        stream = bool(body.get("stream"))
        role = headers.get(ROLE_HEADER) or protocol.system_marker(body, "autarch-role")
        script = headers.get(SCRIPT_HEADER) or protocol.system_marker(body, "autarch-script")
        assistant_messages = sum(1 for m in body["messages"] if m["role"] == "assistant")
        step_index = assistant_messages
        fields: dict[str, Any] = {"role": role, "script": script, "step": step_index, "stream": stream, "body": body}
        if not role:
            message = (
                f"scripted model: no agent role: send the `{ROLE_HEADER}` header or put an "
                "`autarch-role: <role>` line in the system prompt"
            )
            await reject(_error(400, message), **fields)
            return
        selected = self._select(role, script, step_index, assistant_messages=assistant_messages)
        if isinstance(selected, str):
            await reject(_error(400, selected), **fields)
            return
        key, step = selected
        step = _recall(step, body)
        fields["key"] = key
        window = self.scenario.context_window
        if window is not None and (tokens := _input_tokens(body)) > window:
            # The real API's wording; it refuses before any generation, so the attempt is not counted.
            await reject(_error(400, f"prompt is too long: {tokens} tokens > {window} maximum"), **fields)
            return
        if self.scenario.check_tools:
            offered = protocol.tool_names(body)
            for block in step.content:
                if isinstance(block, ToolUseBlock) and block.name not in offered:
                    message = (
                        f"scripted model: step {step_index} of script {key!r} calls tool {block.name!r}, which the "
                        f"request does not offer (offered: {', '.join(offered) or 'no tools'})"
                    )
                    await reject(_error(400, message), **fields)
                    return
        attempt = self._next_attempt(key, step_index)
        fields["attempt"] = attempt
        failure = step.fail_first[attempt - 1] if attempt <= len(step.fail_first) else None
        if isinstance(failure, int):
            failure = Failure(status=failure)
        if failure is not None and not (stream and failure.mid_stream):
            reply = _injected(failure, step)
            self._record(
                RecordedRequest(path=path, status=failure.status, outcome="injected_error", error=_message(failure),
                                **fields)
            )
            await _send_reply(send, reply, request_id)
            return

        safe_key = _UNSAFE_ID.sub("-", key.replace(":", "-"))
        tool_id_prefix = f"toolu_{safe_key}_{step_index}"
        message_body = protocol.message_body(
            step,
            message_id=f"msg_scripted_{safe_key}_{step_index}",
            model=body["model"],
            tool_id_prefix=tool_id_prefix,
            thinking=protocol.thinking_enabled(body),
            estimate=_usage_estimate(body, step_index),
            max_tokens=body["max_tokens"],
        )
        extra = [(b"x-autarch-scripted-step", f"{key}[{step_index}]".encode())]
        if step.latency_ms:
            await asyncio.sleep(step.latency_ms / 1000)
        if not stream:
            if step.delay_ms:
                await asyncio.sleep(step.delay_ms * len(protocol.sse_frames(message_body)) / 1000)
            self._record(RecordedRequest(path=path, status=200, outcome="ok", **fields))
            await _send_reply(send, _Reply(status=200, body=_encode(message_body), headers=extra), request_id)
            return
        frames = protocol.sse_frames(message_body,
                                     raw_inputs=protocol.raw_tool_inputs(step, tool_id_prefix=tool_id_prefix))
        outcome: Outcome = "ok"
        error = None
        if failure is not None:
            # Fail after the reply has started: the message header and about half of its content.
            frames = frames[: max(2, len(frames) // 2)]
            error = _message(failure)
            frames.append(protocol.error_frame(failure.status, error))
            outcome = "failed_mid_stream"
        await _stream(
            send,
            receive,
            frames,
            delay=step.delay_ms / 1000,
            headers=[*extra, (b"request-id", request_id.encode())],
            on_done=lambda done: self._record(
                RecordedRequest(path=path, status=200, outcome=outcome if done else "cancelled", error=error, **fields)
            ),
        )


def _message(failure: Failure) -> str:
    return failure.message or protocol.DEFAULT_ERROR_MESSAGES[failure.status]


def _injected(failure: Failure, step: Step) -> _Reply:
    headers = {}
    if step.retry_after_ms is not None:
        # retry-after-ms is what the SDK prefers; retry-after (whole seconds) is what the API documents.
        seconds = math.ceil(step.retry_after_ms / 1000)
        headers = {"retry_after_ms": str(step.retry_after_ms), "retry_after": str(seconds)}
    return _error(failure.status, _message(failure), **headers)


def _input_tokens(body: Mapping[str, Any]) -> int:
    return protocol.estimate_tokens(
        _encode(body.get("system") or "") + _encode(body.get("tools") or []) + _encode(body["messages"])
    )


def _has_cache_control(body: Mapping[str, Any]) -> bool:
    system = body.get("system")
    blocks = [*(body.get("tools") or ()), *(system if isinstance(system, list) else ())]
    return any(isinstance(b, dict) and "cache_control" in b for b in blocks)


def _usage_estimate(body: Mapping[str, Any], step: int) -> protocol.MessageUsage:
    total = _input_tokens(body)
    if not _has_cache_control(body):
        return protocol.MessageUsage(input_tokens=total, output_tokens=1)
    # Prompt caching, deterministically: the first call of a session writes the cached prefix
    # (system + tools), every later call reads it.
    prefix = min(total, protocol.estimate_tokens(_encode(body.get("system") or "") + _encode(body.get("tools") or [])))
    return protocol.MessageUsage(
        input_tokens=max(1, total - prefix),
        output_tokens=1,
        cache_creation_input_tokens=prefix if step == 0 else 0,
        cache_read_input_tokens=prefix if step > 0 else 0,
    )


async def _send_reply(send: Callable[..., Any], reply: _Reply, request_id: str) -> None:
    headers = [(b"content-type", b"application/json"), (b"request-id", request_id.encode()), *reply.headers]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


async def _stream(
    send: Callable[..., Any],
    receive: Callable[..., Any],
    frames: list[bytes],
    *,
    delay: float,
    headers: list[tuple[bytes, bytes]],
    on_done: Callable[[bool], None],
) -> None:
    start_headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"), *headers]
    await send({"type": "http.response.start", "status": 200, "headers": start_headers})
    if not delay:
        # Nothing to pace: one write is fastest, and the client still parses event by event.
        on_done(True)
        await send({"type": "http.response.body", "body": b"".join(frames)})
        return
    # The server ignores writes after a disconnect, so watch for it to stop (and record) a cancelled stream.
    disconnected = asyncio.ensure_future(receive())
    try:
        for frame in frames[:-1]:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            await asyncio.wait([disconnected], timeout=delay)
            if disconnected.done():
                on_done(False)
                return
        on_done(True)
        await send({"type": "http.response.body", "body": frames[-1]})
    finally:
        disconnected.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await disconnected


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets of that proto, and
    # without it Nagle's algorithm holds the reply body behind its headers for ~40 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    # Listening now (uvicorn listens again, harmlessly) queues connections made before it accepts.
    sock.listen(128)
    return sock


def _url(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def _as_scenario(scenario: Scenario | Mapping[str, Any] | str | Path) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, Mapping):
        return parse_scenario(scenario)
    return load_scenario(scenario)


class ScriptedModelServer:
    """The scripted model on a loopback port, served from a background thread.

    Example::

        with ScriptedModelServer("demo") as model:
            client = anthropic.AsyncAnthropic(base_url=model.base_url, api_key="test")
            ...
            assert model.attempts("research", 0) == 1

    Args:
        scenario: a :class:`Scenario`, a decoded scenario document, a file path or a bundled name.
        host: interface to bind (loopback by default).
        port: port to bind; 0 picks a free one.
        keep_requests: how many requests :attr:`requests` keeps (the oldest are dropped first).
    """

    def __init__(
        self,
        scenario: Scenario | Mapping[str, Any] | str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        keep_requests: int = 1000,
    ) -> None:
        self.scenario = _as_scenario(scenario)
        self.app = ScriptedModelApp(self.scenario, keep_requests=keep_requests)
        self._host = host
        self._port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None
        self._sock: socket.socket | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, for ``anthropic.AsyncAnthropic(base_url=...)``."""
        if self._url is None:
            raise RuntimeError("the scripted model server is not started")
        return self._url

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request answered so far, oldest first."""
        return self.app.requests

    def attempts(self, key: str, step: int) -> int:
        """How many requests reached ``step`` of script ``key`` (``"research"``, ``"pulsing:pulse-2"``)."""
        return self.app.attempts(key, step)

    def reset(self) -> None:
        """Forget attempts (so ``fail_first`` fires again) and the request log."""
        self.app.reset()

    def use(self, scenario: Scenario | Mapping[str, Any] | str | Path) -> None:
        """Answer from ``scenario`` from now on (and forget attempts): one running server, a scenario per test."""
        self.scenario = _as_scenario(scenario)
        self.app.scenario = self.scenario
        self.app.reset()

    def start(self, *, timeout: float = 10.0) -> Self:
        """Bind, start serving, and return once the server accepts connections."""
        if self._thread is not None:
            raise RuntimeError("the scripted model server is already started")
        sock = _bind(self._host, self._port)
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            log_config=None,  # leave the host process's logging alone
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])), name="scripted-model", daemon=True
        )
        self._server, self._thread = server, thread
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise RuntimeError("the scripted model server did not start")
            time.sleep(0.002)
        self._url = _url(sock, self._host)
        self._sock = sock
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread to end (streams still running are cut off)."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None
        self._url = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve(
    scenario: Scenario,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve ``scenario`` in the foreground until SIGINT/SIGTERM.

    Args:
        scenario: what to answer.
        host: interface to bind.
        port: port to bind; 0 picks a free one.
        announce: called with the base URL once the port is bound (connections already queue).
    """
    sock = _bind(host, port)
    if announce is not None:
        announce(_url(sock, host))
    config = uvicorn.Config(ScriptedModelApp(scenario), lifespan="off", log_level="warning", access_log=False)
    main_thread = threading.current_thread() is threading.main_thread()
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it; a no-op handler underneath makes that
    # a clean exit (status 0) instead of death by signal. SIGINT still ends as KeyboardInterrupt.
    previous = signal.signal(signal.SIGTERM, lambda *_: None) if main_thread else None
    settle_heap()  # a process of its own: the scenario and the imports out of the collector's way
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
