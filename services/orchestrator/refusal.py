"""The one error an aggregate's command raises when its rules refuse it: nothing is recorded.

Each context names its own kind (``LifecycleError`` for a workflow, ``LoopError``, ``SwarmError``, ``MailError``)
so a test or a reader sees whose rule refused; the book (``book.py``) turns any of them into the typed error the
caller is answered with.
"""

from __future__ import annotations

from typing import Any

from autarch.runtime.errors import ServiceFailure

__all__ = ["Refusal"]


class Refusal(Exception):
    """A command the aggregate's current state does not allow; nothing is recorded.

    Args:
        code: the wire error code the caller is answered with.
        message: why, in words a person (or an agent) can act on.
        details: what the typed error carries besides the aggregate's id.
    """

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details

    def failure(self, **ids: str) -> ServiceFailure:
        """The typed error this refusal answers, naming the aggregate by ``ids`` (``workflow_id=…``)."""
        return ServiceFailure(self.code, self.message, {**ids, **self.details})
