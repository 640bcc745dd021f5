"""The ``workflow`` and ``watch`` commands without a gateway: arguments, where the gateway is, the requests
they send and how they print answers and errors (an in-memory HTTP transport stands in for the gateway)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from autarch.cli import watch_cmd, workflow_cmd
from autarch.cli.gateway_client import CliError, Connection, GatewayClient, connection_from_args
from autarch.cli.main import build_parser, main
from autarch.cli.render import SseComment
from autarch.cli.watch_cmd import follow

WF = "99f31dc9-0000-4000-8000-000000000001"
OTHER = "99f31dc9-1111-4000-8000-000000000002"
VIEW = {"id": WF, "title": "JWT", "request": "add JWT", "repo": "/r", "base_branch": "main", "stage": "scoping",
        "awaiting_approval": False, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:01Z",
        "version": 1, "status": "active"}


def parse(*argv: str) -> Any:
    return build_parser().parse_args(list(argv))


# --- arguments ------------------------------------------------------------------------------------------


def test_workflow_arguments():
    args = parse("workflow", "new", "--repo", ".", "--title", "JWT", "--base-branch", "dev", "--branch", "b/x",
                 "add", "JWT", "validation")
    assert (args.repo, args.title, args.base_branch, args.branch, args.request, args.json) == (
        ".", "JWT", "dev", "b/x", ["add", "JWT", "validation"], False)
    assert parse("workflow", "list", "--json").json is True
    args = parse("workflow", "show", WF, "--url", "http://h:1", "--token-file", "/t", "--data-dir", "/d")
    assert (args.workflow_id, args.url, args.token_file, args.data_dir) == (WF, "http://h:1", "/t", "/d")
    assert parse("workflow", "approve", WF, "--path", "quick").path == "quick"
    assert parse("workflow", "approve", WF).path is None
    assert parse("workflow", "request-changes", WF, "leave", "out", "tests").feedback == ["leave", "out", "tests"]
    assert parse("workflow", "stop", WF, "--reason", "lunch").reason == "lunch"
    assert parse("workflow", "resume", WF, "--message", "go").message == "go"
    assert parse("workflow", "approve-extension", WF).message is None
    assert parse("workflow", "answer", WF, "Postgres", "both of them").answers == ["Postgres", "both of them"]
    args = parse("watch", WF, "--from-start")
    assert (args.workflow_id, args.from_start) == (WF, True)
    assert parse("watch", "99f3").from_start is False


@pytest.mark.parametrize("argv", [
    ["workflow"],
    ["workflow", "frobnicate"],
    ["workflow", "new", "--title", "t", "request"],                 # no --repo
    ["workflow", "new", "--repo", ".", "request"],                  # no --title
    ["workflow", "new", "--repo", ".", "--title", "t"],             # no request
    ["workflow", "new", "--repo", ".", "--title", " ", "r"],        # empty title
    ["workflow", "show"],
    ["workflow", "approve", WF, "--path", "sideways"],
    ["workflow", "request-changes", WF],
    ["workflow", "request-changes", WF, "--comment"],
    ["workflow", "answer", WF],
    ["workflow", "answer", WF, ""],
    ["workflow", "stop", WF, "--reason"],
    ["workflow", "list", "extra"],
    ["watch"],
    ["watch", WF, "--since", "3"],
])
def test_usage_errors_exit_2(argv: list[str], capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "usage: autarch" in capsys.readouterr().err


# --- where the gateway is -------------------------------------------------------------------------------


def test_the_gateway_is_found_from_run_json_then_settings(tmp_path: Path, monkeypatch):
    for name in ("AUTARCH_PORT", "AUTARCH_HOST", "AUTARCH_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    data = tmp_path / "data"
    data.mkdir()
    (data / "token").write_text("s3cret\n")
    conn = connection_from_args(parse("workflow", "list", "--data-dir", str(data)))
    assert conn == Connection(url="http://127.0.0.1:8765", token="s3cret")
    monkeypatch.setenv("AUTARCH_PORT", "9999")
    assert connection_from_args(parse("workflow", "list", "--data-dir", str(data))).url == "http://127.0.0.1:9999"
    (data / "run.json").write_text(json.dumps({"gateway_url": "http://0.0.0.0:4321"}))
    assert connection_from_args(parse("workflow", "list", "--data-dir", str(data))).url == "http://127.0.0.1:4321"
    other = tmp_path / "other-token"
    other.write_text("other")
    conn = connection_from_args(parse("workflow", "list", "--data-dir", str(data), "--url", "http://gw:1/",
                                      "--token-file", str(other)))
    assert conn == Connection(url="http://gw:1", token="other")


def test_a_missing_token_or_gateway_says_to_start_autarch_up(tmp_path: Path, capsys):
    assert main(["workflow", "list", "--data-dir", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("autarch: no token at ") and "is `autarch up` running?" in err
    (tmp_path / "token").write_text("")
    assert main(["workflow", "list", "--token-file", str(tmp_path / "token")]) == 1
    assert "is empty" in capsys.readouterr().err
    (tmp_path / "token").write_text("t")
    assert main(["watch", WF, "--token-file", str(tmp_path / "token"), "--url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("autarch: cannot reach the gateway at http://127.0.0.1:9") and "autarch up" in err


# --- requests and answers, against an in-memory gateway ---------------------------------------------------


class FakeGateway:
    """Answers like the gateway; records (method, path, query, body) of every request."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []
        self.answer = answer

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.seen.append((request.method, request.url.path, dict(request.url.params), body))
        assert request.headers["authorization"] == "Bearer tok"
        if self.answer is not None:
            return self.answer(request)
        if request.url.path == "/api/workflows" and request.method == "GET":
            return httpx.Response(200, json={"items": [VIEW, {**VIEW, "id": OTHER}], "total": 2})
        if request.url.path.endswith("/artifacts"):
            return httpx.Response(200, json={"workflow_id": WF, "pulses": [], "pulse_runs": []})
        return httpx.Response(200, json=VIEW)


