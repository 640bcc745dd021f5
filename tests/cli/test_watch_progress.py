"""``autarch watch`` with progress and streamed text: the header from the workflow's state, live deltas (no
``id:``) interleaved with recorded events, and resumption from the last recorded event (an in-memory HTTP
transport stands in for the gateway, as in ``test_parsing``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from autarch.cli import watch_cmd, workflow_cmd
from autarch.cli.gateway_client import Connection, GatewayClient
from autarch.cli.main import main
from autarch.cli.render import Watch
from autarch.cli.watch_cmd import follow

WF = "99f31dc9-0000-4000-8000-000000000001"
SID = "5e55105e-0000-4000-8000-000000000002"
VIEW = {"id": WF, "title": "JWT", "request": "add JWT", "repo": "/r", "base_branch": "main", "stage": "execution",
        "awaiting_approval": False, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:01Z",
        "version": 9, "status": "active", "current_pulse": "pulse-2", "sessions": {"pulse:pulse-2": SID}}
CARDS = {"workflow_id": WF, "pulses": [{"id": "pulse-1", "title": "middleware"}, {"id": "pulse-2", "title": "tests"}],
         "pulse_runs": [{"id": "pulse-1", "planned_pulse_id": "pulse-1", "status": "succeeded"},
                        {"id": "pulse-2", "planned_pulse_id": "pulse-2", "status": "running"}]}


def recorded(seq: int, kind: str, **data: Any) -> str:
    payload = {"type": kind, "workflow_id": WF, "occurred_at": "2026-01-01T00:00:00Z", **data}
    return f"id: {seq}\nevent: {kind}\ndata: {json.dumps(payload)}\n\n"


def live(text: str, kind: str = "turn:message_delta") -> str:
    payload = {"type": kind, "session_id": SID, "turn_id": "t-1", "text": text, "run_id": WF, "restart": False}
    return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"


def body(*parts: str) -> bytes:
    return (": connected\n\n" + "".join(parts)).encode()


class Gateway:
    """Answers the view, the cards, and the given event streams in turn; records the stream requests."""

    def __init__(self, streams: list[bytes]) -> None:
        self.streams = streams
        self.calls: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/events":
            self.calls.append(dict(request.url.params))
            if not self.streams:
                raise httpx.ConnectError("refused")
            return httpx.Response(200, content=self.streams.pop(0), headers={"content-type": "text/event-stream"})
        if request.url.path.endswith("/artifacts"):
            return httpx.Response(200, json=CARDS)
        if request.url.path.startswith("/api/pulse/"):  # as the gateway answers a workflow id asked as a session
            return httpx.Response(404, json={"code": "not_found", "message": "no loop session", "details": {}})
        return httpx.Response(200, json=VIEW)

    def client(self) -> GatewayClient:
        return GatewayClient(Connection("http://gw.test", "tok"), transport=httpx.MockTransport(self))


def test_deltas_never_move_the_resume_point_and_show_only_when_asked(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _: None)
    streams = [
        body(recorded(7, "turn:tool_started", session_id=SID, turn_id="t-1", tool="shell", input={"command": "ls"}),
             live("Tests pass"), live("."), live("\nNow the docs."), live("hmm", "turn:thought_delta")),
        # The connection dropped after deltas: the watch resumes after 7, the last recorded event.
        body(recorded(8, "turn:completed", session_id=SID, turn_id="t-1", text="…", thoughts="",
                      outcome="end_turn"),
             recorded(9, "workflow:completed")),
    ]
    gateway = Gateway(list(streams))
    lines: list[str] = []
    watch = Watch(text=True, sessions={SID: "pulse:pulse-2"})
    assert follow(gateway.client(), WF, from_start=True, out=lines.append, watch=watch) == 0
    assert gateway.calls == [{"workflow": WF, "since": "0"}, {"workflow": WF, "since": "7"}]
    said = " " * 10 + "[pulse:pulse-2] » "
    assert lines[1] == said + "Tests pass."
    assert lines[2].split("\n")[0] == said + "Now the docs."
    assert "[pulse:pulse-2] turn done (end_turn)" in lines[2].split("\n")[1]
    assert "hmm" not in "".join(lines)

    # Without --text the same stream prints the events only.
    gateway = Gateway(list(streams))
    plain: list[str] = []
    assert follow(gateway.client(), WF, from_start=True, out=plain.append) == 0
    assert len(plain) == 4 and not any("»" in line for line in plain)


@pytest.fixture
def conn(monkeypatch, tmp_path: Path) -> tuple[Gateway, list[str]]:
    gateway = Gateway([body(recorded(10, "pulse:completed", pulse_id="pulse-2", status="succeeded", commit="c0ffee",
                                     description="test: cover it"),
                            recorded(11, "workflow:abandoned", stage="execution", reason="stopped for good"))])
    for module in (workflow_cmd, watch_cmd):
        monkeypatch.setattr(module, "GatewayClient", lambda c: gateway.client(), raising=False)
    (tmp_path / "token").write_text("tok")
    return gateway, ["--url", "http://gw.test", "--token-file", str(tmp_path / "token")]


def test_watching_live_starts_from_the_workflows_progress(conn, capsys):
    gateway, args = conn
    assert main(["watch", WF, *args]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"watching “JWT” ({WF}): stage execution (stage 4/5), pulse 2/2 “tests”, active")
    # The pulse that ends is counted with the one that ended before the watch began.
    assert out[1].endswith("pulse pulse-2 succeeded: commit c0ffee — test: cover it  [2/2 pulses done]")
    assert gateway.calls == [{"deltas": "false", "workflow": WF}]


def test_text_is_an_option_of_watch(conn, capsys):
    gateway, args = conn
    assert main(["watch", WF, "--text", "--from-start", *args]) == 0
    assert gateway.calls == [{"workflow": WF, "since": "0"}]  # with --text, the deltas come too
    out = capsys.readouterr().out.splitlines()
    # Replaying from the start: the header still says where the workflow is; the lines count from the events.
    assert "stage execution (stage 4/5)" in out[0] and "--from-start" not in out[0]
    assert out[1].endswith("test: cover it")
