"""A review that finds problems sends the work back: fix pulses commit on the same branch, the review runs again.

Every service as its own process with the scripted model; the change request goes through the CLI, as a user
sends it. The package's system allows one fix round per workflow (``AUTARCH_REVIEW_FIX_ROUNDS=1``).
"""

from __future__ import annotations

import json
from pathlib import Path

from . import scenarios
from .conftest import (
    PULSE,
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

FEEDBACK = "Fix both comments and keep the signature of greet as it is."
PLANNED = ["test(greeter): cover the empty-name greeting", "feat(greeter): greet the world when the name is empty"]
FIXES = ["test(greeter): say what the empty-name test covers", "fix(greeter): default an empty name in one line"]


def test_a_review_sends_its_comments_back_and_the_fixes_pass_the_next_review(
        client: Client, model, tmp_path: Path) -> None:
    wid, repo = start(client, model, tmp_path, scenarios.review_sends_comments_back(), branch="autarch/fixed")
    approve_stages(client, wid)
    client.wait_awaiting(wid, "review", timeout=90)
    first = client.artifacts(wid)["review"]
    assert first["recommendation"] == "reject"
    core, test = first["comments"]
    assert (core["file_path"], core["start_line"], test["file_path"]) == ("greeter/core.py", 3, "tests/test_core.py")

    # Sent back from the command line, as a user does it.
    sent = client.system.cli("workflow", "request-changes", wid, *FEEDBACK.split(), "--fix")
    assert sent.returncode == 0, sent.stderr
    assert "stage execution, active" in sent.stdout

    view = client.wait_awaiting(wid, "review", timeout=120)
    assert (view["fix_rounds"], view["pulses_succeeded"], view["branch"]) == (1, 2, "autarch/fixed")
    cards = client.artifacts(wid)
    second = cards["review"]
    assert second["recommendation"] == "approve" and second["summary"].startswith("Both comments sent back")
    assert [c["severity"] for c in second["comments"]] == ["Low"]  # a new card: the first one's are not in it
    [fix_round] = cards["fix_rounds"]
    assert (fix_round["round"], fix_round["feedback"]) == (1, FEEDBACK)
    assert fix_round["comment_ids"] == [core["comment_id"], test["comment_id"]]
    assert [(p["pulse_id"], p["file_path"], p["comment_ids"]) for p in fix_round["pulses"]] == [
        ("fix-1-1", "greeter/core.py", [core["comment_id"]]), ("fix-1-2", "tests/test_core.py", [test["comment_id"]])]
    assert fix_round["review"] == first  # the card that was sent back, kept
    runs = cards["pulse_runs"]
    assert [(r["id"], r["status"], r["fix_round"]) for r in runs] == [
        ("pulse-1", "succeeded", None), ("pulse-2", "succeeded", None),
        ("fix-1-1", "succeeded", 1), ("fix-1-2", "succeeded", 1)]

    # The refusals change nothing: a comment of the card sent back is not on this one, and one round is the limit.
    stale = client.post(wid, "request-changes", {"feedback": "again", "fix": [core["comment_id"]]})
    assert stale.status_code == 409 and stale.json()["code"] == "unknown_comments", stale.text
    assert stale.json()["details"]["comment_ids"] == [core["comment_id"]]
    exhausted = client.post(wid, "request-changes", {"feedback": "again", "fix": True})
    assert exhausted.status_code == 409 and exhausted.json()["code"] == "fix_rounds_exhausted", exhausted.text
    # (The version is no measure: the review's turn outcome may be recorded meanwhile.)
    assert client.artifacts(wid) == cards and client.get(wid)["status"] == "awaiting_approval"

    view = finish(client, wid)
    # The branch holds the planned pulses' commits, then one commit per fix pulse, each touching its own file.
    assert branch_log(repo, view["branch"]) == [*FIXES, *PLANNED]
    assert 'name = name or "world"' in git(repo, "show", f"{view['branch']}:greeter/core.py")
    assert '"""An empty name greets the world."""' in git(repo, "show", f"{view['branch']}:tests/test_core.py")
    for run, path in zip(runs[2:], ("greeter/core.py", "tests/test_core.py"), strict=True):
        diff = client.http.get(f"/api/workflows/{wid}/pulses/{run['id']}/diff").raise_for_status().json()
        assert diff["ref"]["files_changed"] == 1 and f"diff --git a/{path} b/{path}" in diff["diff"]

    # Each fix pulse was told its own comment and the feedback; the review, the fix commits and its comments.
    bodies = [(r.role, json.dumps(r.body)) for r in model.requests if r.body]
    fix_1 = [b for role, b in bodies if role == "pulsing" and "Your pulse: fix-1-1" in b]
    assert fix_1 and scenarios.REVIEW_CORE_COMMENT in fix_1[0] and FEEDBACK in fix_1[0]
    assert scenarios.REVIEW_TEST_COMMENT not in fix_1[0] and "- fix-1-2: tests/test_core.py" in fix_1[0]
    again = [b for role, b in bodies if role == "review" and "fix round 1" in b]
    assert again and all(text in again[-1] for text in (
        "fix-1-1 (commit", FIXES[1], "fix-1-2 (commit", FIXES[0], scenarios.REVIEW_CORE_COMMENT,
        scenarios.REVIEW_TEST_COMMENT, FEEDBACK))

    events = client.events(wid)
    changes = [e for e in events if e["type"] == "workflow:changes_requested"]
    assert [(e["stage"], e["feedback"], e["fix"]) for e in changes] == [("review", FEEDBACK, True)]
    [opened] = [e for e in events if e["type"] == "workflow:fix_round_opened"]
    assert opened["pulses"] == fix_round["pulses"] and opened["comment_ids"] == fix_round["comment_ids"]
    assert [e.get("fix_round") for e in events if e["type"] == "pulse:started"] == [None, None, 1, 1]
    stages = [(e["from_stage"], e["to_stage"]) for e in events if e["type"] == "workflow:stage_changed"]
    assert stages[-4:] == [("execution", "review"), ("review", "execution"), ("execution", "review"),
                           ("review", "done")]
    assert workflow_events(client, wid) == [
        *TO_EXECUTION, *PULSE, *PULSE, "workflow:stage_changed", "workflow:approval_needed",
        "workflow:changes_requested", "workflow:fix_round_opened", "workflow:stage_changed", *PULSE, *PULSE,
        "workflow:stage_changed", "workflow:approval_needed", "workflow:stage_changed", "workflow:completed"]
    # One review session throughout: 4 stage agents, 2 planned pulses, 2 fix pulses, 1 review.
    assert [e["type"] for e in events].count("session:started") == 9

    watched = client.system.cli("watch", wid, "--from-start")
    assert watched.returncode == 0, watched.stderr
    assert "review sent back (fix round 1): 2 comments → 2 fix pulses" in watched.stdout
    assert "[fix 1/2 of round 1]" in watched.stdout and "[2/2 fixes done]" in watched.stdout
    assert_replay_equals_live(client, wid)