@pytest.fixture
def gateway(monkeypatch, tmp_path: Path) -> tuple[FakeGateway, list[str]]:
    fake = FakeGateway()
    transport = httpx.MockTransport(lambda request: fake(request))
    for module in (workflow_cmd, watch_cmd):
        monkeypatch.setattr(module, "GatewayClient", lambda conn: GatewayClient(conn, transport=transport),
                            raising=False)
    (tmp_path / "token").write_text("tok")
    return fake, ["--url", "http://gw.test", "--token-file", str(tmp_path / "token")]


def test_each_command_sends_its_request(gateway, capsys, tmp_path: Path):
    fake, conn = gateway
    commands = [
        (["new", "--repo", str(tmp_path), "--title", "JWT", "add", "JWT"],
         ("POST", "/api/workflows", {}, {"title": "JWT", "request": "add JWT", "repo": str(tmp_path.resolve())})),
        (["new", "--repo", str(tmp_path), "--title", "T", "--base-branch", "dev", "--branch", "x", "--script",
          "s", "r"],
         ("POST", "/api/workflows", {}, {"title": "T", "request": "r", "repo": str(tmp_path.resolve()),
                                         "base_branch": "dev", "branch": "x", "script": "s"})),
        (["list"], ("GET", "/api/workflows", {"limit": "500"}, None)),
        (["approve", WF], ("POST", f"/api/workflows/{WF}/approve", {}, None)),
        (["approve", WF, "--path", "quick"], ("POST", f"/api/workflows/{WF}/approve", {}, {"path": "quick"})),
        (["request-changes", WF, "no", "tests"],
         ("POST", f"/api/workflows/{WF}/request-changes", {}, {"feedback": "no tests"})),
        (["request-changes", WF, "--fix"],
         ("POST", f"/api/workflows/{WF}/request-changes", {}, {"feedback": "Fix the review's comments.",
                                                               "fix": True})),
        (["request-changes", WF, "keep", "the", "API", "--fix"],
         ("POST", f"/api/workflows/{WF}/request-changes", {}, {"feedback": "keep the API", "fix": True})),
        (["stop", WF], ("POST", f"/api/workflows/{WF}/stop", {}, None)),
        (["stop", WF, "--reason", "lunch"], ("POST", f"/api/workflows/{WF}/stop", {}, {"reason": "lunch"})),
        (["resume", WF], ("POST", f"/api/workflows/{WF}/resume", {}, None)),
        (["resume", WF, "--message", "go"], ("POST", f"/api/workflows/{WF}/resume", {}, {"message": "go"})),
        (["approve-extension", WF], ("POST", f"/api/workflows/{WF}/extension/approve", {}, None)),
        (["approve-extension", WF, "--message", "ok"],
         ("POST", f"/api/workflows/{WF}/extension/approve", {}, {"message": "ok"})),
        (["answer", WF, "pg", "both"], ("POST", f"/api/workflows/{WF}/answers", {}, {"answers": ["pg", "both"]})),
    ]
    for argv, expected in commands:
        fake.seen.clear()
        assert main(["workflow", *argv, *conn]) == 0, capsys.readouterr().err
        assert fake.seen == [expected], argv
    out = capsys.readouterr().out
    assert f"{WF}  scoping" in out and f"autarch watch {WF}" in out


