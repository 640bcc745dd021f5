"""Every error the HTTP API returns has the shape of :class:`ErrorReply` (code, message, details)."""

from __future__ import annotations

from litestar import Request, Response
from litestar.exceptions import HTTPException, NotAuthorizedException, NotFoundException, ValidationException

from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.runtime.errors import RemoteError

__all__ = ["EXCEPTION_HANDLERS", "STATUS_OF", "error_response"]

STATUS_OF = {
    ErrorCode.BAD_REQUEST: 400,
    "unauthorized": 401,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.UNAVAILABLE: 503,
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
    code = {400: ErrorCode.BAD_REQUEST, 401: "unauthorized", 404: ErrorCode.NOT_FOUND, 405: "method_not_allowed"}
    reply = ErrorReply(code=code.get(exc.status_code, "http_error"), message=str(exc.detail))
    return error_response(reply, exc.status_code)


EXCEPTION_HANDLERS = {
    RemoteError: _remote,
    ValidationException: _validation,
    NotAuthorizedException: _http,
    NotFoundException: _http,
    HTTPException: _http,
}
