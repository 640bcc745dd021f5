"""Record → replay of a swarm epic: a three-bead epic recorded (`autarch beads record`), replayed offline from the
recording by `autarch model serve-scripted` on a fresh system to the same branch files, bead commits and events,
bead by bead; and a replay whose worker reads another file, with the first differing event named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autarch.services.scripted_model import ScriptedModelServer
from autarch.services.scripted_model.scenario import load_scenario
from tests.system import System
from tests.workflows.conftest import Client, approve_stages, finish, git, make_repo, start
from tests.workflows.test_record_replay import replaying

from .conftest import SERVICES, swarm_scenario

pytestmark = pytest.mark.slow

BEADS = ("base", "square", "units")
"""square builds on base; units is independent, so two workers run side by side from the start."""


def small_epic() -> dict[str, Any]:
    """The bundled swarm scenario cut to three beads; the units worker reads NOTES.md before it writes."""
    scenario = swarm_scenario()
    plan = scenario["scripts"]["plan"][1]["content"][1]["input"]
    plan["pulses"] = [p for p in plan["pulses"] if p["id"] in BEADS]
    scenario["scripts"] = {key: steps for key, steps in scenario["scripts"].items()
                           if not key.startswith("pulsing:") or key.split(":", 1)[1] in BEADS}
    scenario["scripts"]["pulsing:units"][0]["content"].append(
        {"type": "tool_use", "name": "read_file", "input": {"reason": "Read the notes", "path": "NOTES.md"}})
    return scenario


@pytest.fixture(scope="module")
def recorded(system: System, model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[Path, str, Path]]:
    """The small epic run to its end and recorded: (the recording, the epic id, its repository)."""
    tmp = tmp_path_factory.mktemp("recorded")
    client = Client(system)
    try:
        wid, repo = start(client, model, tmp, small_epic(), branch="autarch/shapes-rec")
        approve_stages(client, wid)
        finish(client, wid)
        run = tmp / "run.json"
        done = system.cli("beads", "record", wid, "-o", str(run))
        assert done.returncode == 0, done.stderr
        yield run, wid, repo
    finally:
        client.http.close()


def bead_events(client: Client, wid: str) -> dict[str, list[str]]:
    """Each bead's events (bead:*, lease:*) in stream order: workers interleave, a bead's own events do not."""
    found: dict[str, list[str]] = {}
    for e in client.events(wid):
        if e["type"].split(":")[0] in ("bead", "lease") and e.get("bead_id"):
            found.setdefault(e["bead_id"], []).append(e["type"])
    return found


def bead_changes(repo: Path, commit: str) -> dict[str, str]:
    """What a bead's commit changed (path → blob), its verification evidence apart (it records times)."""
    out = git(repo, "diff-tree", "-r", "--no-commit-id", commit).splitlines()
    return {line.split("\t")[1]: line.split()[3] for line in out if "/verification/" not in line}


