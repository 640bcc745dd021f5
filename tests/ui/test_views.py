"""The other views: a discussion in a channel as a chat, a loop session's iterations, a swarm's bead board."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import Page, expect

from autarch.services.scripted_model.scenario import bundled_scenario_path
from tests.ui.conftest import SHOTS
from tests.workflows.conftest import Client, approve_stages, make_repo


def _bundled(name: str) -> dict:
    return json.loads(bundled_scenario_path(name).read_text())


def test_a_discussion_in_a_channel_reads_as_a_chat(page: Page, system, model, tmp_path: Path) -> None:
    scenario = _bundled("demo")
    model.use(scenario)
    repo = make_repo(tmp_path / "repo", scenario["files"])
    page.goto(system.url + "/channels")
    page.get_by_label("Channel").fill("greeter")
    page.get_by_label("Repository").fill(str(repo))
    page.get_by_label("Message").fill("What does this project do?")
    page.get_by_role("button", name="Start").click()
    page.wait_for_url("**/sessions/*")
    expect(page.locator("#chat-status")).to_have_text("idle", timeout=60_000)
    turn = page.locator("article.turn").first
    expect(turn.locator("footer")).to_contain_text("end_turn")
    expect(turn.locator("details.tool").first).to_be_attached()
    expect(page.get_by_role("heading", name="#greeter")).to_be_visible()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "channel.png"))
    # The list of discussions links to it.
    session_url = page.url
    page.goto(system.url + "/channels")
    page.locator(f"a[href='{session_url.removeprefix(system.url)}']").click()
    expect(page.locator("article.turn")).to_have_count(1)


def test_a_loop_session_shows_its_iterations(page: Page, system, model, client: Client, tmp_path: Path) -> None:
    scenario = _bundled("loop")
    model.use(scenario)
    repo = make_repo(tmp_path / "notes", scenario["files"])
    loop = client.http.post("/api/pulse/start", json={
        "projectName": "notes", "projectPath": str(repo), "goal": "Add a case-insensitive search",
        "maxIterations": 5, "script": "demo-loop", "createdBy": "api"}).raise_for_status().json()
    page.goto(system.url + "/loops")
    box = page.locator(f"[data-loop='{loop['id']}']")
    box.locator("summary").click()
    expect(box.locator("summary .badge")).to_have_text("complete", timeout=90_000)
    expect(box.locator("tbody tr")).to_have_count(3)
    expect(box.locator("tbody tr").last).to_contain_text("COMPLETE")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "loops.png"))


def test_a_swarm_shows_its_bead_board(page: Page, system, model, client: Client, tmp_path: Path) -> None:
    scenario = _bundled("swarm")
    model.use(scenario)
    repo = make_repo(tmp_path / "shapes", scenario["files"])
    wid = client.create(repo, branch="autarch/shapes-ui")
    page.goto(f"{system.url}/workflows/{wid}")
    approve_stages(client, wid)
    board = page.locator("#beads")
    expect(board).to_be_visible(timeout=60_000)
    client.wait_awaiting(wid, "review", timeout=120)
    beads = client.http.get("/api/beads", params={"epic_id": wid}).json()["beads"]
    closed = board.locator(".column[data-status='closed'] .bead")
    expect(closed).to_have_count(len(beads), timeout=30_000)
    expect(board.locator("tr[data-worker]").first).to_be_visible()
    board.scroll_into_view_if_needed()
    SHOTS.mkdir(parents=True, exist_ok=True)
    board.screenshot(path=str(SHOTS / "beads.png"))


def test_a_start_refused_by_the_gateway_says_why_and_starts_nothing(page: Page, system, client: Client,
                                                                   tmp_path: Path) -> None:
    before = client.http.get("/api/workflows").json()["total"]
    page.goto(system.url + "/")
    page.get_by_label("Title").fill("Nowhere")
    page.get_by_label("Request").fill("Anything")
    page.get_by_label("Repository").fill(str(tmp_path / "missing"))
    page.get_by_role("button", name="Start").click()
    expect(page.locator("#start-form [role=alert]")).to_contain_text("repo")
    assert page.url == system.url + "/"
    assert client.http.get("/api/workflows").json()["total"] == before


def test_text_from_users_and_agents_is_shown_as_text_never_as_markup(page: Page, system, model, client: Client,
                                                                    tmp_path: Path) -> None:
    scenario = _bundled("demo")
    model.use(scenario)
    title = "<img src=x onerror=\"document.title='pwned'\"> & </script><b>bold</b>"
    wid = client.create(make_repo(tmp_path / "repo", scenario["files"]), title=title,
                        request="<script>alert(1)</script>")
    page.goto(f"{system.url}/workflows/{wid}")
    expect(page.locator("h1")).to_contain_text(title)
    assert page.locator("h1 img, h1 b, main script").count() == 0
    page.get_by_text("Request", exact=True).click()
    expect(page.locator("#request .msg")).to_have_text("<script>alert(1)</script>")
    assert page.title() != "pwned"
    page.goto(system.url + "/")
    expect(page.locator(f"tr[data-workflow='{wid}'] a")).to_have_text(title)
    client.post(wid, "stop", {})
