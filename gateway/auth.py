"""Who may call the gateway: the bearer token, or a browser signed in with a session cookie.

Every route except the health check (and the UI's public pages) needs one of them. A request authenticated
by the cookie that changes state must also carry its session's CSRF token (:mod:`.ui.signin`).
"""

from __future__ import annotations

import hmac

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers import BaseRouteHandler

from .ui.signin import CSRF_HEADER, SAFE_METHODS, SESSION_COOKIE, csrf_ok, session_of

__all__ = ["NO_AUTH", "token_guard"]

NO_AUTH = {"no_auth": True}
"""Put in a handler's ``opt`` to make it public (``/healthz``, the UI's pages which check the cookie themselves)."""


def token_guard(token: str):
    """A guard accepting ``Authorization: Bearer <token>`` (or ``?access_token=`` for EventSource clients), or
    the UI's session cookie (with the CSRF token on state-changing requests)."""
    expected = token.encode()

    # A coroutine: Litestar runs a plain-function guard in a worker thread, a thread hop on every request.
    async def guard(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
        if handler.opt.get("no_auth"):
            return
        header = connection.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            sid = session_of(token, connection.cookies.get(SESSION_COOKIE))
            if sid is not None:
                # A cookie rides along with any request the browser makes, another site's form included: only
                # a page of ours knows the session's CSRF token.
                if connection.scope["method"] not in SAFE_METHODS and not csrf_ok(  # type: ignore[typeddict-item]  # no websocket route
                        token, sid, connection.headers.get(CSRF_HEADER)):
                    raise PermissionDeniedException(f"missing or wrong {CSRF_HEADER} header for a signed-in browser")
                return
            # Browsers' EventSource cannot set headers; the SSE endpoint also takes the token as a query parameter.
            given = connection.query_params.get("access_token", "") if handler.opt.get("query_token") else ""
        if not given:
            raise NotAuthorizedException("missing bearer token: send 'Authorization: Bearer <token>'")
        if not hmac.compare_digest(given.encode(), expected):
            raise NotAuthorizedException("wrong bearer token")

    return guard
