"""The gateway's client of the agent runner (sessions)."""

from __future__ import annotations

from typing import Any

from litestar.datastructures import State

from .orchestrator_client import ask_service

__all__ = ["ask_agent_runner"]


async def ask_agent_runner(state: State, verb: str, payload: Any, reply_type: type, *, idempotent: bool) -> Any:
    """Ask the agent runner; its typed errors propagate as :class:`RemoteError` (mapped to HTTP by the app)."""
    return await ask_service(state, "agent_runner", verb, payload, reply_type, idempotent=idempotent)
