"""Record → replay: the demo workflow recorded, replayed offline from the recording on a fresh system to the same
trees and events; and a replay whose tool result differs, with the first differing event named."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from autarch.cli.local.natsserver import free_port
from autarch.services.scripted_model import ScriptedModelServer
from autarch.services.scripted_model.scenario import load_scenario
from tests.system import System

from .conftest import SERVICES, Client, approve_stages, demo_scenario, finish, git, make_repo, start

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def recorded(system: System, model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[Path, str, Path]]:
    """The demo workflow run to its end and recorded: (the recording, the workflow id, its repository)."""
    tmp = tmp_path_factory.mktemp("recorded")
    client = Client(system)
    try:
        wid, repo = start(client, model, tmp, demo_scenario())
        approve_stages(client, wid)
        finish(client, wid)
        run = tmp / "run.json"
        done = system.cli("workflow", "record", wid, "-o", str(run))
        assert done.returncode == 0, done.stderr
        yield run, wid, repo
    finally:
        client.http.close()


def trees(repo: Path, branch: str) -> list[str]:
    """The tree of each commit on ``branch`` after ``main``, oldest first."""
    return git(repo, "log", "--reverse", "--format=%T", f"main..{branch}").split()


def stage_events(client: Client, wid: str) -> list[str]:
    return [e["type"] for e in client.events(wid) if e["type"].split(":")[0] in ("workflow", "preflight", "pulse")]


def cards(client: Client, wid: str) -> dict[str, Any]:
    """The workflow's cards, the review's comments without the ids and times each run mints."""
    found = client.artifacts(wid)
    review = dict(found["review"])
    review["comments"] = [{k: v for k, v in c.items() if k not in ("id", "comment_id", "created_at")}
                          for c in review["comments"]]
    return {"scope": found["scope"], "research": found["research"], "plan": found["plan"], "review": review}


def serve_scripted(scenario: Path) -> tuple[subprocess.Popen[str], str]:
    """``autarch model serve-scripted SCENARIO`` as its own process, and the base URL it announced."""
    proc = subprocess.Popen([sys.executable, "-m", "autarch.cli.main", "model", "serve-scripted", str(scenario)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert " at http://" in line, line + (proc.stderr.read() if proc.poll() is not None else "")
    return proc, line.split(" at ", 1)[1].strip()


@contextmanager
def replaying(run: Path, system: System, data: Path, services: str, **env: str) -> Iterator[System]:
    """A fresh system (``system``'s settings and ``env``), its model the recording ``run`` served by
    `autarch model serve-scripted`: no key, no network. Both are stopped after."""
    server, url = serve_scripted(run)
    data.mkdir()
    fresh = System(data_dir=data, port=free_port(), nats_port=free_port(), services=services,
                   extra_env={**system.extra_env, **env, "AUTARCH_ANTHROPIC_BASE_URL": url,
                              "AUTARCH_ANTHROPIC_API_KEY": "none"})
    try:
        fresh.start(timeout=60)
        yield fresh
    finally:
        if fresh.proc is not None:
            fresh.stop()
        server.terminate()
        server.wait(timeout=10)


def test_a_recorded_demo_replays_offline_to_the_same_cards_trees_and_events(
        recorded: tuple[Path, str, Path], system: System, tmp_path: Path) -> None:
    run, original, original_repo = recorded
    document: dict[str, Any] = json.loads(run.read_text())
    recording = document["recording"]
    # Every session's replies, keyed as it asked the model; the repository it started from.
    assert set(document["scripts"]) == {"scoping", "research", "plan", "preflight", "pulsing:pulse-1",
                                        "pulsing:pulse-2", "review"}
    assert document["files"] == demo_scenario()["files"]
    assert recording["start_commit"] == git(original_repo, "rev-parse", "main").strip()
    assert load_scenario(run).recording == recording  # the scripted model takes the file as it is
    live = Client(system)
    try:
        original_events = stage_events(live, original)
        original_cards = cards(live, original)
    finally:
        live.http.close()
    assert recording["events"] == original_events

    # A fresh system, its model the recording served by `autarch model serve-scripted`: no key, no network.
    with replaying(run, system, tmp_path / "data", SERVICES) as fresh:
        client = Client(fresh)
        repo = make_repo(tmp_path / "repo", document["files"])
        wid = client.create(repo, title=recording["title"], request=recording["request"])
        approve_stages(client, wid)
        view = finish(client, wid)

        # The same commits, tree for tree, and the same events, one by one.
        assert trees(repo, view["branch"]) == [c["tree"] for c in recording["commits"]]
        assert trees(repo, view["branch"]) == trees(original_repo, recording["branch"])
        assert len(recording["commits"]) == 2
        assert cards(client, wid) == original_cards
        replayed = stage_events(client, wid)
        for n, (want, got) in enumerate(zip(original_events, replayed, strict=True)):
            assert want == got, f"event {n + 1}: recorded {want}, replayed {got}"
        compared = fresh.cli("workflow", "compare", str(run), wid)
        assert compared.returncode == 0, compared.stdout + compared.stderr
        assert "same run:" in compared.stdout
        client.http.close()


def test_a_replay_whose_tool_result_differs_is_named_at_its_first_differing_event(
        recorded: tuple[Path, str, Path], system: System, model: ScriptedModelServer, client: Client,
        tmp_path: Path) -> None:
    run, _, _ = recorded
    document = json.loads(run.read_text())
    files = dict(document["files"])
    # A different starting repository: the first tool that reads this file answers otherwise.
    files["greeter/core.py"] = files["greeter/core.py"].replace("Greet someone by name.", "Greet a person by name.")
    wid, _ = start(client, model, tmp_path, {**document, "files": files})
    approve_stages(client, wid)
    finish(client, wid)

    compared = system.cli("workflow", "compare", str(run), wid, "--json")
    assert compared.returncode == 1, compared.stdout + compared.stderr
    difference = json.loads(compared.stdout)["first_difference"]
    assert difference.startswith("session scoping (scoping) event 2, turn 0: turn:tool_completed read_file"), \
        difference
    assert "tool result differs" in difference and "Greet a person by name." in difference
