"""A loop session waiting for its first iteration, as the web UI shows it: ``pending``, with Pause and Abort.

This module's system has the indexer (the loop's turn memory): frozen, it holds a new session in ``pending`` for
``loop_memory_timeout`` seconds, while the first iteration's anchor is looked up.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from autarch.services.scripted_model import ScriptedModelServer
from autarch.services.scripted_model.scenario import bundled_scenario_path
from tests.system import System
from tests.workflows.conftest import SERVICES, Client, make_repo, scripted_system


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    yield from scripted_system(tmp_path_factory, model, "ui-loops", services=f"{SERVICES},indexer",
                               AUTARCH_AGENT_MAX_STEPS="10", AUTARCH_REQUEST_TIMEOUT="30",
                               AUTARCH_LOOP_MEMORY_TIMEOUT="15")


def test_a_pending_session_shows_as_pending_and_can_be_paused(page: Page, system: System, model,
                                                                client: Client, tmp_path: Path) -> None:
    scenario = json.loads(bundled_scenario_path("loop").read_text())
    model.use(scenario)
    repo = make_repo(tmp_path / "notes", scenario["files"])
    page.goto(system.url + "/loops")
    indexer = system.run_info()["children"]["indexer"]
    os.kill(indexer, signal.SIGSTOP)
    try:
        loop = client.http.post("/api/pulse/start", json={
            "projectName": "notes", "projectPath": str(repo), "goal": "Add a case-insensitive search",
            "maxIterations": 5, "script": "demo-loop", "createdBy": "api"}).raise_for_status().json()
        assert loop["status"] == "pending"
        # The page follows the event stream: the new session appears on its own.
        box = page.locator(f"[data-loop='{loop['id']}']")
        expect(box.locator("summary .badge")).to_have_text("pending", timeout=10_000)
        box.locator("summary").click()
        expect(box.get_by_role("button", name="Abort")).to_be_visible(timeout=10_000)
        box.get_by_role("button", name="Pause").click()
        # Nothing had started: it pauses at once.
        expect(box.locator("summary .badge")).to_have_text("paused", timeout=10_000)
    finally:
        os.kill(indexer, signal.SIGCONT)
    box.get_by_role("button", name="Resume").click()
    expect(box.locator("summary .badge")).to_have_text("complete", timeout=90_000)
    expect(box.locator("tbody tr")).to_have_count(3)
