"""Bearer-token auth for every route except the health check."""

from __future__ import annotations

import hmac

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers import BaseRouteHandler

__all__ = ["NO_AUTH", "token_guard"]

NO_AUTH = {"no_auth": True}
"""Put in a handler's ``opt`` to make it public (``/healthz`` only)."""


def token_guard(token: str):
    """A guard accepting ``Authorization: Bearer <token>`` (or ``?access_token=`` for EventSource clients)."""
    expected = token.encode()

    def guard(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
        if handler.opt.get("no_auth"):
            return
        header = connection.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            # Browsers' EventSource cannot set headers; the SSE endpoint also takes the token as a query parameter.
            given = connection.query_params.get("access_token", "") if handler.opt.get("query_token") else ""
        if not given:
            raise NotAuthorizedException("missing bearer token: send 'Authorization: Bearer <token>'")
        if not hmac.compare_digest(given.encode(), expected):
            raise NotAuthorizedException("wrong bearer token")

    return guard
