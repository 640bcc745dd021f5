"""The signed values behind the browser session, without a browser: links, cookies and CSRF tokens."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from autarch.gateway.ui.signin import (
    LOGIN_TTL,
    SESSION_TTL,
    LoginLinks,
    csrf_ok,
    csrf_token,
    login_link,
    new_session,
    session_of,
)

TOKEN = "t" * 43


def _parts(link: str) -> tuple[str, str, str]:
    query = parse_qs(urlparse(link).query)
    return query["n"][0], query["e"][0], query["s"][0]


async def test_a_link_works_once_within_its_time_and_only_for_its_token() -> None:
    links = LoginLinks()
    now = 1_000_000.0
    link = login_link("http://127.0.0.1:8765/", TOKEN, now=now)
    assert link.startswith("http://127.0.0.1:8765/ui/login?")
    nonce, expiry, signature = _parts(link)
    assert not await links.redeem("another token", nonce, expiry, signature, now=now)
    assert not await links.redeem(TOKEN, nonce, str(int(expiry) + 3600), signature, now=now)  # a longer life: forged
    assert not await links.redeem(TOKEN, nonce, expiry, signature, now=now + LOGIN_TTL + 1)  # expired
    assert await links.redeem(TOKEN, nonce, expiry, signature, now=now + 1)
    assert not await links.redeem(TOKEN, nonce, expiry, signature, now=now + 2)  # used
    assert not await links.redeem(TOKEN, "", expiry, signature, now=now)
    assert not await links.redeem(TOKEN, nonce, "²", signature, now=now)


def test_a_cookie_names_its_session_until_it_expires_and_each_session_has_its_own_csrf_token() -> None:
    now = 2_000_000.0
    cookie = new_session(TOKEN, now=now)
    sid = session_of(TOKEN, cookie, now=now + 10)
    assert sid and cookie.startswith(sid + ".")
    assert session_of(TOKEN, cookie, now=now + SESSION_TTL + 1) is None
    assert session_of("another token", cookie, now=now) is None
    assert session_of(TOKEN, cookie.replace(".", ".9", 1), now=now) is None  # a changed expiry breaks the signature
    for broken in ("", "abc", "a.b", "a.1.", "..."):
        assert session_of(TOKEN, broken, now=now) is None
    other = session_of(TOKEN, new_session(TOKEN, now=now), now=now)
    assert other and other != sid
    assert csrf_ok(TOKEN, sid, csrf_token(TOKEN, sid))
    assert not csrf_ok(TOKEN, sid, csrf_token(TOKEN, other))
    assert not csrf_ok(TOKEN, sid, None) and not csrf_ok(TOKEN, sid, "")


async def test_autarch_ui_prints_the_link_and_opens_no_text_browser_without_a_display(tmp_path) -> None:
    import os
    import subprocess
    import sys

    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    wid = "0e6f1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
    result = subprocess.run([sys.executable, "-m", "autarch.cli.main", "ui", wid, "--url", "http://127.0.0.1:9",
                             "--token-file", str(token)], env=env, capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert "no graphical browser here" in result.stdout
    link = next(line.split(": ", 1)[1] for line in result.stdout.splitlines() if "sign-in link" in line)
    assert parse_qs(urlparse(link).query)["next"] == [f"/workflows/{wid}"]
    assert await LoginLinks().redeem(TOKEN, *_parts(link))
