"""Every other workflow path, end to end: quick, change requests, preflight failure, failed and stopped pulses,
unresolved issues, extensions and questions. Each asserts the git history, the cards and the events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import scenarios
from .conftest import (
    PULSE,
    REVIEW_TO_DONE,
    TO_EXECUTION,
    Client,
    approve_stages,
    assert_replay_equals_live,
    branch_log,
    finish,
    git,
    start,
    workflow_events,
)

FEAT = "feat(greeter): greet the world when the name is empty"
TEST = "test(greeter): cover the empty-name greeting"


def test_quick_path_runs_one_pulse_from_the_scope(client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, scenarios.quick_scope())
    view = client.wait_awaiting(wid, "scoping")
    client.approve(wid)  # the scope recommends quick; approval without a path takes it
    view = finish(client, wid)
    assert view["path"] == "quick"
    assert branch_log(repo, view["branch"]) == [FEAT]
    cards = client.artifacts(wid)
    assert cards["research"] is None and cards["plan"] is None
    assert [r["id"] for r in cards["pulse_runs"]] == ["pulse-1"]
    stages = [(e["from_stage"], e["to_stage"]) for e in client.events(wid) if e["type"] == "workflow:stage_changed"]
    assert stages == [("scoping", "execution"), ("execution", "review"), ("review", "done")]
    assert workflow_events(client, wid) == ["workflow:created", "workflow:approval_needed", "workflow:stage_changed",
                                            "preflight:started", "preflight:completed", *PULSE, *REVIEW_TO_DONE]
    assert_replay_equals_live(client, wid)


def test_request_changes_at_every_gate_reaches_the_agent_and_comes_back_revised(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, scenarios.revising_every_card())
    for stage in ("scoping", "research", "planning", "review"):
        client.wait_awaiting(wid, stage, timeout=90)
        before = client.artifacts(wid)
        reply = client.post(wid, "request-changes", {"feedback": f"Please revise the {stage} card."})
        assert reply.status_code == 200 and reply.json()["last_feedback"] == f"Please revise the {stage} card."
        revised = client.wait_awaiting(wid, stage)
        assert revised["stage"] == stage
        after = client.artifacts(wid)
        card = {"scoping": "scope", "research": "research", "planning": "plan", "review": "review"}[stage]
        assert after[card] != before[card]
        client.approve(wid)
    view = client.wait(wid, lambda v: v["status"] == "done", "done")
    cards = client.artifacts(wid)
    assert cards["scope"]["title"] == "Greet the world on an empty or missing name"
    assert cards["plan"]["approachSummary"] == "Revised: change greet, then test it."
    assert cards["review"]["summary"].startswith("Revised:")
    assert [f["stage"] for f in cards["feedback"]] == ["scoping", "research", "planning", "review"]
    # The feedback reached each agent as its next user message.
    sent = [json.dumps(r.body) for r in model.requests if r.body]
    for stage in ("scoping", "research", "planning", "review"):
        assert any(f"Please revise the {stage} card." in body for body in sent), stage
    assert branch_log(repo, view["branch"]) == [TEST, FEAT]
    again = ["workflow:approval_needed", "workflow:changes_requested", "workflow:approval_needed"]
    assert workflow_events(client, wid) == [
        "workflow:created", *[*again, "workflow:stage_changed"] * 3, "preflight:started", "preflight:completed",
        *PULSE, *PULSE, "workflow:stage_changed", *again, "workflow:stage_changed", "workflow:completed"]
    assert_replay_equals_live(client, wid)


def test_preflight_failure_abandons_the_workflow_and_removes_its_worktree(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, scenarios.failing_preflight())
    approve_stages(client, wid)
    view = client.wait(wid, lambda v: v["status"] == "abandoned" and v["worktree_path"] is None, "abandoned")
    assert "preflight failed" in client.events(wid, until="workflow:abandoned")[-1]["reason"]
    cards = client.artifacts(wid)
    assert cards["preflight"]["status"] == "failed" and cards["preflight"]["build_success"] is False
    assert all(r["status"] == "proposed" for r in cards["pulse_runs"])
    assert branch_log(repo, view["branch"]) == []
    assert git(repo, "worktree", "list").count("\n") == 1  # only the user's checkout
    for action in ("approve", "resume", "stop"):
        assert client.post(wid, action).status_code == 409
    assert workflow_events(client, wid, until="workflow:abandoned") == [*TO_EXECUTION, "workflow:abandoned"]
    assert_replay_equals_live(client, wid)


def test_preflight_timeout_abandons_the_workflow(client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, scenarios.hanging_preflight())
    approve_stages(client, wid)
    view = client.wait(wid, lambda v: v["status"] == "abandoned" and v["worktree_path"] is None, "abandoned",
                       timeout=60)
    cards = client.artifacts(wid)
    assert cards["preflight"]["status"] == "failed" and "timed out after 6s" in cards["preflight"]["error"]
    assert branch_log(repo, view["branch"]) == []
    session = client.http.get(f"/api/sessions/{view['sessions']['preflight']}").json()
    assert session["status"] == "closed" and session["turns"][0]["outcome"]["kind"] == "cancelled"
    assert workflow_events(client, wid, until="workflow:abandoned") == [*TO_EXECUTION, "workflow:abandoned"]
    assert_replay_equals_live(client, wid)


def fail_pulse_1_then_retry(client: Client, model, tmp_path: Path, scenario: dict[str, Any], why: str,
                            **resume: Any) -> tuple[str, dict[str, Any]]:
    """pulse-1 fails (``why`` in the halt); its edit is kept on the pulse branch as a recovery checkpoint; resume
    runs it again as attempt 2 and the workflow ends done with both commits. Returns the workflow and pulse-1's run."""
    wid, repo = start(client, model, tmp_path, scenario)
    approve_stages(client, wid)
    view = client.wait_halted(wid, "pulse_failed", timeout=90)
    assert why in view["halt"]["message"]
    run = client.artifacts(wid)["pulse_runs"][0]
    assert run["status"] == "failed" and run["is_recovery_checkpoint"] and run["checkpoint_commit"]
    # The work in progress is kept on the pulse branch; the workflow branch has nothing yet.
    assert branch_log(repo, view["branch"]) == []
    assert 'name = "world"' in git(repo, "show", f"{run['pulse_branch']}:greeter/core.py")
    assert client.post(wid, "extension/approve").json()["code"] == "wrong_halt"

    assert client.post(wid, "resume", resume or None).status_code == 200
    view = finish(client, wid)
    runs = client.artifacts(wid)["pulse_runs"]
    assert [(r["id"], r["status"]) for r in runs] == [("pulse-1", "failed"), ("pulse-1-a2", "succeeded"),
                                                     ("pulse-2", "succeeded")]
    assert branch_log(repo, view["branch"]) == [TEST, FEAT]
    assert_replay_equals_live(client, wid)
    return wid, run


