"""Every error the HTTP API returns has the shape of :class:`ErrorReply` (code, message, details)."""

from __future__ import annotations

import logging

from litestar import Request, Response
from litestar.exceptions import HTTPException, NotAuthorizedException, NotFoundException, ValidationException
from litestar.types import ExceptionHandlersMap

from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.runtime.errors import RemoteError

__all__ = ["EXCEPTION_HANDLERS", "STATUS_OF", "WWW_AUTHENTICATE", "error_response"]

log = logging.getLogger(__name__)

WWW_AUTHENTICATE = 'Bearer realm="autarch"'
"""The challenge of every 401: the API takes a bearer token (``<data dir>/token``)."""

STATUS_OF = {
    ErrorCode.BAD_REQUEST: 400,
    "unauthorized": 401,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.STORAGE_FULL: 503,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.INTERNAL: 500,
}


def error_response(reply: ErrorReply, status: int | None = None) -> Response[ErrorReply]:
    return Response(reply, status_code=status or STATUS_OF.get(reply.code, 500))


def _remote(_: Request, exc: RemoteError) -> Response[ErrorReply]:
    return error_response(exc.reply)


def _validation(_: Request, exc: ValidationException) -> Response[ErrorReply]:
    details = {"errors": exc.extra} if exc.extra else {}
    return error_response(ErrorReply(code=ErrorCode.BAD_REQUEST, message=str(exc.detail), details=details), 400)


def _http(_: Request, exc: HTTPException) -> Response[ErrorReply]:
    code = {400: ErrorCode.BAD_REQUEST, 401: "unauthorized", 403: "forbidden", 404: ErrorCode.NOT_FOUND,
            405: "method_not_allowed", 413: "too_large"}
    reply = ErrorReply(code=code.get(exc.status_code, "http_error"), message=str(exc.detail))
    # The exception's headers are part of the answer: 405 carries ``Allow`` (RFC 9110 §15.5.6).
    headers = dict(exc.headers or {})
    if exc.status_code == 401:
        # RFC 9110 §15.5.2: a 401 says which scheme would succeed.
        headers.setdefault("WWW-Authenticate", WWW_AUTHENTICATE)
    response = error_response(reply, exc.status_code)
    response.headers.update(headers)
    return response


def _not_utf8(_: Request, exc: UnicodeDecodeError) -> Response[ErrorReply]:
    # Litestar decodes a JSON body as UTF-8 before msgspec sees it (RFC 8259 §8.1: JSON is UTF-8).
    reply = ErrorReply(code=ErrorCode.BAD_REQUEST, message=f"the body is not valid UTF-8: {exc.reason} at byte "
                       f"{exc.start}", details={"field": "body"})
    return error_response(reply, 400)


def _unexpected(_: Request, exc: Exception) -> Response[ErrorReply]:
    # A bug still answers in the one error shape; the traceback goes to the log, not to the client.
    log.exception("unhandled error", exc_info=exc)
    return error_response(ErrorReply(code=ErrorCode.INTERNAL, message="internal error; see the gateway's log"), 500)


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    RemoteError: _remote,
    ValidationException: _validation,
    NotAuthorizedException: _http,
    NotFoundException: _http,
    HTTPException: _http,
    UnicodeDecodeError: _not_utf8,
    Exception: _unexpected,
}
