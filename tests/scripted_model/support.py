"""Helpers shared by the scripted model tests."""

from __future__ import annotations

import anthropic

from autarch.services.scripted_model import ScriptedModelServer

__all__ = ["TOOLS", "client"]

TOOLS = [
    {"name": name, "description": f"The {name} tool.", "input_schema": {"type": "object"}}
    for name in ("read_file", "edit_file", "shell", "submit_research", "complete_pulse")
]
"""Tools offered in test requests (the scripted model refuses a step calling a tool that is not offered)."""


def client(server: ScriptedModelServer, *, max_retries: int = 0, role: str | None = None) -> anthropic.AsyncAnthropic:
    """The real SDK client, pointed at ``server``; ``role`` goes into the ``x-autarch-role`` header."""
    headers = {"x-autarch-role": role} if role else None
    return anthropic.AsyncAnthropic(
        base_url=server.base_url, api_key="test", max_retries=max_retries, default_headers=headers
    )
