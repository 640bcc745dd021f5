"""Browser sign-in without showing the bearer token to a page: one-time login links, session cookies, CSRF.

Everything is signed with an HMAC keyed by the gateway's bearer token, so nothing needs storing to check a
cookie, a gateway restart keeps people signed in, and replacing the token (``<data dir>/token``) signs
everyone out at once. Only the login link's one-time use needs memory: the nonces already redeemed, kept
until their link would have expired anyway, in this process and in a key-value bucket every gateway of the
system shares (``redeemed.py``).

- A **login link** (``/ui/login?n=<nonce>&e=<expiry>&s=<signature>``) is minted by ``autarch ui``, which can
  read the token file; it is valid for :data:`LOGIN_TTL` seconds and once.
- Redeeming it sets the **session cookie** ``<session id>.<expiry>.<signature>`` (HttpOnly: no script reads
  it; SameSite=Lax: other sites' forms and fetches do not carry it).
- Every state-changing request authenticated by that cookie must carry the **CSRF token** of its session in
  the ``X-CSRF-Token`` header (pages put it in a ``<meta>``); a bearer-token request needs none, since no
  browser adds a bearer token on its own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

__all__ = [
    "CSRF_HEADER",
    "LOGIN_PATH",
    "LOGIN_TTL",
    "SAFE_METHODS",
    "SESSION_COOKIE",
    "SESSION_TTL",
    "LoginLinks",
    "csrf_ok",
    "csrf_token",
    "login_link",
    "new_session",
    "session_of",
]

LOGIN_PATH = "/ui/login"
LOGIN_TTL = 300
"""Seconds a login link stays valid: long enough to switch to the browser, short enough to be worthless later."""
SESSION_COOKIE = "autarch_session"
SESSION_TTL = 7 * 24 * 3600
"""Seconds a browser stays signed in."""
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing: no CSRF token needed (RFC 9110 §9.2.1)."""


def _sign(token: str, *parts: str) -> str:
    message = "|".join(parts).encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def login_link(base_url: str, token: str, *, now: float | None = None) -> str:
    """A one-time sign-in link to the gateway at ``base_url``, valid for :data:`LOGIN_TTL` seconds."""
    nonce = secrets.token_urlsafe(16)
    expiry = str(int((time.time() if now is None else now) + LOGIN_TTL))
    query = urlencode({"n": nonce, "e": expiry, "s": _sign(token, "login", nonce, expiry)})
    return f"{base_url.rstrip('/')}{LOGIN_PATH}?{query}"


class LoginLinks:
    """The gateway's memory of redeemed links: each works once.

    ``claim`` (``redeemed.SharedRedemptions.claim`` in a running gateway) extends "once" from this process to
    every gateway of the system; without it only this process remembers.
    """

    def __init__(self, claim: Callable[[str], Awaitable[bool]] | None = None) -> None:
        self._used: dict[str, int] = {}
        self._lock = threading.Lock()
        self._claim = claim

    async def redeem(self, token: str, nonce: str, expiry: str, signature: str, *, now: float | None = None) -> bool:
        """True (once) for a link this token signed that has not expired.

        Raises:
            Exception: the shared claim could not be made (NATS away); the link stays unused, to try again.
        """
        if not (nonce and expiry.isascii() and expiry.isdigit() and signature):
            return False
        if not hmac.compare_digest(signature.encode(), _sign(token, "login", nonce, expiry).encode()):
            return False
        clock = time.time() if now is None else now
        if int(expiry) < clock:
            return False
        with self._lock:
            # Forget links that expired: they are refused by their expiry already.
            self._used = {n: e for n, e in self._used.items() if e >= clock}
            if nonce in self._used:
                return False
            self._used[nonce] = int(expiry)
        if self._claim is None:
            return True
        try:
            return await self._claim(nonce)
        except BaseException:
            with self._lock:
                self._used.pop(nonce, None)
            raise


def new_session(token: str, *, now: float | None = None) -> str:
    """A fresh session cookie value."""
    sid = secrets.token_urlsafe(16)
    expiry = str(int((time.time() if now is None else now) + SESSION_TTL))
    return f"{sid}.{expiry}.{_sign(token, 'session', sid, expiry)}"


def session_of(token: str, cookie: str | None, *, now: float | None = None) -> str | None:
    """The session id of a valid, unexpired cookie, else None."""
    if not cookie:
        return None
    sid, _, rest = cookie.partition(".")
    expiry, _, signature = rest.partition(".")
    if not (sid and expiry.isascii() and expiry.isdigit() and signature):
        return None
    if not hmac.compare_digest(signature.encode(), _sign(token, "session", sid, expiry).encode()):
        return None
    if int(expiry) < (time.time() if now is None else now):
        return None
    return sid


def csrf_token(token: str, sid: str) -> str:
    """The CSRF token of session ``sid``: pages embed it, state-changing requests send it back."""
    return _sign(token, "csrf", sid)


def csrf_ok(token: str, sid: str, given: str | None) -> bool:
    return bool(given and hmac.compare_digest(given.encode(), csrf_token(token, sid).encode()))
