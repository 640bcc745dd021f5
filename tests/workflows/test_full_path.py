"""The whole workflow over HTTP and SSE with every service as its own process and the scripted model."""

from __future__ import annotations

from pathlib import Path

from .conftest import Client, demo_scenario, git, make_repo


def test_full_path_commits_one_pulse_per_plan_entry_and_ends_done(client: Client, model, tmp_path: Path) -> None:
    scenario = demo_scenario()
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
    assert [c["kind"] for c in cards["review"]["comments"]] == ["line"]
    assert cards["preflight"]["status"] == "completed"
    runs = cards["pulse_runs"]
    assert [r["id"] for r in runs] == ["pulse-1", "pulse-2"]
    assert all(r["status"] == "succeeded" and r["checkpoint_commit"] and r["diff_artifact_id"] for r in runs)

    names = [e["type"] for e in client.events(wid)]
    workflow_events = [n for n in names if n.split(":")[0] in ("workflow", "preflight", "pulse")
                       and n != "workflow:session_assigned" and n != "workflow:note_taken"
                       and n != "workflow:review_comment_added"]
    assert workflow_events == [
        "workflow:created",
        "workflow:approval_needed", "workflow:stage_changed",
        "workflow:approval_needed", "workflow:stage_changed",
        "workflow:approval_needed", "workflow:stage_changed",
        "preflight:started", "preflight:completed",
        "pulse:started", "pulse:completed", "pulse:started", "pulse:completed",
        "workflow:stage_changed",
        "workflow:approval_needed", "workflow:stage_changed", "workflow:completed",
    ]
    assert names.count("session:started") == 7  # scoping, research, planning, preflight, 2 pulses, review
