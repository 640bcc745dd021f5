"""Record → replay for a loop session: its iterations recorded, replayed from the recording on a fresh repository to
the same commit trees and events, and a replay whose tool result differs named at its first differing event."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from autarch.services.scripted_model import ScriptedModelServer
from tests.workflows.conftest import make_repo

from .conftest import FILES, Loops, iteration, text, write

pytestmark = pytest.mark.slow


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def loop_events(loops: Loops, session_id: str) -> list[str]:
    return [e for e in loops.events(session_id) if e.startswith("loop:")]


def read(path: str) -> dict[str, Any]:
    return {"type": "tool_use", "name": "read_file", "input": {"reason": f"Read {path} first", "path": path}}


SCRIPTS = {
    "loop:rec.i1": iteration([text("Looking at the app first."), read("shop/app.py")],
                             [write("shop/health.py", "def health():\n    return 'ok'\n")],
                             "feat(shop): add a health function\n<signal>CONTINUE</signal>"),
    # Quotes iteration 1's turn id (as the run gave it): a replay must name its own iteration 1 instead.
    "loop:rec.i2": iteration([write("tests/test_health.py", "from shop.health import health\n\n\n"
                                    "def test_health():\n    assert health() == 'ok'\n")],
                             "test(shop): cover the health function\n<signal>CONTINUE</signal>\n<anchor_hint>"
                             "<turn_id>{{recall:iteration 1 \\([^)]*turn ([^)\\s]+)\\)}}</turn_id>"
                             "<reason>iteration 1 made the function</reason></anchor_hint>"),
    "loop:rec.i3": iteration("Nothing is left to do.\n<signal>COMPLETE</signal>"),
}


def test_a_recorded_loop_session_replays_to_the_same_trees_and_a_changed_file_is_named(
        model: ScriptedModelServer, loops: Loops, tmp_path: Path) -> None:
    model.use({"files": FILES, "scripts": SCRIPTS})
    original = loops.start(loops.repo("rec"), "rec")
    done = loops.wait_status(original.id, "complete")
    run = tmp_path / "loop.json"
    recorded = loops.system.cli("pulse", "record", original.id, "-o", str(run))
    assert recorded.returncode == 0, recorded.stderr
    document = json.loads(run.read_text())
    recording = document["recording"]
    assert set(document["scripts"]) == {"loop:rec.i1", "loop:rec.i2", "loop:rec.i3"} and document["files"] == FILES
    assert recording["script"] == "rec" and recording["start_commit"] == done.base_commit
    assert [c["subject"] for c in recording["commits"]] == ["feat(shop): add a health function",
                                                            "test(shop): cover the health function"]
    assert recording["events"] == loop_events(loops, original.id)

    # Replayed from the recording alone: the same trees, the same events one by one.
    model.use(document)
    replay = loops.start(loops.repo("replay"), recording["script"])
    replayed = loops.wait_status(replay.id, "complete")
    # The recorded hint named the original's iteration 1; the replay's names its own.
    assert done.iterations[1].anchor_hint_next == done.progress_log[0].turn_id
    assert replayed.iterations[1].anchor_hint_next == replayed.progress_log[0].turn_id != done.progress_log[0].turn_id
    assert git(loops.tmp / "replay", "log", "--reverse", "--format=%T", f"main..{replayed.branch_name}").split() \
        == [c["tree"] for c in recording["commits"]]
    for n, (want, got) in enumerate(zip(recording["events"], loop_events(loops, replay.id), strict=True)):
        assert want == got, f"event {n + 1}: recorded {want}, replayed {got}"
    compared = loops.system.cli("pulse", "compare", str(run), replay.id)
    assert compared.returncode == 0 and "same run:" in compared.stdout, compared.stdout + compared.stderr

    # The same replies on a repository whose app differs: the first tool that reads it is named.
    changed = loops.tmp / "changed"
    make_repo(changed, {**FILES, "shop/app.py": "def app():\n    return 'fine'\n"})
    diverging = loops.start(changed, recording["script"])
    loops.wait_status(diverging.id, "complete")
    compared = loops.system.cli("pulse", "compare", str(run), diverging.id)
    assert compared.returncode == 1, compared.stdout + compared.stderr
    assert compared.stdout.startswith("diverged: session iteration 1 (loop:rec.i1) event 2, turn 0: "
                                      "turn:tool_completed read_file"), compared.stdout
    assert "tool result differs" in compared.stdout and "fine" in compared.stdout
