"""The typed pieces of the Workflow aggregate's state (what its events' ``apply`` builds).

These are state, not wire: the stored events keep their own attributes (eventsourcing stores those, and old
logs must still replay), and the wire views (``contracts``) are built from these by ``cards`` and
``contract_events``. Mutable Structs, because the aggregate's events update them in place.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from autarch.contracts.execution import HaltReason

__all__ = ["Execution", "Halt", "Preflight", "PreflightStatus"]

PreflightStatus = Literal["completed", "failed"]
"""How a preflight ended (``running`` is not state: it is a preflight session with no outcome yet)."""


class Halt(msgspec.Struct, kw_only=True):
    """Why the workflow waits for the user (seed 003 ``workflow:halted``)."""

    reason: HaltReason
    message: str
    pulse_id: str | None
    details: dict[str, Any]
    """Free-form by reason (the questions, the extension request, the issues…): it goes to ``HaltView`` as is."""

    @property
    def step(self) -> str | None:
        """The step whose agent was working when the workflow halted (None: no agent was)."""
        step = self.details.get("step")
        return step if isinstance(step, str) else None


class Preflight(msgspec.Struct, kw_only=True):
    """The outcome of the preflight step (seed 000 ``PreflightSetup``)."""

    status: PreflightStatus
    summary: str | None
    setup_commands: list[str]
    build_success: bool | None
    baselines_recorded: int
    error: str | None


class Execution(msgspec.Struct, kw_only=True, frozen=True):
    """The workflow branch and its worktree, once the git service made them."""

    branch: str
    worktree_path: str
    base_commit: str
    repository_id: str
