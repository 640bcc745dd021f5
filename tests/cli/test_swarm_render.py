"""``autarch watch`` and ``autarch workflow show`` on a swarm (seed 002): a line per bead, worker and lease event,
rendered from the contract fixtures, workers labelled by nickname, beads counted, and the beads listed.

Pure functions and an in-memory HTTP transport standing in for the gateway (as in ``test_watch_progress``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from autarch.cli import watch_cmd, workflow_cmd
from autarch.cli.gateway_client import Connection, GatewayClient, GatewayError
from autarch.cli.main import main
from autarch.cli.render import Progress, Watch, render_event
from autarch.cli.workflow_cmd import bead_rows, epic_get, show_lines
from autarch.contracts import events as ev
from autarch.contracts.beads import BeadList, BeadView, ConflictRecord, SwarmView, WorkerView

FIXTURES = Path(__file__).parents[1] / "contracts" / "fixtures" / "events"
WF = "5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13"  # the fixtures' workflow (= epic) id
SID = "0b8f3a52-6c1d-4e7f-9a21-5d3c8b7e1f40"  # the session of the fixtures' claim
AT = "2026-11-25T09:00:00Z"
SWARM_TYPES = {event_type.__struct_config__.tag for event_type in (*ev.SWARM_EVENTS, *ev.MAIL_EVENTS)}


def fixture(event_type: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{event_type.replace(':', '.')}.v1.json").read_text())


def text(line: str | None) -> str:
    """The line without its ``HH:MM:SS  `` time."""
    assert line is not None
    assert line[:8].count(":") == 2 and line[8:10] == "  ", line  # local time, as every watch line
    return line[10:]


# Each fixture's line, given the workers' nicknames (worker:joined told them: AmberFalcon is w1).
EXPECTED = {
    "swarm:started": "swarm started: 6 beads, 3 workers (mode swarm)",
    "swarm:finished": "swarm finished: 2 beads merged, in order pulse-1 → pulse-2",
    "worker:joined": "[w1 AmberFalcon] joined (worktree /data/worktrees/x)",
    "bead:claimed": "[w1 AmberFalcon] claimed pulse-2 (attempt 1)",
    "bead:closed": "[w1 AmberFalcon] closed pulse-2: commit 01234567 — Completed: add the parser",
    "bead:reopened": "bead pulse-2 reopened after attempt 1: merge conflict (files src/parser.py; landed since "
                     "01234567)",
    "bead:bounced": "bead pulse-3 BOUNCED: missing verify",
    "bead:created": "bead pulse-2 created: “Add the parser” (after pulse-1; files src/parser.py)",
    "bead:updated": "bead pulse-2 updated (open): “Add the parser” (after pulse-1; files src/parser.py)",
    "lease:granted": "[w1 AmberFalcon] leased src/parser.py for pulse-2",
    "lease:released": "[w1 AmberFalcon] released src/parser.py (done)",
    "lease:conflict": "[CopperHeron] cannot lease src/parser.py for pulse-4: held by w1 AmberFalcon",
    "bead:evidence": "bead square verification passed: verify ok",
    "bead:scope_requested": "[w1 AmberFalcon] asks to widen pulse-2 by tests/test_parser.py: The parser's tests "
                            "live there",
    "bead:widened": "[w1 AmberFalcon] pulse-2 widened by tests/test_parser.py (coordinator)",
    "bead:scope_refused": "[w1 AmberFalcon] widening of pulse-2 refused: src/lexer.py held by CopperHeron; ask again "
                          "once they are released",
    "worker:handoff": "[w1 AmberFalcon] handed off summary at 67% of its context: "
                      ".pulse/handoffs/worker-AmberFalcon.json (a fresh session resumes)",
    "mail:posted": "mail [w1 AmberFalcon → coordinator] File conflict on pulse-4",
}
HIDDEN = {"worker:status"}
"""The fixture says a worker is working: its claim line said so already."""


def test_every_swarm_event_has_a_fixture_and_an_expected_line():
    assert set(EXPECTED) | HIDDEN == SWARM_TYPES
    for kind in SWARM_TYPES:
        assert fixture(kind)["type"] == kind


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_each_swarm_event_renders_its_line(kind: str):
    assert text(render_event(fixture(kind), workers={"AmberFalcon": "w1"})) == EXPECTED[kind]


def test_without_the_nicknames_workers_show_by_name():
    assert text(render_event(fixture("bead:claimed"))) == "[AmberFalcon] claimed pulse-2 (attempt 1)"
    assert text(render_event(fixture("lease:conflict"))).endswith("held by AmberFalcon")


def test_worker_status_shows_only_waiting_and_retired():
    status = fixture("worker:status")
    assert render_event(status) is None
    assert render_event({**status, "status": "idle", "bead_id": None}) is None
    workers = {"AmberFalcon": "w1"}
    assert text(render_event({**status, "status": "waiting"}, workers=workers)) == (
        "[w1 AmberFalcon] waiting: the files of the next ready bead are leased")
    assert text(render_event({**status, "status": "retired"}, workers=workers)) == "[w1 AmberFalcon] retired"


def test_variants():
    standalone = {**fixture("swarm:started"), "mode": "standalone", "max_workers": 1, "beads": 1}
    assert text(render_event(standalone)) == (
        "swarm started: 1 bead, 1 worker (mode standalone: preflight advised a single worker)")
    assert text(render_event({**fixture("swarm:finished"), "merged": []})) == "swarm finished: nothing merged"
    by_hand = {**fixture("bead:closed"), "commit": None, "worker": None, "reason": "done elsewhere\nin PR 12"}
    assert text(render_event(by_hand)) == "bead pulse-2 closed: done elsewhere"
    lease = msgspec.to_builtins(ev.BeadReopened(
        workflow_id=WF, occurred_at=datetime(2026, 11, 25, 9, tzinfo=UTC), bead_id="square", attempt=2,
        reason="files leased by AmberFalcon",
        conflict=ConflictRecord(kind="lease", attempt=2, files=["shapes/registry.py"], holder="AmberFalcon")))
    assert text(render_event(lease, workers={"AmberFalcon": "w1"})) == (
        "bead square reopened after attempt 2: files leased by AmberFalcon (files shapes/registry.py held by "
        "w1 AmberFalcon)")
    assert text(render_event({**fixture("bead:reopened"), "conflict": None, "reason": "the leases lapsed"})) == (
        "bead pulse-2 reopened after attempt 1: the leases lapsed")
    bounced = {**fixture("bead:bounced"), "reason": "3 attempts did not land", "missing": []}
    assert text(render_event(bounced)) == "bead pulse-3 BOUNCED: 3 attempts did not land"
    assert text(render_event({**bounced, "missing": ["files", "verify"]})).endswith("(missing files, verify)")
    shared = {**fixture("lease:granted"), "mode": "shared", "bead_id": None}
    assert text(render_event(shared)) == "[AmberFalcon] leased src/parser.py (shared)"
    assert text(render_event({**fixture("lease:released"), "reason": "expired"})).endswith("(expired)")
    alone = {**fixture("bead:created")["bead"], "dependencies": [], "files": []}
    assert text(render_event({**fixture("bead:created"), "bead": alone})) == "bead pulse-2 created: “Add the parser”"
    # A swarm event this version does not know still gets a line: its type.
    assert text(render_event({"type": "bead:polished", "occurred_at": AT})) == "bead:polished"


def test_a_watch_learns_nicknames_labels_worker_sessions_and_counts_beads():
    watch = Watch()
    lines = [watch.feed(fixture(kind)) for kind in ("swarm:started", "worker:joined", "bead:claimed")]
    assert [text(line) for line in lines] == [EXPECTED["swarm:started"], EXPECTED["worker:joined"],
                                              EXPECTED["bead:claimed"]]
    # The claimed bead's session has no workflow step: its lines are labelled by worker and bead.
    tool = {"type": "turn:tool_started", "run_id": WF, "occurred_at": AT, "session_id": SID, "turn_id": "t",
            "tool_use_id": "u", "tool": "write_file", "input": {"path": "src/parser.py"}}
    assert text(watch.feed(tool)) == "[w1 pulse-2] write_file path=src/parser.py"
    assert watch.feed(fixture("worker:status")) is None
    # A bead a person adds counts; one the plan made is counted by swarm:started already.
    user_bead = {**fixture("bead:created")["bead"], "id": "u1", "created_by": "user"}
    watch.feed({**fixture("bead:created"), "bead": user_bead})
    watch.feed(fixture("bead:created"))
    assert text(watch.feed(fixture("bead:closed"))) == EXPECTED["bead:closed"] + "  [1/7 beads closed]"
    watch.progress.stage = "execution"
    assert watch.progress.summary() == "execution (stage 4/5), 1/7 beads closed"


def swarm() -> dict[str, Any]:
    """A swarm midway: base merged, square being worked by w1 AmberFalcon in session SID."""
    beads = [BeadView(id="base", epic_id=WF, title="Shape base class", status="closed", attempt=1,
                      assignee="CopperHeron", commit="a1b2c3d4e5f60718"),
             BeadView(id="square", epic_id=WF, title="Square shape", status="in_progress", attempt=2,
                      assignee="AmberFalcon"),
             BeadView(id="units", epic_id=WF, title="Units note", status="bounced", bounce_reason="missing verify"),
             BeadView(id="u1", epic_id=WF, title="Extra", status="open", created_by="user")]
    workers = [WorkerView(name="AmberFalcon", nickname="w1", status="working", bead_id="square", attempt=2,
                          session_id=SID),
               WorkerView(name="CopperHeron", nickname="w2", status="idle", beads_closed=["base"])]
    return msgspec.to_builtins(SwarmView(epic_id=WF, mode="swarm", max_workers=2, workers=workers, beads=beads,
                                         merged=["base"]))


def test_a_watch_joining_a_running_swarm_knows_it_from_its_view():
    watch = Watch()
    watch.know_swarm(swarm())
    assert watch.workers == {"AmberFalcon": "w1", "CopperHeron": "w2"}
    assert watch.sessions == {SID: "w1 square"}
    progress = Progress(stage="execution")
    progress.know_swarm(swarm())
    assert progress.bead_tag() == "1/4 beads closed"
    assert Progress().bead_tag() is None


def test_bead_rows_and_show_lines():
    listing = msgspec.to_builtins(BeadList(epic_id=WF, beads=[msgspec.convert(b, BeadView) for b in swarm()["beads"]],
                                           critical_path=["square", "summary"]))
    rows = bead_rows(listing["beads"])
    assert rows == [
        "base    closed      CopperHeron  attempt 1  a1b2c3d4  Shape base class",
        "square  in progress AmberFalcon  attempt 2  -         Square shape",
        "units   bounced     -            attempt 0  -         Units note (missing verify)",
        "u1      open        -            attempt 0  -         Extra",
    ]
    view = {"id": WF, "title": "Shapes", "request": "r", "repo": "/r", "base_branch": "main", "stage": "execution",
            "status": "active"}
    planned = {"pulses": [{"id": "base", "title": "Shape base class"}], "pulse_runs": []}
    lines = show_lines(view, planned, listing)
    assert f"  beads     {rows[0]}" in lines and f"            {rows[3]}" in lines
    assert "            critical path: square → summary" in lines
    # The beads are the plan's pulses: their planned rows are not repeated.
    assert not any(line.startswith("  pulses") for line in lines)
    assert any(line.startswith("  pulses    base") for line in show_lines(view, planned))
    assert bead_rows([]) == []


# --- through the commands, against an in-memory gateway --------------------------------------------------


BEAD_PLAN = [{"id": "base", "title": "Shape base class", "description": "d", "expectedChanges": ["shapes/base.py"],
              "estimatedSize": "small", "verify": ["python3 -c 'import shapes.base'"]}]
"""The approved plan's pulses, as ``/artifacts`` gives them: with ``verify``, a bead plan."""


