"""The agent registry: each role's system prompt, tools, block tools, model and generation settings."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from autarch.contracts.agents import ROLE_BLOCK_TOOLS, block_tool_definitions
from autarch.contracts.tool_catalog import ROLES, tool_definitions
from autarch.runtime.settings import AgentRunnerSettings, SettingsError

from .prompts import system_prompt

__all__ = ["DEFAULT_MODELS", "AgentConfig", "AgentRegistry", "parse_models"]

DEFAULT_MODELS: dict[str, str] = {
    "discussion": "claude-sonnet-4-6",
    "scoping": "claude-sonnet-4-6",
    "research": "claude-sonnet-4-6",
    "plan": "claude-opus-4-6",
    "preflight": "claude-haiku-4-5",
    "pulsing": "claude-opus-4-6",
    "review": "claude-opus-4-6",
    "loop": "claude-opus-4-6",
}
"""Model per role unless ``agent_models`` says otherwise: the strongest model where judgement matters most."""

_MAX_TOKENS = {"discussion": 4096, "preflight": 8192}
_THINKING = {"research": 4000, "plan": 8000, "pulsing": 8000, "review": 6000, "loop": 8000}


@dataclass(frozen=True)
class AgentConfig:
    """One role's agent as the model client needs it (built once per process)."""

    role: str
    model: str
    system_prompt: str
    tool_names: frozenset[str]
    """Tools the tools service executes for this role."""
    block_tools: tuple[str, ...]
    max_tokens: int
    thinking_budget: int | None
    """Extended-thinking budget in tokens; None sends no ``thinking`` parameter."""
    system: list[dict[str, Any]] = field(repr=False, default_factory=list)
    """The request's ``system`` blocks, with the cache breakpoint on the last one."""
    tools: list[dict[str, Any]] = field(repr=False, default_factory=list)
    """The request's ``tools``: executable tools then block tools, cache breakpoint on the last one."""
    hatch_tools: list[dict[str, Any]] | None = field(repr=False, default=None)
    """``tools`` once the session's escape hatch is open (``complete_pulse`` with ``unresolvedIssues``); None
    for a role without ``complete_pulse``."""

    def tools_for(self, *, escape_hatch: bool) -> list[dict[str, Any]]:
        """The ``tools`` of a request, with or without the escape hatch."""
        return self.hatch_tools if escape_hatch and self.hatch_tools is not None else self.tools


def parse_models(spec: str) -> dict[str, str]:
    """``"plan=claude-opus-4-6,*=claude-sonnet-4-6"`` → a model for each role it names (``*`` for all).

    A role named on its own wins over ``*`` wherever the two stand in the list.
    """
    chosen: dict[str, str] = {}
    named: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        role, sep, model = item.partition("=")
        role, model = role.strip(), model.strip()
        if not sep or not model or (role != "*" and role not in ROLES):
            raise SettingsError(
                f"agent_models: bad entry {item!r}; expected role=model with role one of *, {', '.join(ROLES)}"
            )
        if role == "*":
            chosen.update(dict.fromkeys(ROLES, model))
        else:
            named[role] = model
    return {**chosen, **named}


def _request_tools(role: str, *, escape_hatch: bool) -> list[dict[str, Any]]:
    definitions = tool_definitions(role) + block_tool_definitions(role, escape_hatch=escape_hatch)
    tools: list[dict[str, Any]] = [
        {"name": d.name, "description": d.description, "input_schema": d.input_schema} for d in definitions
    ]
    # One breakpoint after the tools and one after the system prompt: both are identical on every request
    # (the tools change once, when a pulsing session's escape hatch opens).
    tools[-1]["cache_control"] = {"type": "ephemeral"}
    return tools


def _build(role: str, model: str, *, thinking: bool) -> AgentConfig:
    prompt = system_prompt(role)
    budget = _THINKING.get(role) if thinking else None
    max_tokens = _MAX_TOKENS.get(role, 16_000)
    return AgentConfig(
        role=role,
        model=model,
        system_prompt=prompt,
        tool_names=frozenset(d.name for d in tool_definitions(role)),
        block_tools=ROLE_BLOCK_TOOLS[role],
        max_tokens=max(max_tokens, (budget or 0) + 4096),
        thinking_budget=budget,
        system=[{"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}}],
        tools=_request_tools(role, escape_hatch=False),
        hatch_tools=_request_tools(role, escape_hatch=True) if "complete_pulse" in ROLE_BLOCK_TOOLS[role] else None,
    )


class AgentRegistry:
    """Every role's :class:`AgentConfig`, with the models the settings choose."""

    def __init__(self, *, settings: AgentRunnerSettings) -> None:
        models = {**DEFAULT_MODELS, **parse_models(settings.agent_models)}
        self._agents: dict[str, AgentConfig] = {
            role: _build(role, models[role], thinking=settings.agent_thinking) for role in ROLES}

    def get(self, role: str) -> AgentConfig:
        """The agent of ``role`` (KeyError for an unknown role)."""
        return self._agents[role]

    def __iter__(self) -> Iterator[AgentConfig]:
        return iter(self._agents.values())
