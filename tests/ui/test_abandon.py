"""Abandoning a workflow from its page: a two-step control beside the card's approval, which ends the workflow for
good and says so."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.workflows import scenarios
from tests.workflows.conftest import Client, make_repo


def test_a_workflow_waiting_at_a_card_is_abandoned_from_its_page(page: Page, system, model, client: Client,
                                                                tmp_path: Path) -> None:
    scenario = scenarios.base()
    model.use(scenario)
    wid = client.create(make_repo(tmp_path / "repo", scenario["files"]))
    client.wait_awaiting(wid, "scoping")
    page.goto(f"{system.url}/workflows/{wid}")
    card = page.locator("#card-scope")
    expect(card.get_by_role("button", name="Approve")).to_be_visible(timeout=60_000)

    expect(card.get_by_role("button", name="Abandon for good")).to_be_hidden()  # one click cannot end it
    card.get_by_text("Abandon this workflow").click()
    card.get_by_label("Why (optional)").fill("wrong repository")
    card.get_by_role("button", name="Abandon for good").click()

    expect(page.get_by_text("This workflow was abandoned.")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    view = client.get(wid)
    assert view["status"] == "abandoned" and not view["awaiting_approval"]
    ended = client.events(wid, until="workflow:abandoned")[-1]
    assert (ended["type"], ended["reason"], ended["stage"]) == ("workflow:abandoned", "wrong repository", "scoping")
