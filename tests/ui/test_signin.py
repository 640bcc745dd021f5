"""Signing in from ``autarch ui``'s link, the cookie it sets, and CSRF: what keeps the browser session safe."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

from tests.ui.conftest import login_link
from tests.workflows.conftest import make_repo


def test_the_login_link_signs_a_browser_in_once_with_an_httponly_cookie(browser, system) -> None:
    # `autarch up` said where the UI is.
    assert f"UI       {system.url}/  (sign in with `autarch ui`)" in system.log.read_text()
    context = browser.new_context()
    page = context.new_page()
    link = login_link(system)
    page.goto(system.url + "/")
    assert page.locator("#signin-reason").is_visible()  # signed out: told how to sign in, no token asked for

    page.goto(link)
    assert page.url == system.url + "/"
    page.get_by_role("heading", name="Workflows").wait_for()
    cookie = next(c for c in context.cookies() if c["name"] == "autarch_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    assert system.token not in page.content()  # the bearer token never reaches the page

    # The same link a second time, in another browser, signs nobody in.
    other = browser.new_context()
    again = other.new_page()
    again.goto(link)
    assert "already used" in again.locator("#signin-reason").inner_text()
    assert not [c for c in other.cookies() if c["name"] == "autarch_session"]
    other.close()

    # Signing out forgets the cookie: the next page asks to sign in again.
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#signin-reason")).to_be_visible()
    assert not [c for c in context.cookies() if c["name"] == "autarch_session"]
    context.close()


def test_a_forged_link_or_cookie_is_refused(system) -> None:
    link = login_link(system)
    forged = link[:-4] + ("0000" if not link.endswith("0000") else "1111")
    with httpx.Client(base_url=system.url, follow_redirects=False) as http:
        assert http.get(forged.removeprefix(system.url)).status_code == 401
        http.cookies.set("autarch_session", "abc.9999999999.deadbeef")
        assert http.get("/api/workflows").status_code == 401
        assert http.get("/").status_code == 401


def test_a_signed_in_browser_changes_state_only_with_its_csrf_token(system, tmp_path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "hi\n"})
    body = {"title": "CSRF", "request": "nothing", "repo": str(repo), "script": "demo"}
    with httpx.Client(base_url=system.url, follow_redirects=False) as http:
        reply = http.get(login_link(system).removeprefix(system.url))
        assert reply.status_code == 303 and "autarch_session" in http.cookies
        before = http.get("/api/workflows").json()["total"]  # reading with the cookie needs no CSRF token

        # What another site's page could make the browser send: the cookie, without our token.
        refused = http.post("/api/workflows", json=body, headers={"Origin": "https://evil.example"})
        assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
        wrong = http.post("/api/workflows", json=body, headers={"X-CSRF-Token": "0" * 64})
        assert wrong.status_code == 403
        assert http.get("/api/workflows").json()["total"] == before  # nothing was created

        # The page's own token works.
        page = http.get("/").text
        token = page.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        created = http.post("/api/workflows", json=body, headers={"X-CSRF-Token": token})
        assert created.status_code == 201, created.text
        http.post(f"/api/workflows/{created.json()['id']}/stop", json={}, headers={"X-CSRF-Token": token})

    # The bearer token API is unchanged: no CSRF token needed, none asked.
    with httpx.Client(base_url=system.url, headers=system.headers) as api:
        assert api.get("/api/workflows").json()["total"] == before + 1


def test_the_pages_are_not_part_of_the_api_and_their_assets_need_no_sign_in(system) -> None:
    with httpx.Client(base_url=system.url) as http:
        script = http.get("/ui/static/app.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        page = http.get("/")
        assert page.status_code == 401 and "autarch ui" in page.text
        # Scripts from the gateway only: text in a card can never run as code.
        assert page.headers["content-security-policy"].startswith("default-src 'self'")
        paths = http.get("/schema/openapi.json", headers=system.headers).json()["paths"]
    # The API, health, and the action links a phone follows (a signed link is their credential: docs/notifier.md).
    assert not [p for p in paths if not p.startswith(("/api/", "/healthz", "/act/"))], sorted(paths)