def recorded(seq: int, event: dict[str, Any]) -> str:
    return f"id: {seq}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n"


class Gateway:
    """The workflow mid-swarm: its view, cards, swarm, beads, and one event stream; records what was asked."""

    def __init__(self, stream: list[dict[str, Any]], *, beads: httpx.Response | None = None,
                 pulses: list[dict[str, Any]] | None = None) -> None:
        self.stream = stream
        self.beads = beads
        self.pulses = BEAD_PLAN if pulses is None else pulses
        self.loop = False
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        if path == "/api/events":
            content = ": connected\n\n" + "".join(recorded(i, e) for i, e in enumerate(self.stream, 1))
            return httpx.Response(200, content=content.encode(), headers={"content-type": "text/event-stream"})
        if path.startswith("/api/pulse/"):
            if self.loop:
                return httpx.Response(200, json={"id": WF, "status": "running"})
            return httpx.Response(404, json={"code": "not_found", "message": "no loop session", "details": {}})
        if path.startswith("/api/beads"):
            assert request.url.params["epic_id"] == WF
            if self.beads is not None:
                return self.beads
            if path == "/api/beads/swarm":
                return httpx.Response(200, json=swarm())
            listing = {"epic_id": WF, "beads": swarm()["beads"], "critical_path": []}
            return httpx.Response(200, json=listing)
        if path.endswith("/artifacts"):
            return httpx.Response(200, json={"workflow_id": WF, "pulses": self.pulses, "pulse_runs": []})
        return httpx.Response(200, json={"id": WF, "title": "Shapes", "request": "r", "repo": "/r",
                                         "base_branch": "main", "stage": "execution", "status": "active",
                                         "awaiting_approval": False, "sessions": {}})

    def client(self) -> GatewayClient:
        return GatewayClient(Connection("http://gw.test", "tok"), transport=httpx.MockTransport(self))


