"""Forking a workflow from its page: the fork opens, says where it came from, and the original is left as it was."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.workflows import scenarios
from tests.workflows.conftest import Client, make_repo


def test_a_workflow_forked_from_its_page_opens_the_fork(page: Page, system, model, client: Client,
                                                        tmp_path: Path) -> None:
    scenario = scenarios.base()
    model.use(scenario)
    wid = client.create(make_repo(tmp_path / "repo", scenario["files"]))
    at = client.wait_awaiting(wid, "scoping")["version"]
    page.goto(f"{system.url}/workflows/{wid}")
    expect(page.locator("#card-scope").get_by_role("button", name="Approve")).to_be_visible(timeout=60_000)

    form = page.locator("#fork")
    form.get_by_text("Fork this workflow").click()
    form.get_by_label("Event N").fill(str(at + 1000))
    form.get_by_role("button", name="Fork here").click()
    expect(form.get_by_role("alert")).to_contain_text("from 1 to")  # refused in the page: nothing is asked
    form.get_by_label("Event N").fill(str(at))
    form.get_by_role("button", name="Fork here").click()

    page.wait_for_url(lambda url: "/workflows/" in url and not url.endswith(wid), timeout=30_000)
    fid = page.url.rsplit("/", 1)[1]
    expect(page.locator("#forked-from")).to_contain_text(f"Forked from {wid[:8]} after its event {at}")
    expect(page.locator("#card-scope").get_by_role("button", name="Approve")).to_be_visible(timeout=30_000)
    fork = client.get(fid)
    assert (fork["forked_from"], fork["forked_at"], fork["stage"]) == (wid, at, "scoping")
    original = client.get(wid)
    assert original["forked_from"] is None and original["stage"] == "scoping" and original["awaiting_approval"]
