"""A worker that crosses 65 % of its context hands off, and a fresh session finishes the bead from the handoff."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import jsonschema

from tests.workflows.conftest import Client, approve_stages, finish, git, start

from .conftest import swarm_scenario
from .test_swarm_e2e import BEADS, _swarm_events

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "contracts" / "handoff.schema.json").read_text())
HANDOFF_FILE = r"wrote (\.pulse/handoffs/worker-[A-Za-z0-9]+\.json)"


def test_a_worker_past_its_context_limit_hands_off_and_a_fresh_session_finishes(
        client: Client, model, tmp_path: Path) -> None:
    scenario = swarm_scenario()
    first = scenario["scripts"]["pulsing:summary"]
    # After the startup report, the reply that writes the bead's file came on a request that already used 150k of
    # the 200k window: after its write, the worker stops.
    first[1]["usage"] = {"input_tokens": 150_000, "output_tokens": 50}
    # Asked for its [HANDOFF] mail once the handoff is written, the stopped session sends it itself.
    scenario["scripts"]["pulsing:summary"] = [*first[:2], {"content": [{"type": "tool_use", "name": "send_message",
                                                                         "input": {
        "reason": "Tell the coordinator I handed off", "to": ["coordinator"],
        "subject": "[HANDOFF] {{recall:Runtime nickname: (\\S+?)\\.}} / {{recall:Registered name: (\\S+?)\\.}}",
        "body_md": "Handoff summary: paused at the limit."}}]},
        "Handed off."]
    scenario["scripts"]["pulsing:summary-h1"] = [
        # The fresh session tries to edit before reading its handoff: refused. Then it reads, and closes the bead
        # with what the first session left in the worktree.
        {"content": [{"type": "tool_use", "name": "write_file", "input": {
            "reason": "Too early", "path": "shapes/summary.py", "content": "x = 1\n"}}]},
        {"content": [{"type": "tool_use", "name": "read_file", "input": {
            "reason": "Resume from the handoff", "path": "{{recall:" + HANDOFF_FILE + "}}"}}]},
        {"content": [{"type": "tool_use", "name": "complete_pulse", "input": {
            "summary": "feat(shapes): total area of shapes", "filesChanged": ["shapes/summary.py"]}}]},
        "Bead complete.",
    ]
    wid, repo = start(client, model, tmp_path, scenario, branch="autarch/handoff")
    approve_stages(client, wid)
    view = client.wait_awaiting(wid, "review", timeout=120)

    events = _swarm_events(client, wid)
    handoffs = [e for e in events if e["type"] == "worker:handoff"]
    assert [h["bead_id"] for h in handoffs] == ["summary"]
    document = handoffs[0]["handoff"]
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(document)
    assert document["payload"]["context_snapshot"]["tokens_used_pct"] >= 0.65
    # Only what is there to read: the handoff itself, then the bead's card.
    assert document["read_first"] == [handoffs[0]["owner_file"], ".pulse/beads/summary.md"]

    # The [HANDOFF] mail is the worker's own send_message, sent after the handoff and before the fresh session.
    worker = handoffs[0]["worker"]
    mail = [e["message"] for e in client.events(wid, until="swarm:finished") if e["type"] == "mail:posted"
            and e["message"]["subject"].startswith("[HANDOFF]")]
    assert len(mail) == 1 and mail[0]["sender"] == worker and mail[0]["to"] == ["coordinator"], mail
    assert mail[0]["subject"].endswith(f"/ {worker}")
    order = [r.script for r in model.requests if r.script in ("summary", "summary-h1")]
    asked = [i for i, r in enumerate(r for r in model.requests if r.script in ("summary", "summary-h1"))
             if r.script == "summary" and "[HANDOFF]" in json.dumps(r.body)]
    assert asked and asked[0] < order.index("summary-h1"), order
    resumed = [r for r in model.requests if r.script == "summary-h1" and r.body]
    kickoff = resumed[0].body["messages"][0]["content"][0]["text"]
    assert "Resuming from a handoff" in kickoff and handoffs[0]["owner_file"] in kickoff
    assert "read these first" in json.dumps(resumed[1].body["messages"][-1])  # the edit before the read
    read = json.dumps(resumed[2].body["messages"][-1])
    assert "schema_version" in read and "ready_to_resume" in read  # it read the handoff

    # One attempt, two sessions, one commit; the coordination files stay out of it.
    claims = [e for e in events if e["type"] == "bead:claimed" and e["bead_id"] == "summary"]
    assert [c["attempt"] for c in claims] == [1]
    log = git(repo, "log", "--format=%s", f"main..{view['branch']}").splitlines()
    assert len(log) == len(BEADS) and sum(1 for s in log if s.startswith("feat(summary)")) == 1
    tree = git(repo, "ls-tree", "-r", "--name-only", view["branch"]).split()
    assert "shapes/summary.py" in tree and not any(p.startswith(".pulse/") for p in tree)

    listed = client.http.get("/api/beads/handoffs", params={"epic_id": wid}).raise_for_status().json()
    assert [h["owner_file"] for h in listed["handoffs"]] == [handoffs[0]["owner_file"]]
    assert listed["documents"] == [document]
    replayed = json.loads(client.system.cli("replay", wid).stdout)["swarm"]
    assert replayed["handoffs"] == listed["handoffs"]
    assert [e["bead_id"] for e in replayed["evidence"]].count("summary") == 1
    finish(client, wid)


def test_a_worker_that_swaps_the_handoff_directory_for_a_link_out_gets_its_handoff_written_inside(
        client: Client, model, tmp_path: Path) -> None:
    """Issue 32's audit of the worker-file writer, as a real swarm: before it hands off, the worker's shell swaps
    ``.pulse/handoffs`` for a link to a directory outside whose ``manifest.json`` is a FIFO. Followed, the link
    would write the handoff outside, or block on the FIFO forever. The git service's ``write_worker_files``
    replaces the link with a directory: the handoff is written in the worktree, the fresh session reads it and
    finishes the bead, and nothing outside is touched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    os.mkfifo(outside / "manifest.json")
    scenario = swarm_scenario()
    first = scenario["scripts"]["pulsing:summary"]
    swap = {"content": [{"type": "tool_use", "name": "shell", "input": {
        "reason": "Swap the handoff directory", "command": f"rm -rf .pulse/handoffs && ln -s {outside} .pulse/handoffs"
        " && echo swapped"}}]}
    first[1]["usage"] = {"input_tokens": 150_000, "output_tokens": 50}
    scenario["scripts"]["pulsing:summary"] = [first[0], swap, first[1]]
    scenario["scripts"]["pulsing:summary-h1"] = [
        {"content": [{"type": "tool_use", "name": "read_file", "input": {
            "reason": "Resume from the handoff", "path": "{{recall:" + HANDOFF_FILE + "}}"}}]},
        {"content": [{"type": "tool_use", "name": "complete_pulse", "input": {
            "summary": "feat(shapes): total area of shapes", "filesChanged": ["shapes/summary.py"]}}]},
        "Bead complete.",
    ]
    wid, repo = start(client, model, tmp_path, scenario, branch="autarch/hostile-handoff")
    approve_stages(client, wid)
    view = client.wait_awaiting(wid, "review", timeout=120)

    shells = [e["output"] for e in client.events(wid, until="swarm:finished")
              if e["type"] == "turn:tool_completed" and e.get("tool") == "shell"]
    assert any("swapped" in out for out in shells), shells
    handoffs = [e for e in _swarm_events(client, wid) if e["type"] == "worker:handoff"]
    assert [h["bead_id"] for h in handoffs] == ["summary"]
    read = json.dumps([r for r in model.requests if r.script == "summary-h1" and r.body][1].body["messages"][-1])
    assert "schema_version" in read and "ready_to_resume" in read  # the handoff, written in the worktree, was read
    assert sorted(p.name for p in outside.iterdir()) == ["manifest.json"]
    assert stat.S_ISFIFO(os.lstat(outside / "manifest.json").st_mode)
    log = git(repo, "log", "--format=%s", f"main..{view['branch']}").splitlines()
    assert len(log) == len(BEADS)
    assert not any(p.startswith(".pulse/") for p in git(repo, "ls-tree", "-r", "--name-only", view["branch"]).split())
    finish(client, wid)
