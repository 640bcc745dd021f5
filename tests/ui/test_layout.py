"""The pages at a phone's width and in dark mode, and a card approved with the keyboard alone."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect

from tests.ui.conftest import SHOTS, login_link
from tests.workflows import scenarios
from tests.workflows.conftest import Client, make_repo


def test_a_phone_in_dark_mode_approves_with_the_keyboard(browser, system, model, client: Client,
                                                         tmp_path: Path) -> None:
    s = scenarios.base()
    model.use(s)
    wid = client.create(make_repo(tmp_path / "repo", s["files"]))
    client.wait_awaiting(wid, "scoping")

    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark", is_mobile=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(login_link(system, wid))
    expect(page.locator("#card-scope")).to_contain_text("Recommended path")
    # One column: nothing wider than the screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(22, 24, 28)", background  # the dark palette
    page.screenshot(path=str(SHOTS / "phone-dark.png"))

    # Tab to Approve and press Enter: every control is reachable without a mouse.
    approve = page.locator("#card-scope").get_by_role("button", name="Approve")
    for _ in range(60):
        page.keyboard.press("Tab")
        if approve.evaluate("b => b === document.activeElement"):
            break
    else:
        raise AssertionError("Approve was never reached with Tab")
    page.keyboard.press("Enter")
    client.wait(wid, lambda v: v["stage"] == "research", "research")
    context.close()