def landed(client: Client, repo: Path, wid: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Bead → (its commit's subject, what it changed)."""
    beads = client.http.get("/api/beads", params={"epic_id": wid}).raise_for_status().json()["beads"]
    return {b["id"]: (git(repo, "log", "-1", "--format=%s", b["commit"]).strip(), bead_changes(repo, b["commit"]))
            for b in beads}


def files(repo: Path, branch: str) -> dict[str, str]:
    """Path → blob of every file on ``branch`` but the verification evidence."""
    listing = git(repo, "ls-tree", "-r", branch).splitlines()
    return {line.split("\t")[1]: line.split()[2] for line in listing if "/verification/" not in line}


def test_a_recorded_epic_replays_offline_to_the_same_files_commits_and_events_bead_by_bead(
        recorded: tuple[Path, str, Path], system: System, tmp_path: Path) -> None:
    run, original, original_repo = recorded
    document: dict[str, Any] = json.loads(run.read_text())
    recording = document["recording"]
    # The stage sessions' replies and one script per bead attempt, whichever worker ran it.
    assert set(document["scripts"]) == {"scoping", "research", "plan", "preflight", "review", "pulsing:base",
                                        "pulsing:square", "pulsing:units"}
    # The worker's names and the epic were minted at run time: the replay's are recalled from its own kickoff.
    startup = json.dumps(document["scripts"]["pulsing:units"][0])
    assert "{{recall:Runtime nickname: (\\\\S+?)\\\\.}}" in startup and "{{recall:Registered name:" in startup
    assert original not in json.dumps(document["scripts"])
    assert not any(name in json.dumps(document["scripts"]) for name in recording["workers"])
    assert document["files"] == small_epic()["files"]
    assert recording["kind"] == "swarm" and recording["max_workers"] == 3
    assert [b["id"] for b in recording["beads"]] == sorted(BEADS)
    assert load_scenario(run).recording == recording
    live = Client(system)
    try:
        original_beads = bead_events(live, original)
        original_landed = landed(live, original_repo, original)
    finally:
        live.http.close()
    assert {b["id"]: b["events"] for b in recording["beads"]} == original_beads
    assert original_beads["units"] == ["bead:claimed", "lease:granted", "bead:evidence", "bead:closed",
                                       "lease:released"]

    # A fresh system with the same number of workers, its model the recording served by
    # `autarch model serve-scripted`: no key, no network.
    with replaying(run, system, tmp_path / "data", SERVICES,
                   AUTARCH_SWARM_WORKERS=str(recording["max_workers"])) as fresh:
        client = Client(fresh)
        repo = make_repo(tmp_path / "repo", document["files"])
        wid = client.create(repo, title=recording["title"], request=recording["request"],
                            branch=recording["branch"])
        approve_stages(client, wid)
        view = finish(client, wid)

        # The same files on the merged branch, the same commit per bead, the same events per bead one by one.
        assert files(repo, view["branch"]) == files(original_repo, recording["branch"])
        assert landed(client, repo, wid) == original_landed
        replayed = bead_events(client, wid)
        assert set(replayed) == set(original_beads)
        for bead, events in original_beads.items():
            for n, (want, got) in enumerate(zip(events, replayed[bead], strict=True)):
                assert want == got, f"bead {bead} event {n + 1}: recorded {want}, replayed {got}"
        compared = fresh.cli("beads", "compare", wid, str(run))
        assert compared.returncode == 0, compared.stdout + compared.stderr
        assert "same run:" in compared.stdout and "3 bead commits" in compared.stdout
        # `autarch workflow compare` takes the epic's recording too (the epic is its workflow).
        assert fresh.cli("workflow", "compare", str(run), wid).returncode == 0
        client.http.close()


def test_a_replayed_epic_whose_worker_reads_another_file_is_named_at_its_first_differing_event(
        recorded: tuple[Path, str, Path], system: System, model: ScriptedModelServer, client: Client,
        tmp_path: Path) -> None:
    run, _, _ = recorded
    document = json.loads(run.read_text())
    # Only the units worker reads NOTES.md: the same length, other letters (a listing of the files stays the same).
    starting = {**document["files"], "NOTES.md": "# NOTES\n"}
    wid, _ = start(client, model, tmp_path, {**document, "files": starting}, branch="autarch/shapes-rec")
    approve_stages(client, wid)
    finish(client, wid)

    compared = system.cli("beads", "compare", wid, str(run), "--json")
    assert compared.returncode == 1, compared.stdout + compared.stderr
    difference = json.loads(compared.stdout)["first_difference"]
    assert difference.startswith(
        "session bead units (pulsing:units) event 4, turn 0: turn:tool_completed read_file"), difference
    assert "tool result differs" in difference and "# NOTES" in difference


def test_an_epic_not_finished_is_not_recorded(system: System, client: Client, model: ScriptedModelServer,
                                              tmp_path: Path) -> None:
    wid, _ = start(client, model, tmp_path, small_epic(), branch="autarch/shapes-early")
    client.wait_awaiting(wid, "scoping")
    refused = system.cli("beads", "record", wid)
    assert refused.returncode == 1 and refused.stdout == "", refused.stdout
    assert "only a finished epic (done or abandoned) can be recorded" in refused.stderr, refused.stderr
