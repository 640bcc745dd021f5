"""Forking a workflow at one of its events (issue 36), through every service with the scripted model.

The demo workflow is forked at its plan approval: the fork asks for a different plan, gets it and runs it to
``done`` on its own branch, while the original stays exactly as it was. A fork of the fork, made while its
review awaited approval, starts from the commit the fork's branch had then.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

from .conftest import Client, assert_replay_equals_live, branch_log, finish, git, start
from .scenarios import base

ONE_PULSE_PLAN = "One pulse is enough: make the change and its test together."


def forked_plan_scenario() -> dict[str, Any]:
    """The demo, plus the plan a fork's planning agent (script ``fork``) makes: one pulse instead of two."""
    s = base()
    plan = copy.deepcopy(s["scripts"]["plan"])
    submit = plan[1]["content"][-1]["input"]
    submit["approachSummary"] = "Default an empty name to 'world' in greet, in one pulse."
    submit["pulses"] = [{**submit["pulses"][0], "title": "Greet the world on an empty name, in one pulse"}]
    s["scripts"]["plan:fork"] = plan
    return s


def fork(client: Client, workflow_id: str, **body: Any) -> Any:
    return client.http.post(f"/api/workflows/{workflow_id}/fork", json=body)


def test_a_demo_forked_at_its_plan_approval_reaches_done_with_another_plan_and_the_original_is_untouched(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, forked_plan_scenario())
    for stage in ("scoping", "research"):
        client.wait_awaiting(wid, stage)
        client.approve(wid)
    at = client.wait_awaiting(wid, "planning")["version"]  # an event at which the plan awaits approval
    client.approve(wid)
    original = finish(client, wid)
    original_log = branch_log(repo, original["branch"])
    original_head = git(repo, "rev-parse", original["branch"]).strip()
    original_cards = client.artifacts(wid)
    assert len(original_cards["plan"]["pulses"]) == 2

    reply = fork(client, wid, at=at, script="fork")
    assert reply.status_code == 201, reply.text
    forked = reply.json()
    fid = forked["id"]
    assert fid != wid
    assert (forked["forked_from"], forked["forked_at"]) == (wid, at)
    assert (forked["stage"], forked["status"]) == ("planning", "awaiting_approval")
    assert forked["version"] == at + 1  # the original's first ``at`` events, then its own ``Forked``
    assert client.artifacts(fid)["plan"] == client.artifacts(wid)["plan"]  # the plan it was forked at

    # The fork carries on live: the plan the original approved is sent back, and a different one comes.
    reply = client.post(fid, "request-changes", {"feedback": ONE_PULSE_PLAN})
    assert reply.status_code == 200, reply.text
    client.wait_awaiting(fid, "planning")
    new_plan = client.artifacts(fid)["plan"]
    assert [p["title"] for p in new_plan["pulses"]] == ["Greet the world on an empty name, in one pulse"]
    plan_requests = [json.dumps(r.body) for r in model.requests if r.role == "plan" and r.body
                     and ONE_PULSE_PLAN in json.dumps(r.body)]
    assert plan_requests, "the fork's planning agent was never told the change request"
    client.approve(fid)
    review_at = client.wait_awaiting(fid, "review", timeout=90)["version"]
    client.approve(fid)
    done = client.wait(fid, lambda v: v["status"] == "done" and v["worktree_path"] is None, "fork done")

    # The fork's branch is its own: one commit from its one-pulse plan, on the same base.
    assert done["branch"] == f"autarch/{fid[:8]}"
    assert branch_log(repo, done["branch"]) == ["feat(greeter): greet the world when the name is empty"]
    assert 'name = "world"' in git(repo, "show", f"{done['branch']}:greeter/core.py")
    # The original is untouched: same view, same cards, same branch and head.
    assert client.get(wid) == original
    assert client.artifacts(wid) == original_cards
    assert branch_log(repo, original["branch"]) == original_log
    assert git(repo, "rev-parse", original["branch"]).strip() == original_head
    # The fork's history starts with the original's: its first events are the original's, by type.
    fork_types = [e["type"] for e in client.events(fid)]
    original_types = [e["type"] for e in client.events(wid)
                      if e["type"].startswith(("workflow:", "preflight:", "pulse:"))]
    assert fork_types[0] == "workflow:created"
    assert fork_types[:3] == original_types[:3]
    assert_replay_equals_live(client, fid)

    # A fork of the fork, at the event where its review awaited approval: its branch is cut from the commit
    # the fork's branch had then (read from the fork's recorded pulse commits), through the CLI.
    cli = client.system.cli("workflow", "fork", fid, "--at", str(review_at), "--json")
    assert cli.returncode == 0, cli.stderr
    second = json.loads(cli.stdout)
    assert (second["forked_from"], second["forked_at"]) == (fid, review_at)
    assert (second["stage"], second["status"]) == ("review", "awaiting_approval")
    sid = second["id"]
    ready = client.wait(sid, lambda v: v["branch"] is not None, "the second fork's branch")
    assert git(repo, "rev-parse", ready["branch"]).strip() == git(repo, "rev-parse", done["branch"]).strip()
    client.approve(sid)
    client.wait(sid, lambda v: v["status"] == "done" and v["worktree_path"] is None, "second fork done")
    assert client.get(fid)["version"] == done["version"]  # forking the fork left it alone too


def test_a_bad_fork_is_refused_with_a_typed_error_and_records_nothing(client: Client, model,
                                                                        tmp_path: Path) -> None:
    wid, _ = start(client, model, tmp_path, base())
    view = client.wait_awaiting(wid, "scoping")
    listed = client.http.get("/api/workflows").json()["total"]

    unknown = fork(client, str(uuid.uuid4()), at=1)
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    assert fork(client, "not-a-uuid", at=1).status_code == 404
    past = fork(client, wid, at=10_000)
    assert past.status_code == 400, past.text
    assert past.json()["code"] == "event_out_of_range"
    assert past.json()["details"]["at"] == 10_000 and past.json()["details"]["events_total"] >= view["version"]
    for body in ({"at": 0}, {}, {"at": 1, "color": "red"}, {"at": 1, "branch": "bad..name"}):
        reply = fork(client, wid, **body)
        assert reply.status_code == 400 and reply.json()["code"] == "bad_request", (body, reply.text)
    taken = fork(client, wid, at=1, fork_id=wid)  # the id of a workflow that is not this fork
    assert taken.status_code == 409 and taken.json()["code"] == "conflict"

    assert client.http.get("/api/workflows").json()["total"] == listed
    assert client.get(wid)["version"] >= view["version"]
    assert client.get(wid)["forked_from"] is None

    # A retried fork (same fork_id) answers the one fork it made.
    fork_id = str(uuid.uuid4())
    first, again = fork(client, wid, at=1, fork_id=fork_id), fork(client, wid, at=1, fork_id=fork_id)
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == fork_id and again.json()["forked_at"] == 1
    assert client.http.get("/api/workflows").json()["total"] == listed + 1
