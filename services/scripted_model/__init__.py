"""The scripted model: a stand-in for the LLM that speaks the Anthropic Messages API from scenario files.

Tests and the offline demo point the real agent runner (and the real ``anthropic`` SDK) at it, so
the production code path runs end to end without a network. See ``docs/scripted-model.md``.
"""

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