def test_show_reads_the_workflow_and_its_artifacts_and_ids_may_be_prefixes(gateway, capsys):
    fake, conn = gateway
    assert main(["workflow", "show", WF.upper(), *conn]) == 0
    assert [s[1] for s in fake.seen] == [f"/api/workflows/{WF}", f"/api/workflows/{WF}/artifacts"]
    fake.seen.clear()
    assert main(["workflow", "show", "99f31dc9-0", *conn, "--json"]) == 0
    assert [s[1] for s in fake.seen] == ["/api/workflows", f"/api/workflows/{WF}", f"/api/workflows/{WF}/artifacts"]
    capsys.readouterr()
    assert main(["workflow", "show", "99f31dc9", *conn]) == 1
    assert "99f31dc9 is ambiguous: it starts 2 workflow ids" in capsys.readouterr().err
    assert main(["workflow", "show", "abcd", *conn]) == 1
    assert capsys.readouterr().err == "autarch: not_found: no workflow abcd\n"
    assert main(["workflow", "show", "no such id", *conn]) == 1
    assert "is not a workflow id" in capsys.readouterr().err


def test_json_output_is_the_gateways_json(gateway, capsys):
    _, conn = gateway
    assert main(["workflow", "list", "--json", *conn]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 2
    assert main(["workflow", "show", WF, "--json", *conn]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["workflow"] == VIEW and shown["artifacts"]["workflow_id"] == WF
    assert main(["workflow", "approve", WF, "--json", *conn]) == 0
    assert json.loads(capsys.readouterr().out) == VIEW


def test_gateway_errors_print_code_and_message_and_exit_1(gateway, capsys):
    fake, conn = gateway
    fake.answer = lambda _: httpx.Response(409, json={"code": "not_awaiting_approval", "message": "nothing waits",
                                                      "details": {}})
    assert main(["workflow", "approve", WF, *conn]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "autarch: not_awaiting_approval: nothing waits\n")
    fake.answer = lambda _: httpx.Response(502, text="Bad Gateway")
    assert main(["workflow", "list", *conn]) == 1
    assert capsys.readouterr().err == "autarch: http_502: Bad Gateway\n"
    fake.answer = lambda _: httpx.Response(200, text="not json")
    assert main(["workflow", "list", *conn]) == 1
    assert "not JSON" in capsys.readouterr().err


def test_list_and_show_render_for_people(gateway, capsys):
    fake, conn = gateway
    halted = {**VIEW, "stage": "execution", "status": "halted", "path": "full", "branch": "autarch/99f31dc9",
              "halt": {"reason": "questions", "message": "the agent asks", "pulse_id": "pulse-1",
                       "details": {"questions": [{"type": "single_select", "prompt": "Which DB?",
                                                  "options": ["pg", "sqlite"]}]}}}
    artifacts = {"workflow_id": WF, "scope": {"title": "JWT", "in_scope": ["a"], "out_of_scope": [],
                                              "recommended_path": "full"},
                 "plan": {"approachSummary": "two", "pulses": [{"id": "pulse-1"}, {"id": "pulse-2"}]},
                 "review": {"comments": [], "recommendation": None},
                 "preflight": {"status": "completed", "summary": "ready"},
                 "pulse_runs": [
                     {"id": "pulse-1", "status": "succeeded", "checkpoint_commit": "abcdef0123", "title": "mw",
                      "description": "feat: mw"},
                     {"id": "pulse-2", "status": "proposed", "title": "tests"}]}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/artifacts"):
            return httpx.Response(200, json=artifacts)
        if request.url.path == "/api/workflows":
            return httpx.Response(200, json={"items": [halted], "total": 1})
        return httpx.Response(200, json=halted)

    fake.answer = answer
    assert main(["workflow", "show", WF, *conn]) == 0
    out = capsys.readouterr().out
    for part in ("JWT  (99f31dc9-", "repo      /r (base main → branch autarch/99f31dc9)",
                 "stage     execution, halted, path full", "halted    questions in pulse-1: the agent asks",
                 "1. Which DB? [pg / sqlite]", f"→ autarch workflow answer {WF} ANSWER...",
                 "pulses    pulse-1        succeeded  abcdef01  feat: mw", "pulse-2        proposed   -         tests",
                 "preflight completed: ready", "scope     scope “JWT”: 1 in scope, 0 out; recommends full",
                 "plan      plan: two (2 pulses: pulse-1, pulse-2)", "review    in progress (0 comments)"):
        assert part in out, (part, out)
    assert main(["workflow", "list", *conn]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["ID", "STAGE", "STATUS", "UPDATED", "(UTC)", "TITLE"]
    assert out[1].split() == [WF, "execution", "halted", "2026-01-01", "00:00:01", "JWT"]
    fake.answer = lambda _: httpx.Response(200, json={"items": [], "total": 0})
    assert main(["workflow", "list", *conn]) == 0
    assert capsys.readouterr().out == "no workflows\n"


# --- watch: the stream, reconnection, the end ----------------------------------------------------------


def sse(*events: tuple[int, str, dict[str, Any]], connected: bool = True) -> bytes:
    parts = [": connected\n\n"] if connected else []
    for seq, kind, data in events:
        payload = {"type": kind, "workflow_id": WF, "occurred_at": "2026-01-01T00:00:00Z", **data}
        parts.append(f"id: {seq}\nevent: {kind}\ndata: {json.dumps(payload)}\n\n")
    return "".join(parts).encode()


def stream_gateway(streams: list[bytes], view: dict[str, Any] | None = None) -> tuple[GatewayClient, list]:
    """A client whose ``/api/events`` answers the given bodies in turn (then a connection error)."""
    calls: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/events":
            calls.append(dict(request.url.params))
            if not streams:
                raise httpx.ConnectError("refused")
            return httpx.Response(200, content=streams.pop(0), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=view or VIEW)

    return GatewayClient(Connection("http://gw.test", "tok"), transport=httpx.MockTransport(handler)), calls


def test_watch_prints_events_until_the_workflow_completes(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _: None)
    client, calls = stream_gateway([
        sse((1, "workflow:created", {"title": "JWT", "repo": "/r", "base_branch": "main"}),
            (2, "turn:completed", {"session_id": "s", "turn_id": "t", "outcome": "end_turn", "input_tokens": 5,
                                   "output_tokens": 5, "cost_usd": 0.25})),
        # The connection drops; the watch resumes after event 2.
        sse((3, "turn:completed", {"session_id": "s", "turn_id": "t", "outcome": "end_turn", "input_tokens": 10,
                                   "cost_usd": 0.5}),
            (4, "workflow:completed", {}), (5, "workflow:created", {"title": "never shown"})),
    ])
    lines: list[str] = []
    assert follow(client, WF, from_start=True, out=lines.append) == 0
    # Recorded events only: without --text the deltas would be sent only to be dropped.
    assert calls == [{"deltas": "false", "workflow": WF, "since": "0"},
                     {"deltas": "false", "workflow": WF, "since": "2"}]
    assert [line[10:] for line in lines[:-1]] == [
        "created “JWT” on /r (base main)",
        "[session s] turn done (end_turn): 5 in / 5 out tokens, $0.2500, 0 tool calls  [total 10 tokens, $0.2500]",
        "[session s] turn done (end_turn): 10 in / 0 out tokens, $0.5000, 0 tool calls  [total 20 tokens, $0.7500]",
        "workflow completed",
    ]
    assert lines[-1] == "total: 2 turns, 20 tokens, $0.7500"


def test_watch_exits_on_abandonment_and_at_once_when_the_workflow_already_ended(monkeypatch, capsys):
    monkeypatch.setattr("time.sleep", lambda _: None)
    client, _ = stream_gateway([sse((9, "workflow:abandoned", {"stage": "execution", "reason": "preflight failed"}))])
    lines: list[str] = []
    assert follow(client, WF, from_start=True, out=lines.append) == 0
    assert lines[-1].endswith("ABANDONED in execution: preflight failed")
    # Not from the start: only new events come, so a workflow that already ended is seen from its state.
    client, calls = stream_gateway([sse()], view={**VIEW, "stage": "done", "status": "done"})
    lines = []
    assert follow(client, WF, out=lines.append) == 0
    assert calls == [{"deltas": "false", "workflow": WF}] and lines == ["workflow already ended: stage done, done"]


def test_watch_gives_up_when_the_gateway_stays_away(monkeypatch, capsys):
    clock = itertools.count(0, 10)  # endless: other code of the process may read the clock too
    monkeypatch.setattr("time.sleep", lambda _: None)
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    client, calls = stream_gateway([sse()])  # connected once, then the gateway is gone
    with pytest.raises(CliError) as err:
        follow(client, WF, from_start=False, out=lambda _: None, reconnect_for=30)
    assert "gave up after 30s of reconnecting" in err.value.message
    assert len(calls) > 2 and "reconnecting" in capsys.readouterr().err
    # Never connected at all: the error is immediate.
    client, calls = stream_gateway([])
    with pytest.raises(CliError) as err:
        follow(client, WF, out=lambda _: None)
    assert "is `autarch up` running?" in err.value.message and len(calls) == 1


def test_watch_rides_out_a_restarting_gateway_but_not_a_refusal(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _: None)
    answers = [httpx.Response(200, content=sse((1, "workflow:created", {"title": "t", "repo": "/r",
                                                                        "base_branch": "main"})),
                              headers={"content-type": "text/event-stream"}),
               httpx.Response(503, json={"code": "unavailable", "message": "not connected to NATS"}),
               httpx.Response(200, content=sse((2, "workflow:completed", {})),
                              headers={"content-type": "text/event-stream"})]
    since: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        since.append(request.url.params.get("since"))
        return answers.pop(0)

    client = GatewayClient(Connection("http://gw.test", "tok"), transport=httpx.MockTransport(handler))
    lines: list[str] = []
    assert follow(client, WF, from_start=True, out=lines.append) == 0
    assert since == ["0", "1", "1"] and lines[-1].endswith("workflow completed")

    refusal = httpx.Response(401, json={"code": "unauthorized", "message": "wrong bearer token"})
    client = GatewayClient(Connection("http://gw.test", "tok"), transport=httpx.MockTransport(lambda _: refusal))
    with pytest.raises(CliError) as err:
        follow(client, WF, out=lines.append)
    assert err.value.message == "unauthorized: wrong bearer token"


def test_sse_comments_are_not_events():
    assert SseComment("keep-alive") != SseComment("connected")


def test_autarch_up_says_where_agent_turns_go_and_warns_without_a_key():
    from autarch.cli.system import _model_line
    from autarch.runtime.settings import Settings

    assert "NO API KEY" in _model_line(Settings(data_dir="/tmp/unused"))
    assert "autarch demo" in _model_line(Settings(data_dir="/tmp/unused"))
    assert _model_line(Settings(data_dir="/tmp/unused", anthropic_api_key="sk-x")) == (
        "Anthropic API (key from the settings)")
    assert _model_line(Settings(data_dir="/tmp/unused", anthropic_base_url="http://127.0.0.1:9/")) == (
        "http://127.0.0.1:9/ (no API key set)")


def test_request_changes_fixes_the_comments_named_by_a_unique_prefix(monkeypatch, tmp_path: Path, capsys):
    first, second = "0d9d6a42-5c1b-4f57-9a1e-3f2c1b0a9e81", "0d9e0000-0000-4000-8000-000000000000"
    cards = {"workflow_id": WF, "review": {"comments": [{"comment_id": first}, {"comment_id": second}]}}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=cards if request.url.path.endswith("/artifacts") else VIEW)

    fake = FakeGateway(answer)
    transport = httpx.MockTransport(lambda request: fake(request))
    monkeypatch.setattr(workflow_cmd, "GatewayClient", lambda conn: GatewayClient(conn, transport=transport))
    (tmp_path / "token").write_text("tok")
    conn = ["--url", "http://gw.test", "--token-file", str(tmp_path / "token")]
    # ``0d9d`` names one comment; ``0d9`` names two and ``ffff`` none: those go as given, for the gateway to refuse.
    assert main(["workflow", "request-changes", WF, "only", "these", "--comment", "0d9d", "--comment", "0d9",
                 "--comment", "ffff", *conn]) == 0, capsys.readouterr().err
    posted = [body for method, _, _, body in fake.seen if method == "POST"]
    assert posted == [{"feedback": "only these", "fix": [first, "0d9", "ffff"]}]
