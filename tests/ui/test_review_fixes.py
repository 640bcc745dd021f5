"""The review card sends chosen comments back from the browser: fix pulses run, the review comes back, approve."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.ui.conftest import SHOTS
from tests.workflows import scenarios
from tests.workflows.conftest import Client, make_repo


def test_the_review_card_sends_the_checked_comments_back_to_be_fixed(page: Page, system, model, client: Client,
                                                                      tmp_path: Path) -> None:
    scenario = scenarios.review_sends_comments_back()
    # Only the comment on greeter/core.py goes back: its one fix pulse is scripted; the test file's is not asked.
    model.use(scenario)
    repo = make_repo(tmp_path / "repo", scenario["files"])
    wid = client.create(repo)
    page.goto(f"{system.url}/workflows/{wid}")
    for card in ("scope", "research", "plan"):
        section = page.locator(f"#card-{card}")
        expect(section.get_by_role("button", name="Approve")).to_be_visible(timeout=60_000)
        section.get_by_role("button", name="Approve").click()
        expect(section.get_by_role("button", name="Approve")).to_have_count(0)

    review = page.locator("#card-review")
    expect(review.get_by_role("button", name="Approve")).to_be_visible(timeout=120_000)
    core, test = client.artifacts(wid)["review"]["comments"]
    review.get_by_text("Send the work back to fix the comments").click()
    fix = review.locator("#fix-review")
    expect(fix.locator("input[type=checkbox]")).to_have_count(2)
    fix.locator(f"#fix-{test['comment_id']}").uncheck()
    fix.get_by_label("Feedback for the fix pulses").fill("Only the default, please.")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#card-review").screenshot(path=str(SHOTS / "review-fix.png"))
    fix.get_by_role("button", name="Fix the comments").click()

    # The fix round shows on the page, its pulse in the table; the review comes back and is approved.
    rounds = page.locator("#fix-rounds")
    expect(rounds).to_contain_text("Fix round 1", timeout=30_000)
    expect(rounds).to_contain_text("Only the default, please.")
    expect(page.locator("#pulses tr[data-pulse='fix-1-1']")).to_contain_text("fix round 1", timeout=60_000)
    expect(review.get_by_role("button", name="Approve")).to_be_visible(timeout=120_000)
    expect(review).to_contain_text("Both comments sent back are resolved")
    review.get_by_role("button", name="Approve").click()
    expect(page.locator("h1 .badge")).to_have_text("done", timeout=30_000)

    cards = client.artifacts(wid)
    [fix_round] = cards["fix_rounds"]
    assert fix_round["comment_ids"] == [core["comment_id"]] and fix_round["feedback"] == "Only the default, please."
    assert [p["pulse_id"] for p in fix_round["pulses"]] == ["fix-1-1"]
    assert [r["id"] for r in cards["pulse_runs"] if r["fix_round"]] == ["fix-1-1"]
