"""Recovery and guard paths end to end: resume after a model error mid-pulse, preflight's "must not modify
tracked files" rule, answers checked against the questions, and every session closed when its step is over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import recovery_scenarios
from .conftest import (
    PULSE,
    REVIEW_TO_DONE,
    TO_EXECUTION,
    Client,
    approve_stages,
    assert_replay_equals_live,
    git,
    start,
    workflow_events,
)

FEAT = "feat(greeter): greet the world when the name is empty"
TEST = "test(greeter): cover the empty-name greeting"


def session_of(client: Client, session_id: str) -> dict[str, Any]:
    return client.http.get(f"/api/sessions/{session_id}").raise_for_status().json()


def wait_closed(client: Client, wid: str, steps: list[str]) -> dict[str, str]:
    """Wait until the sessions of ``steps`` are closed; their session ids by step."""
    sessions = {step: client.get(wid)["sessions"][step] for step in steps}
    client.wait(wid, lambda _: all(session_of(client, s)["status"] == "closed" for s in sessions.values()),
                f"sessions of {steps} closed")
    return sessions


def sessions_completed(client: Client, wid: str, *, count: int) -> dict[str, str]:
    """The first ``count`` ``session:completed`` events of the workflow over SSE: reason by session id."""
    events = client.events(wid, until=lambda found: sum(e["type"] == "session:completed" for e in found) == count)
    return {e["session_id"]: e["reason"] for e in events if e["type"] == "session:completed"}


def test_a_model_error_mid_pulse_halts_and_resume_continues_the_same_pulse(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, recovery_scenarios.pulse_model_error_mid_pulse())
    approve_stages(client, wid, "scoping", "research", "planning")
    view = client.wait_halted(wid, "error", timeout=90)
    assert view["halt"]["pulse_id"] == "pulse-1" and view["current_pulse"] == "pulse-1"
    assert "400" in view["halt"]["message"]
    worktree = Path(view["worktree_path"])
    assert 'name = "world"' in (worktree / "greeter/core.py").read_text()  # the edit before the error stays
    pulse_session = view["sessions"]["pulse:pulse-1"]
    assert session_of(client, pulse_session)["turns"][-1]["outcome"]["kind"] == "error"

    reply = client.post(wid, "resume", {"message": "The API is back; carry on."})
    assert reply.status_code == 200, reply.text
    client.wait_awaiting(wid, "review", timeout=90)
    client.approve(wid)
    view = client.wait(wid, lambda v: v["status"] == "done" and v["worktree_path"] is None, "done")

    runs = client.artifacts(wid)["pulse_runs"]
    assert [(r["id"], r["attempt"], r["status"]) for r in runs] == [("pulse-1", 1, "succeeded"),
                                                                    ("pulse-2", 1, "succeeded")]
    # The same session went on: the resume message was its next turn, and it finished the pulse.
    turns = session_of(client, pulse_session)["turns"]
    assert [t["outcome"]["kind"] for t in turns] == ["error", "block"]
    assert "The API is back; carry on." in turns[1]["user_text"]
    assert git(repo, "log", "--format=%s", f"main..{view['branch']}").splitlines() == [TEST, FEAT]
    # Each run names its worktree and the kickoff turn that started it.
    assert runs[0]["worktree_path"] == str(worktree)
    assert runs[0]["initiating_message_id"] == turns[0]["turn_id"]

    # Every session of the workflow was closed as its step ended, each with session:completed.
    steps = ["scoping", "research", "planning", "preflight", "pulse:pulse-1", "pulse:pulse-2", "review"]
    sessions = wait_closed(client, wid, steps)
    completed = sessions_completed(client, wid, count=len(steps))
    assert set(completed) == set(sessions.values())
    assert completed[sessions["pulse:pulse-1"]] == "pulse pulse-1 succeeded"
    assert completed[sessions["scoping"]] == "the scoping card was approved"
    assert workflow_events(client, wid) == [
        *TO_EXECUTION, "pulse:started", "workflow:error", "workflow:halted", "workflow:resumed", "pulse:completed",
        *PULSE, *REVIEW_TO_DONE]
    assert_replay_equals_live(client, wid)


def test_a_preflight_that_modifies_a_tracked_file_abandons_the_workflow(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, recovery_scenarios.preflight_edits_a_tracked_file())
    readme = (repo / "README.md").read_text()
    approve_stages(client, wid, "scoping", "research", "planning")
    view = client.wait(wid, lambda v: v["status"] == "abandoned" and v["worktree_path"] is None, "abandoned",
                       timeout=90)
    abandoned = client.events(wid, until="workflow:abandoned")[-1]
    assert "modified tracked files" in abandoned["reason"] and "README.md" in abandoned["reason"]
    preflight = client.artifacts(wid)["preflight"]
    assert preflight["status"] == "failed" and preflight["build_success"] is True
    assert "README.md" in preflight["error"]
    # The worktree is gone, no pulse ran, and the user's checkout is as it was.
    assert git(repo, "worktree", "list").count("\n") == 1
    assert git(repo, "log", "--format=%s", f"main..{view['branch']}") == ""
    assert (repo / "README.md").read_text() == readme and git(repo, "status", "--porcelain") == ""
    assert client.post(wid, "resume").json()["code"] == "finished"
    wait_closed(client, wid, ["preflight"])
    assert workflow_events(client, wid, until="workflow:abandoned") == [*TO_EXECUTION, "workflow:abandoned"]
    assert_replay_equals_live(client, wid)


def test_answers_are_checked_against_the_questions(client: Client, model, tmp_path: Path) -> None:
    wid, _ = start(client, model, tmp_path, recovery_scenarios.scoping_asks_two_questions())
    view = client.wait_halted(wid, "questions")
    version = view["version"]
    for answers, field in ((["Hello, world!"], "answers"), (["Hello, you!", "no"], "answers[0]"),
                           (["Hello, world!", "  "], "answers[1]")):
        reply = client.post(wid, "answers", {"answers": answers})
        assert reply.status_code == 400, reply.text
        body = reply.json()
        # A blank answer is refused at the door (the body's visible-text rule, which names where it failed);
        # the rest by the orchestrator against the questions.
        where = body["details"].get("field") or json.dumps(body["details"].get("errors"))
        assert body["code"] == "bad_request" and field in where, body
    view = client.get(wid)
    assert view["status"] == "halted" and view["version"] == version  # nothing recorded

    reply = client.post(wid, "answers", {"answers": ["Hello, world!", "Nothing else."]})
    assert reply.status_code == 200, reply.text
    client.wait_awaiting(wid, "scoping")
    bodies = [json.dumps(r.body) for r in model.requests if r.role == "scoping" and r.body]
    assert any("A: Nothing else." in b for b in bodies)
    assert_replay_equals_live(client, wid)
