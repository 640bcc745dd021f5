"""The scripted model: a stand-in for the LLM that speaks the Anthropic Messages API from scenario files.

Tests and the offline demo point the real agent runner (and the real ``anthropic`` SDK) at it, so
the production code path runs end to end without a network. See ``docs/scripted-model.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .scenario import (
        ROLES,
        Scenario,
        ScenarioError,
        Step,
        bundled_scenario_path,
        bundled_scenarios,
        load_scenario,
        parse_scenario,
    )
    from .server import ROLE_HEADER, SCRIPT_HEADER, RecordedRequest, ScriptedModelApp, ScriptedModelServer, serve

__all__ = [
    "ROLES",
    "ROLE_HEADER",
    "SCRIPT_HEADER",
    "RecordedRequest",
    "Scenario",
    "ScenarioError",
    "ScriptedModelApp",
    "ScriptedModelServer",
    "Step",
    "bundled_scenario_path",
    "bundled_scenarios",
    "load_scenario",
    "parse_scenario",
    "serve",
]

_HOME = {name: ".server" for name in ("ROLE_HEADER", "SCRIPT_HEADER", "RecordedRequest", "ScriptedModelApp",
                                      "ScriptedModelServer", "serve")}
_HOME.update({name: ".scenario" for name in __all__ if name not in _HOME})


def __getattr__(name: str) -> Any:
    # Each name loads its module on first use: the CLI builds `autarch model serve-scripted`'s parser from
    # this package (`.command`) at every start, and must pay neither for the server (uvicorn) nor for the
    # scenario format.
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