def test_iteration_limit_fails_the_pulse_with_a_recovery_checkpoint_then_resume_retries_it(
        client: Client, model, tmp_path: Path) -> None:
    wid, run = fail_pulse_1_then_retry(client, model, tmp_path, scenarios.pulse_hits_the_iteration_limit(),
                                       "iteration limit", message="Try again from a clean tree.")
    # The runner refused complete_pulse at every step after the failed check, until its step limit (10 here).
    assert run["completion_rejections"] == 7
    assert workflow_events(client, wid) == [
        *TO_EXECUTION, "pulse:started", *["pulse:completion_rejected"] * 7, "pulse:completed",
        "workflow:halted", "workflow:resumed", *PULSE, *PULSE, *REVIEW_TO_DONE]


def test_unresolved_issues_are_revealed_after_rejections_and_halt_until_resumed(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, scenarios.pulse_with_unresolved_issues())
    approve_stages(client, wid)
    view = client.wait_halted(wid, "unresolved_issues", timeout=90)
    assert view["halt"]["details"]["unresolved_issues"][0]["issue"] == "The network check fails"
    # pulse-1 is committed; pulse-2 waits for a human.
    assert branch_log(repo, view["branch"]) == [FEAT]
    rejected = [e for e in client.events(wid, until="workflow:halted") if e["type"] == "pulse:completion_rejected"]
    assert [e["escape_hatch"] for e in rejected] == [False, True]
    run = client.artifacts(wid)["pulse_runs"][0]
    assert run["status"] == "succeeded" and run["has_unresolved_issues"]

    assert client.post(wid, "resume").status_code == 200
    view = finish(client, wid)
    assert branch_log(repo, view["branch"]) == [TEST, FEAT]
    assert workflow_events(client, wid) == [
        *TO_EXECUTION, "pulse:started", "pulse:completion_rejected", "pulse:completion_rejected", "pulse:completed",
        "workflow:halted", "workflow:resumed", *PULSE, *REVIEW_TO_DONE]
    assert_replay_equals_live(client, wid)


