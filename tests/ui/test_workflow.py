"""A whole workflow driven from the browser: start, answer a question, request changes, approve every card,
read the diff with the review's comments, and a reload in the middle of an agent's stream."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.ui.conftest import SHOTS
from tests.workflows import scenarios
from tests.workflows.conftest import Client, make_repo


def _scenario() -> dict:
    """The demo whose scoping agent first asks a question, each agent revising its card when asked to."""
    s = scenarios.revising_every_card()
    question = scenarios.tool("ask_questions", questions=[{
        "type": "single_select", "prompt": "What should greet('') return?",
        "options": ["Hello, world!", "Hello, stranger!"]}])
    s["scripts"]["scoping"] = [question, *s["scripts"]["scoping"]]
    return s


def _approve(page: Page, card: str) -> None:
    section = page.locator(f"#card-{card}")
    expect(section.get_by_role("button", name="Approve")).to_be_visible(timeout=60_000)
    section.get_by_role("button", name="Approve").click()
    expect(section.get_by_role("button", name="Approve")).to_have_count(0)


def test_a_whole_workflow_from_the_browser(page: Page, system, model, client: Client, tmp_path: Path) -> None:
    scenario = _scenario()
    model.use(scenario)
    repo = make_repo(tmp_path / "repo", scenario["files"])
    SHOTS.mkdir(parents=True, exist_ok=True)

    # Start it from the list page's form.
    page.get_by_label("Title").fill("Greet the world")
    page.get_by_label("Request").fill("Make greet() greet the world when the name is empty")
    page.get_by_label("Repository").fill(str(repo))
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/workflows/[0-9a-f-]{36}$"))
    wid = page.url.rsplit("/", 1)[1]

    # The scoping agent asks; the answer goes back from the halt panel.
    halt = page.locator("#halt")
    expect(halt).to_contain_text("What should greet('') return?", timeout=60_000)
    page.screenshot(path=str(SHOTS / "halt-questions.png"))
    halt.get_by_label("Hello, world!").check()
    halt.get_by_role("button", name="Send answers").click()

    # Scope: request changes first, then approve the revised card (the full path).
    scope = page.locator("#card-scope")
    expect(scope.get_by_role("button", name="Approve")).to_be_visible(timeout=60_000)
    page.screenshot(path=str(SHOTS / "workflow-scope.png"))
    scope.get_by_text("Request changes").click()
    scope.get_by_label("What should change").fill("Please mention a missing name too.")
    scope.get_by_role("button", name="Send feedback").click()
    expect(scope).to_contain_text("Greet the world on an empty or missing name", timeout=60_000)
    scope.get_by_label(re.compile("^Full")).check()
    _approve(page, "scope")
    for card in ("research", "plan"):
        _approve(page, card)

    # Execution runs by itself; at review the branch diff is shown with the review's comment on its line.
    review = page.locator("#card-review")
    expect(review.get_by_role("button", name="Approve")).to_be_visible(timeout=120_000)
    diff = page.locator("#diff-view")
    expect(diff.locator("tr.add").first).to_be_visible(timeout=30_000)
    note = diff.locator("section[data-file='greeter/core.py'] tr.note .comment")
    expect(note).to_contain_text("would say the same in one line")
    expect(page.locator("#pulses tr[data-pulse]")).to_have_count(2)
    expect(page.locator("#stage-k")).to_contain_text("Stage 5/5")
    page.locator("#changes").screenshot(path=str(SHOTS / "workflow-diff.png"))

    # A pulse's own diff, from its row.
    page.locator("#pulses tr[data-pulse='pulse-1']").get_by_role("button", name="Diff").click()
    expect(diff).to_contain_text("Pulse pulse-1")

    # The list page, open before the last approval: it sees the workflow finish by its own refresh.
    lister = page.context.new_page()
    asked: list[str] = []
    lister.on("request", lambda r: asked.append(r.url))
    lister.goto(system.url + "/")
    expect(lister.locator(f"tr[data-workflow='{wid}']")).to_contain_text("review")

    _approve(page, "review")
    expect(page.locator("h1 .badge")).to_have_text("done", timeout=30_000)

    # Its refresh asks the costs of the workflows shown, never for every session.
    spent = sum(s["cost_usd"] for s in client.http.get("/api/sessions", params={"workflow": wid}).json()["items"])
    assert spent > 0
    listed = lister.locator(f"tr[data-workflow='{wid}']")
    expect(listed).to_contain_text("done")
    expect(listed).to_contain_text(f"${spent:.{2 if spent >= 1 else 4}f}")
    assert any(u.endswith("/api/workflows/costs") for u in asked) and not any("/api/sessions" in u for u in asked)
    lister.close()

    view = client.get(wid)
    assert view["status"] == "done" and view["path"] == "full"
    cards = client.artifacts(wid)
    assert [f["stage"] for f in cards["feedback"]] == ["scoping"]
    assert cards["feedback"][0]["feedback"] == "Please mention a missing name too."
    # The agents' work is on the page: a tool call, folded, with its arguments.
    tool = page.locator("details.tool").first
    expect(tool).to_be_attached()
    assert tool.get_attribute("open") is None

    # The list shows it done, with its cost.
    page.goto(system.url + "/")
    row = page.locator(f"tr[data-workflow='{wid}']")
    expect(row).to_contain_text("done")
    expect(row).to_contain_text("5/5")
    # Its cost is what its sessions spent (the runner's per-workflow total), in the page as served too.
    expect(row).to_contain_text(f"${spent:.{2 if spent >= 1 else 4}f}")
    page.screenshot(path=str(SHOTS / "workflows.png"))


def test_a_reload_mid_stream_loses_and_repeats_nothing(page: Page, system, model, client: Client,
                                                       tmp_path: Path) -> None:
    s = scenarios.base()
    slow = {"content": [{"type": "text", "text": "Checking the change once more. " * 30},
                        copy.deepcopy(scenarios.complete()["content"][0])], "delay_ms": 30}
    s["scripts"]["pulsing:pulse-1"] = [scenarios.READ_CORE, scenarios.EDIT_CORE, slow]
    model.use(s)
    repo = make_repo(tmp_path / "repo", s["files"])
    wid = client.create(repo)
    page.goto(f"{system.url}/workflows/{wid}")
    for card in ("scope", "research", "plan"):
        _approve(page, card)

    # The slow reply is streaming: reload in the middle of it.
    expect(page.locator(".turn.running .msg", has_text="Checking the change")).to_be_visible(timeout=60_000)
    page.reload()
    expect(page.locator("#card-review").get_by_role("button", name="Approve")).to_be_visible(timeout=120_000)
    page.wait_for_timeout(500)  # the last events' refresh

    # Every tool call (by turn and name) and turn of every session is on the page exactly once, each turn ended.
    sessions = client.http.get("/api/sessions", params={"workflow": wid}).json()["items"]
    tool_ids, turn_ids = [], []
    for summary in sessions:
        session = client.http.get(f"/api/sessions/{summary['session_id']}").json()
        turn_ids += [t["turn_id"] for t in session["turns"]]
        tool_ids += [f'{t["turn_id"]}/{c["name"]}' for t in session["turns"] for c in t["tool_calls"]]
    shown_tools = page.locator("details.tool").evaluate_all(
        "els => els.map(e => e.closest('article').id.slice(5) + '/' + e.dataset.name)")
    shown_turns = page.locator("article.turn").evaluate_all("els => els.map(e => e.id.slice(5))")
    assert set(tool_ids) - set(shown_tools) == set() and set(shown_tools) - set(tool_ids) == set()
    assert sorted(shown_tools) == sorted(tool_ids)
    assert sorted(shown_turns) == sorted(turn_ids)
    assert page.locator("article.turn.running").count() == 0
    # The slow reply's text is there once, whole.
    assert page.locator(".msg", has_text="Checking the change once more.").count() == 1


def test_an_extension_approved_and_a_stopped_pulse_resumed_from_the_browser(
        page: Page, system, model, client: Client, tmp_path: Path) -> None:
    s = scenarios.pulse_asks_for_an_extension()
    model.use(s)
    wid = client.create(make_repo(tmp_path / "repo", s["files"]))
    page.goto(f"{system.url}/workflows/{wid}")
    for card in ("scope", "research", "plan"):
        _approve(page, card)
    halt = page.locator("#halt")
    expect(halt).to_contain_text("Extension requested", timeout=60_000)
    halt.get_by_label("Message to the agent").fill("Take the time you need.")
    halt.get_by_role("button", name="Approve extension").click()
    expect(page.locator("#card-review").get_by_role("button", name="Approve")).to_be_visible(timeout=120_000)
    assert client.get(wid)["status"] == "awaiting_approval"

    # A pulse stopped with the Stop button halts with the reason; Resume (with guidance) runs it again.
    s = scenarios.slow_pulse()
    model.use(s)
    wid = client.create(make_repo(tmp_path / "slow", s["files"]))
    page.goto(f"{system.url}/workflows/{wid}")
    for card in ("scope", "research", "plan"):
        _approve(page, card)
    expect(page.locator(".turn.running .msg", has_text="Thinking about the verification")).to_be_visible(
        timeout=60_000)
    page.get_by_role("button", name="Stop").click()
    expect(halt).to_contain_text("Halted: Stopped", timeout=30_000)
    halt.get_by_label("Guidance for the agent").fill("Finish the edit, then complete the pulse.")
    halt.get_by_role("button", name="Resume").click()
    expect(halt).to_have_count(0, timeout=30_000)
    view = client.get(wid)
    assert view["status"] != "halted"
    runs = client.artifacts(wid)["pulse_runs"]
    assert runs[0]["status"] == "stopped" and len(runs) >= 2


def test_a_lost_network_mid_stream_loses_and_repeats_nothing(page: Page, system, model, client: Client,
                                                             tmp_path: Path) -> None:
    s = scenarios.base()
    model.use(s)
    wid = client.create(make_repo(tmp_path / "repo", s["files"]))
    page.goto(f"{system.url}/workflows/{wid}")
    _approve(page, "scope")
    # Offline while research runs: the connection drops (an emulated offline browser keeps open connections
    # open, so the page is told to drop it as a lost network would) and cannot come back; events go on being
    # recorded without the page.
    page.context.set_offline(True)
    page.evaluate("window.autarch.disconnect()")
    expect(page.locator("#live")).to_have_text("reconnecting…")
    client.wait_awaiting(wid, "research")
    page.context.set_offline(False)
    expect(page.locator("#live")).to_have_text("live", timeout=30_000)
    expect(page.locator("#card-research").get_by_role("button", name="Approve")).to_be_visible(timeout=30_000)

    # Every event recorded while offline reached the page once: each turn and tool call once, each turn ended.
    applied = page.evaluate("window.autarch.timings.map(t => t[0])")
    assert len(applied) == len(set(applied))
    sessions = client.http.get("/api/sessions", params={"workflow": wid}).json()["items"]
    turns, calls = [], []
    for summary in sessions:
        session = client.http.get(f"/api/sessions/{summary['session_id']}").json()
        turns += [t["turn_id"] for t in session["turns"]]
        calls += [f'{t["turn_id"]}/{c["name"]}' for t in session["turns"] for c in t["tool_calls"]]
    expect(page.locator("article.turn")).to_have_count(len(turns))
    shown = page.locator("details.tool").evaluate_all(
        "els => els.map(e => e.closest('article').id.slice(5) + '/' + e.dataset.name)")
    assert sorted(shown) == sorted(calls)
    assert page.locator("article.turn.running").count() == 0
