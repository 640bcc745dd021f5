"""``GET /api/workflows/{id}/diff`` and ``/pulses/{pulse_id}/diff``: what the user approves, from the real
git service, for a workflow the real orchestrator drives through the scripted demo."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.status_codes import HTTP_200_OK

from autarch.services.scripted_model import ScriptedModelServer, load_scenario

from ..conftest import Gateway, git_repo, new_id, scenario

pytestmark = pytest.mark.usefixtures("orchestrator_service")


def numstat(repo: Path, *args: str) -> tuple[set[str], int, int]:
    """Changed paths, insertions and deletions, as git itself counts them."""
    out = subprocess.run(["git", "-C", str(repo), *args, "--numstat", "--format="], check=True,
                         capture_output=True, text=True).stdout
    rows = [line.split("\t") for line in out.splitlines() if line.strip()]
    return {r[2] for r in rows}, sum(int(r[0]) for r in rows), sum(int(r[1]) for r in rows)


async def wait_for(http: httpx.AsyncClient, wf: str, what: str, until: Any, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        view = (await http.get(f"/api/workflows/{wf}")).json()
        if until(view):
            return view
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {view}"
        await asyncio.sleep(0.1)


async def approve_awaiting(http: httpx.AsyncClient, wf: str, stage: str) -> None:
    await wait_for(http, wf, f"{stage} awaiting approval", lambda v: v["stage"] == stage and v["awaiting_approval"])
    r = await http.post(f"/api/workflows/{wf}/approve")
    assert r.status_code == HTTP_200_OK, r.text


async def pulse_runs(http: httpx.AsyncClient, wf: str, until: Any, timeout: float = 30) -> dict[str, dict]:
    """The workflow's pulse runs by id, once ``until(runs)``."""
    deadline = time.monotonic() + timeout
    while True:
        cards = (await http.get(f"/api/workflows/{wf}/artifacts")).json()
        runs = {run["id"]: run for run in cards["pulse_runs"]}
        if until(runs):
            return runs
        assert time.monotonic() < deadline, f"timed out waiting for the pulse runs: {runs}"
        await asyncio.sleep(0.1)


def refused(r: httpx.Response, code: str) -> dict:
    assert (r.status_code, r.json()["code"]) == (404, code), r.text
    return r.json()


async def test_the_workflow_and_pulse_diffs_show_what_the_branch_changes(gateway: Gateway, tmp_path: Path):
    repo = git_repo(tmp_path / "greeter", dict(load_scenario("demo").files))
    async with gateway.client() as http:
        r = await http.post("/api/workflows", json={"title": "Greet the world", "repo": str(repo),
                                                    "request": "Make greet() greet the world when the name is empty",
                                                    "branch": "autarch/diffs"})
        assert r.status_code == 201, r.text
        wf = r.json()["id"]

        # Before execution there is no branch, and no pulse.
        body = refused(await http.get(f"/api/workflows/{wf}/diff"), "no_branch")
        assert body["details"] == {"workflow_id": wf} and "no branch yet" in body["message"]
        refused(await http.get(f"/api/workflows/{wf}/pulses/pulse-1/diff"), "not_found")

        for stage in ("scoping", "research", "planning"):
            await approve_awaiting(http, wf, stage)
        view = await wait_for(http, wf, "review awaiting approval",
                              lambda v: v["stage"] == "review" and v["awaiting_approval"], timeout=120)
        branch = view["branch"]
        assert branch == "autarch/diffs"

        # The branch against main, as git counts it.
        r = await http.get(f"/api/workflows/{wf}/diff")
        assert r.status_code == 200, r.text
        whole = r.json()
        ref = whole["ref"]
        paths, insertions, deletions = numstat(repo, "diff", f"main...{branch}")
        assert (ref["kind"], ref["run_id"], ref["pulse_id"]) == ("workflow", wf, None)
        assert (ref["files_changed"], ref["insertions"], ref["deletions"]) == (len(paths), insertions, deletions)
        assert ref["to_commit"] == subprocess.run(["git", "-C", str(repo), "rev-parse", branch], check=True,
                                                  capture_output=True, text=True).stdout.strip()
        assert whole["offset"] == 0 and whole["next_offset"] is None and len(whole["diff"]) == ref["size"]
        assert {f"diff --git a/{p} b/{p}" for p in paths} <= set(whole["diff"].splitlines())

        # Page by page, the same text.
        pages, offset = [], 0
        while offset is not None:
            page = (await http.get(f"/api/workflows/{wf}/diff", params={"offset": offset, "limit": 100})).json()
            pages.append(page["diff"])
            offset = page["next_offset"]
        assert len(pages) > 1 and "".join(pages) == whole["diff"]

        # Each succeeded pulse: its checkpoint commit against its parent, from the artifact stored at checkpoint.
        runs = (await http.get(f"/api/workflows/{wf}/artifacts")).json()["pulse_runs"]
        assert runs and all(run["status"] == "succeeded" for run in runs)
        total = 0
        for run in runs:
            r = await http.get(f"/api/workflows/{wf}/pulses/{run['id']}/diff")
            assert r.status_code == 200, r.text
            pulse = r.json()["ref"]
            assert (pulse["kind"], pulse["pulse_id"], pulse["artifact_id"], pulse["to_commit"]) == (
                "pulse", run["id"], run["diff_artifact_id"], run["checkpoint_commit"])
            changed, ins, dels = numstat(repo, "show", run["checkpoint_commit"])
            assert (pulse["files_changed"], pulse["insertions"], pulse["deletions"]) == (len(changed), ins, dels)
            total += ins
        assert total == insertions

        # Typed 404s, and bad paging parameters are 400.
        refused(await http.get(f"/api/workflows/{wf}/pulses/pulse-9/diff"), "not_found")
        refused(await http.get(f"/api/workflows/{new_id()}/diff"), "not_found")
        refused(await http.get(f"/api/workflows/{new_id()}/pulses/pulse-1/diff"), "not_found")
        refused(await http.get("/api/workflows/not-a-uuid/diff"), "not_found")
        r = await http.get(f"/api/workflows/{wf}/diff", params={"limit": 0})
        assert (r.status_code, r.json()["code"]) == (400, "bad_request")

        # The branch outlives the workflow's worktree: its diff still answers once the workflow is done.
        await approve_awaiting(http, wf, "review")
        await wait_for(http, wf, "done", lambda v: v["status"] == "done" and v["worktree_path"] is None)
        r = await http.get(f"/api/workflows/{wf}/diff")
        assert r.status_code == 200 and r.json()["ref"]["artifact_id"] == ref["artifact_id"]


def tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "name": name, "input": arguments}]}


def stopped_pulse_scenario() -> dict[str, Any]:
    """The demo, but pulse-1 edits ``greeter/core.py`` and then streams its next reply for minutes."""
    s = scenario()
    slow = {"content": [{"type": "text", "text": "Thinking about the verification " * 40}], "delay_ms": 1000,
            "stop_reason": "end_turn"}
    s["scripts"]["pulsing:pulse-1"] = [
        tool("read_file", reason="Read greet", path="greeter/core.py"),
        tool("edit_file", reason="Greet the world", path="greeter/core.py",
             oldString='    return "Hello, " + name + "!"\n',
             newString='    if not name:\n        name = "world"\n    return "Hello, " + name + "!"\n'),
        slow, "Done.",
    ]
    return s


async def test_a_stopped_pulse_shows_its_recovery_checkpoint_and_a_pulse_not_run_has_no_diff(
        gateway: Gateway, scripted: ScriptedModelServer, tmp_path: Path):
    scripted.use(stopped_pulse_scenario())
    try:
        repo = git_repo(tmp_path / "greeter", dict(load_scenario("demo").files))
        async with gateway.client() as http:
            r = await http.post("/api/workflows", json={"title": "Greet", "repo": str(repo), "request": "greet",
                                                        "branch": "autarch/stopped"})
            wf = r.json()["id"]
            for stage in ("scoping", "research", "planning"):
                await approve_awaiting(http, wf, stage)
            view = await wait_for(http, wf, "pulse-1 running", lambda v: v["current_pulse"] == "pulse-1")
            edited = Path(view["worktree_path"]) / "greeter" / "core.py"
            await wait_for(http, wf, "pulse-1's edit", lambda _: 'name = "world"' in edited.read_text())

            # Mid-pulse: the branch exists but has no commit of its own yet.
            r = await http.get(f"/api/workflows/{wf}/diff")
            assert r.status_code == 200 and r.json()["ref"]["files_changed"] == 0 and r.json()["diff"] == ""
            body = refused(await http.get(f"/api/workflows/{wf}/pulses/pulse-1/diff"), "no_diff")
            assert body["details"]["status"] == "running"

            assert (await http.post(f"/api/workflows/{wf}/stop")).status_code == 200
            runs = await pulse_runs(http, wf, until=lambda runs: runs["pulse-1"]["status"] != "running")
            stopped = runs["pulse-1"]
            assert stopped["status"] == "stopped" and stopped["is_recovery_checkpoint"]
            assert stopped["diff_artifact_id"] is None

            # The recovery checkpoint's diff is computed on demand: the edit, as git shows it.
            r = await http.get(f"/api/workflows/{wf}/pulses/pulse-1/diff")
            assert r.status_code == 200, r.text
            ref, diff = r.json()["ref"], r.json()["diff"]
            assert (ref["kind"], ref["to_commit"]) == ("pulse", stopped["checkpoint_commit"])
            assert (ref["files_changed"], ref["insertions"], ref["deletions"]) == (1, 2, 0)
            assert '+        name = "world"' in diff.splitlines()
            assert numstat(repo, "show", stopped["checkpoint_commit"]) == ({"greeter/core.py"}, 2, 0)

            body = refused(await http.get(f"/api/workflows/{wf}/pulses/pulse-2/diff"), "no_diff")
            assert body["details"]["status"] == "proposed"
            # Nothing reached the workflow branch.
            assert (await http.get(f"/api/workflows/{wf}/diff")).json()["ref"]["files_changed"] == 0
    finally:
        scripted.use(scenario())