def test_extension_request_waits_for_approval_then_the_pulse_continues(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, scenarios.pulse_asks_for_an_extension())
    approve_stages(client, wid)
    view = client.wait_halted(wid, "extension_requested", timeout=90)
    assert view["halt"]["details"]["remaining"] == ["Edit greet", "Verify it"]
    assert client.post(wid, "resume").json()["code"] == "wrong_halt"
    reply = client.post(wid, "extension/approve", {"message": "Go ahead."})
    assert reply.status_code == 200 and reply.json()["status"] == "active"
    view = finish(client, wid)
    runs = client.artifacts(wid)["pulse_runs"]
    assert runs[0]["extensions"] == 1 and runs[0]["status"] == "succeeded"
    assert branch_log(repo, view["branch"]) == [TEST, FEAT]
    assert workflow_events(client, wid) == [
        *TO_EXECUTION, "pulse:started", "workflow:halted", "workflow:resumed", "pulse:completed", *PULSE,
        *REVIEW_TO_DONE]
    assert_replay_equals_live(client, wid)


def test_user_stop_makes_a_recovery_checkpoint_and_resume_runs_the_pulse_again(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, scenarios.slow_pulse())
    approve_stages(client, wid)
    client.wait(wid, lambda v: v["current_pulse"] == "pulse-1", "pulse-1 running", timeout=60)
    worktree = Path(client.get(wid)["worktree_path"])
    client.wait(wid, lambda v: 'name = "world"' in (worktree / "greeter/core.py").read_text(), "the edit")
    reply = client.post(wid, "stop", {"reason": "wrong approach"})
    assert reply.status_code == 200, reply.text
    view = client.wait(wid, lambda v: v["status"] == "halted" and v["current_pulse"] is None, "stopped pulse")
    assert view["halt"]["reason"] == "stopped"
    run = client.artifacts(wid)["pulse_runs"][0]
    assert run["status"] == "stopped" and run["is_recovery_checkpoint"]
    assert 'name = "world"' in git(repo, "show", f"{run['pulse_branch']}:greeter/core.py")
    assert client.post(wid, "stop").json()["code"] == "not_running"

    assert client.post(wid, "resume").status_code == 200
    view = finish(client, wid)
    assert branch_log(repo, view["branch"]) == [TEST, FEAT]
    # The stop halts the workflow first, then the stopped pulse ends with its recovery checkpoint.
    assert workflow_events(client, wid) == [
        *TO_EXECUTION, "pulse:started", "workflow:halted", "pulse:completed", "workflow:resumed", *PULSE, *PULSE,
        *REVIEW_TO_DONE]
    assert_replay_equals_live(client, wid)


def test_questions_halt_scoping_until_answered(client: Client, model, tmp_path: Path) -> None:
    wid, _ = start(client, model, tmp_path, scenarios.scoping_asks_questions())
    view = client.wait_halted(wid, "questions")
    assert view["halt"]["details"]["questions"][0]["prompt"] == "What should greet('') return?"
    assert client.post(wid, "approve").json()["code"] == "not_awaiting_approval"
    reply = client.post(wid, "answers", {"answers": ["Hello, world!"]})
    assert reply.status_code == 200, reply.text
    client.wait_awaiting(wid, "scoping")
    bodies = [json.dumps(r.body) for r in model.requests if r.role == "scoping" and r.body]
    assert any("A: Hello, world!" in b for b in bodies)
    assert client.post(wid, "answers", {"answers": ["again"]}).json()["code"] == "not_halted"
    assert workflow_events(client, wid, until="workflow:approval_needed") == [
        "workflow:created", "workflow:halted", "workflow:resumed", "workflow:approval_needed"]
    assert_replay_equals_live(client, wid)


def test_a_pulse_that_never_completes_fails_with_a_recovery_checkpoint_then_resume_retries_it(
        client: Client, model, tmp_path: Path) -> None:
    wid, run = fail_pulse_1_then_retry(client, model, tmp_path, scenarios.pulse_never_completes(),
                                       "ended its turn without complete_pulse")
    assert "without complete_pulse" in run["failure_reason"] and run["completion_rejections"] == 0
    assert workflow_events(client, wid) == [
        *TO_EXECUTION, *PULSE, "workflow:halted", "workflow:resumed", *PULSE, *PULSE, *REVIEW_TO_DONE]
