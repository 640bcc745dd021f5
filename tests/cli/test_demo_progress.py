"""The demo's live progress line counts the pulses of the approved plan (``autarch demo``'s ``drive``).

An in-memory HTTP transport stands in for the gateway (as in ``test_watch_progress``): it streams the events of a
full-path workflow whose approved plan has two pulses, and answers the demo's approvals.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from autarch.cli.demo_cmd import drive
from autarch.cli.gateway_client import Connection, GatewayClient
from autarch.cli.render import Progress

WF = "99f31dc9-0000-4000-8000-0000000000d2"
PLAN = {"approachSummary": "Default an empty name, then test it.",
        "pulses": [{"id": "pulse-1", "title": "Greet the world"}, {"id": "pulse-2", "title": "Test it"}]}


def _stream(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    frames = [": connected\n\n"]
    for seq, (kind, data) in enumerate(events, 1):
        payload = {"type": kind, "workflow_id": WF, "occurred_at": "2026-01-01T00:00:00Z", **data}
        frames.append(f"id: {seq}\nevent: {kind}\ndata: {json.dumps(payload)}\n\n")
    return "".join(frames).encode()


def _two_pulse_workflow() -> list[tuple[str, dict[str, Any]]]:
    stages = [("scoping", "research", {"title": "Greet the world"}), ("research", "planning", {"summary": "ok"}),
              ("planning", "execution", PLAN)]
    events: list[tuple[str, dict[str, Any]]] = [("workflow:created", {"title": "Greet", "request": "greet"})]
    for stage, after, card in stages:
        events += [("workflow:approval_needed", {"stage": stage, "artifact": card}),
                   ("workflow:stage_changed", {"from_stage": stage, "to_stage": after,
                                               "path": "full" if stage == "scoping" else None})]
    for n, title in ((1, "Greet the world"), (2, "Test it")):
        events += [("pulse:started", {"pulse_id": f"pulse-{n}", "planned_pulse_id": f"pulse-{n}", "attempt": 1,
                                      "title": title, "pulse_branch": f"b{n}", "base_commit": "c"}),
                   ("pulse:completed", {"pulse_id": f"pulse-{n}", "status": "succeeded", "commit": f"c{n}",
                                        "description": f"feat: pulse {n}"})]
    events += [("workflow:stage_changed", {"from_stage": "execution", "to_stage": "review"}),
               ("workflow:approval_needed", {"stage": "review", "artifact": {"recommendation": "approve"}}),
               ("workflow:stage_changed", {"from_stage": "review", "to_stage": "done"}),
               ("workflow:completed", {})]
    return events


def test_the_demo_counts_the_pulses_of_the_approved_plan() -> None:
    approvals: list[str] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/events":
            return httpx.Response(200, content=_stream(_two_pulse_workflow()),
                                  headers={"content-type": "text/event-stream"})
        approvals.append(request.url.path)
        return httpx.Response(200, json={})

    client = GatewayClient(Connection("http://gw.test", "tok"), transport=httpx.MockTransport(gateway))
    lines: list[str] = []
    outcome = drive(client, WF, out=lines.append, timeout=10)
    assert outcome.status == "completed", outcome
    assert len(approvals) == 4
    tags = [line.rsplit("[", 1)[1].rstrip("]") for line in lines if "pulse pulse-" in line]
    assert tags == ["pulse 1/2", "1/2 pulses done", "pulse 2/2", "2/2 pulses done"]


def test_a_full_path_plan_unseen_is_not_taken_for_the_quick_paths_single_pulse() -> None:
    progress = Progress()
    # Joined after the plan card went by: the stage change from planning says it was the full path.
    progress.feed({"type": "workflow:stage_changed", "from_stage": "planning", "to_stage": "execution"})
    progress.feed({"type": "pulse:started", "pulse_id": "pulse-2", "planned_pulse_id": "pulse-2"})
    assert progress.pulse_tag() is None and progress.done_tag() is None
    quick = Progress()
    quick.feed({"type": "workflow:stage_changed", "from_stage": "scoping", "to_stage": "execution", "path": "quick"})
    quick.feed({"type": "pulse:started", "pulse_id": "pulse-1", "planned_pulse_id": "pulse-1"})
    assert quick.pulse_tag() == "pulse 1/1"
