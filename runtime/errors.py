"""Exceptions that carry a typed error across the bus."""

from __future__ import annotations

from typing import Any

from autarch.contracts.errors import ErrorCode, ErrorReply

__all__ = ["RemoteError", "ServiceFailure"]


class ServiceFailure(Exception):
    """Raised by an endpoint handler to answer with a typed error instead of a result."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details or {}

    def to_reply(self) -> ErrorReply:
        return ErrorReply(code=self.code, message=self.message, details=self.details)

    @classmethod
    def bad_request(cls, message: str, **details: Any) -> ServiceFailure:
        return cls(ErrorCode.BAD_REQUEST, message, details)

    @classmethod
    def not_found(cls, message: str, **details: Any) -> ServiceFailure:
        return cls(ErrorCode.NOT_FOUND, message, details)

    @classmethod
    def storage_full(cls, path: str, message: str) -> ServiceFailure:
        """Nothing was recorded: ``path`` has no space left (``runtime/storage.py``)."""
        return cls(ErrorCode.STORAGE_FULL, message, {"path": path})

    @classmethod
    def conflict(cls, message: str, **details: Any) -> ServiceFailure:
        return cls(ErrorCode.CONFLICT, message, details)


class RemoteError(Exception):
    """A request was answered with a typed error (or not answered at all)."""

    def __init__(self, reply: ErrorReply, *, subject: str) -> None:
        super().__init__(f"{subject}: {reply.code}: {reply.message}")
        self.reply = reply
        self.subject = subject

    @property
    def code(self) -> str:
        return self.reply.code

    @property
    def message(self) -> str:
        return self.reply.message