@pytest.fixture
def connect(monkeypatch, tmp_path: Path):
    (tmp_path / "token").write_text("tok")

    def use(gateway: Gateway) -> list[str]:
        for module in (workflow_cmd, watch_cmd):
            monkeypatch.setattr(module, "GatewayClient", lambda c: gateway.client(), raising=False)
        return ["--url", "http://gw.test", "--token-file", str(tmp_path / "token")]

    return use


TOOL = {"type": "turn:tool_started", "run_id": WF, "occurred_at": AT, "session_id": SID, "turn_id": "t",
        "tool_use_id": "u", "tool": "edit_file", "input": {"path": "shapes/registry.py"}}
CLOSED = {**fixture("bead:closed"), "bead_id": "square", "commit": "feedc0de00", "reason": "feat(square): add it"}
DONE = {"type": "workflow:completed", "workflow_id": WF, "occurred_at": AT}


def test_watch_joining_mid_swarm_labels_workers_and_counts_beads(connect, capsys):
    gateway = Gateway([TOOL, CLOSED, DONE])
    assert main(["watch", WF, *connect(gateway)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"watching “Shapes” ({WF}): stage execution (stage 4/5), 1/4 beads closed, active")
    assert out[1].endswith("  [w1 square] edit_file path=shapes/registry.py")
    assert out[2].endswith("  [w1 AmberFalcon] closed square: commit feedc0de — feat(square): add it  "
                           "[2/4 beads closed]")
    assert "/api/beads/swarm" in gateway.paths


def test_watch_json_passes_the_events_through(connect, capsys):
    stream = [fixture(kind) for kind in ("swarm:started", "worker:joined", "bead:claimed", "lease:granted",
                                         "bead:closed", "lease:released", "swarm:finished")] + [DONE]
    gateway = Gateway(stream)
    assert main(["watch", WF, "--json", "--from-start", *connect(gateway)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in out] == stream  # nothing else on stdout: no header, no totals


def test_watch_json_refuses_a_loop_session(connect, capsys):
    gateway = Gateway([DONE])
    gateway.loop = True
    assert main(["watch", WF, "--json", *connect(gateway)]) == 2
    assert f"`autarch pulse show {WF} --json`" in capsys.readouterr().err
    assert "/api/events" not in gateway.paths


def test_workflow_show_lists_the_beads(connect, capsys):
    gateway = Gateway([])
    assert main(["workflow", "show", WF, *connect(gateway)]) == 0
    out = capsys.readouterr().out
    assert "  beads     base    closed      CopperHeron  attempt 1  a1b2c3d4  Shape base class" in out
    assert "square  in progress AmberFalcon  attempt 2" in out
    assert main(["workflow", "show", WF, "--json", *connect(gateway)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [b["id"] for b in shown["beads"]["beads"]] == ["base", "square", "units", "u1"]


@pytest.mark.parametrize("answer", [
    httpx.Response(404, json={"code": "not_found", "message": "no route", "details": {}}),
    httpx.Response(404, text="Not Found"),
    httpx.Response(409, json={"code": "no_epic", "message": "the workflow has no epic", "details": {}}),
])
def test_a_workflow_without_an_epic_shows_no_beads(connect, capsys, answer: httpx.Response):
    gateway = Gateway([], beads=answer)
    assert main(["workflow", "show", WF, *connect(gateway)]) == 0
    out = capsys.readouterr().out
    assert "beads" not in out and "stage     execution, active" in out
    assert main(["workflow", "show", WF, "--json", *connect(gateway)]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"workflow", "artifacts"}


def test_a_plan_without_verify_is_not_asked_for_beads(connect, capsys):
    plain = [{**BEAD_PLAN[0], "verify": None}]
    gateway = Gateway([TOOL, DONE], pulses=plain)
    assert main(["workflow", "show", WF, *connect(gateway)]) == 0
    assert main(["watch", WF, *connect(gateway)]) == 0
    assert not [p for p in gateway.paths if p.startswith("/api/beads")]
    assert "  pulses    base" in capsys.readouterr().out


def test_other_bead_errors_are_not_hidden():
    gateway = Gateway([], beads=httpx.Response(503, json={"code": "unavailable", "message": "no orchestrator",
                                                          "details": {}}))
    with gateway.client() as client, pytest.raises(GatewayError, match="unavailable"):
        epic_get(client, "/api/beads", WF)
