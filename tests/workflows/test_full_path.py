"""The whole workflow over HTTP and SSE with every service as its own process and the scripted model."""

from __future__ import annotations

import json
from pathlib import Path

from . import scenarios
from .conftest import (
    PULSE,
    REVIEW_TO_DONE,
    TO_EXECUTION,
    Client,
    assert_replay_equals_live,
    git,
    make_repo,
    workflow_events,
)


def test_full_path_commits_one_pulse_per_plan_entry_and_ends_done(client: Client, model, tmp_path: Path) -> None:
    scenario = scenarios.review_with_every_comment_kind()
    model.use(scenario)
    repo = make_repo(tmp_path / "repo", scenario["files"])
    before = git(repo, "rev-parse", "main")
    wid = client.create(repo, branch="autarch/greet-world")

    for stage in ("scoping", "research", "planning"):
        client.wait_awaiting(wid, stage)
        client.approve(wid)
    view = client.wait_awaiting(wid, "review", timeout=90)
    assert view["branch"] == "autarch/greet-world"
    assert view["pulses_succeeded"] == len(client.artifacts(wid)["pulses"])
    client.approve(wid)
    view = client.wait(wid, lambda v: v["status"] == "done" and v["worktree_path"] is None, "done")

    # The deliverable: the workflow branch, one Conventional Commit per pulse on top of main.
    log = git(repo, "log", "--format=%s", f"main..{view['branch']}").splitlines()
    assert log == ["test(greeter): cover the empty-name greeting",
                   "feat(greeter): greet the world when the name is empty"]
    assert git(repo, "rev-parse", "main").strip() == before.strip()  # the user's branch is untouched
    assert 'name = "world"' in git(repo, "show", f"{view['branch']}:greeter/core.py")
    assert "test_greet_empty_name" in git(repo, "show", f"{view['branch']}:tests/test_core.py")
    assert git(repo, "status", "--porcelain") == ""

    cards = client.artifacts(wid)
    assert cards["scope"]["title"] == "Greet the world on an empty name"
    assert cards["review"]["recommendation"] == "approve"
    assert [c["kind"] for c in cards["review"]["comments"]] == ["line", "file", "review"]
    assert cards["review"]["comments"][1]["file_path"] == "greeter/core.py"
    assert cards["preflight"]["status"] == "completed"
    runs = cards["pulse_runs"]
    assert [r["id"] for r in runs] == ["pulse-1", "pulse-2"]
    assert all(r["status"] == "succeeded" and r["checkpoint_commit"] and r["diff_artifact_id"] for r in runs)

    # Each pulse's diff artifact holds what that pulse changed, and only that.
    for run, path in zip(runs, ("greeter/core.py", "tests/test_core.py"), strict=True):
        diff = client.http.get(f"/api/workflows/{wid}/pulses/{run['id']}/diff").raise_for_status().json()
        assert diff["ref"]["files_changed"] == 1 and diff["ref"]["to_commit"] == run["checkpoint_commit"]
        assert f"diff --git a/{path} b/{path}" in diff["diff"], diff

    # Message isolation (seed 000): pulse-2's requests carry its own kickoff, never pulse-1's conversation.
    pulse_2 = [json.dumps(r.body) for r in model.requests if r.role == "pulsing" and r.body
               and "Your pulse: pulse-2" in json.dumps(r.body)]
    assert pulse_2 and not any("Your pulse: pulse-1" in b or "Read greet before changing it" in b for b in pulse_2)

    assert workflow_events(client, wid) == [*TO_EXECUTION, *PULSE, *PULSE, *REVIEW_TO_DONE]
    names = [e["type"] for e in client.events(wid)]
    assert names.count("session:started") == 7  # scoping, research, planning, preflight, 2 pulses, review
    assert_replay_equals_live(client, wid)
