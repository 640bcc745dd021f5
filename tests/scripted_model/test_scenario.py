"""Scenario files: the bundled examples, the shorthand forms, and precise errors for malformed ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autarch.services.scripted_model import ROLES, ScenarioError, bundled_scenarios, load_scenario, parse_scenario
from autarch.services.scripted_model.scenario import TextBlock, ToolUseBlock


def tool_calls(scenario: Any, key: str) -> list[ToolUseBlock]:
    return [b for step in scenario.scripts[key] for b in step.content if isinstance(b, ToolUseBlock)]


def test_bundled_scenarios_load():
    assert {"demo", "faults"} <= set(bundled_scenarios())
    for name in bundled_scenarios():
        assert load_scenario(name).scripts


def names_of_pulses(scenario: Any) -> list[str]:
    return sorted(key for key in scenario.scripts if key.startswith("pulsing"))


def test_demo_covers_every_role_with_its_block_tool():
    demo = load_scenario("demo")
    # Loop sessions (seed 001) have a demo of their own: the ``loop`` scenario.
    assert {key.partition(":")[0] for key in demo.scripts} == set(ROLES) - {"loop"}
    assert names_of_pulses(demo) == ["pulsing", "pulsing:pulse-2"]
    names = {key: [call.name for call in tool_calls(demo, key)] for key in demo.scripts}
    assert "read_file" in names["research"] and names["research"][-1] == "submit_research"
    for pulse in ("pulsing", "pulsing:pulse-2"):
        assert {"edit_file", "shell"} <= set(names[pulse]) and names[pulse][-1] == "complete_pulse"
    assert names["scoping"][-1] == "submit_scope"
    assert names["plan"][-1] == "submit_plan"
    assert names["preflight"][-1] == "complete_preflight"
    assert names["review"][-1] == "complete_review"


def test_demo_edits_apply_to_its_repository():
    # The pulses' edits must match the files the scenario was written against, in plan order.
    demo = load_scenario("demo")
    files = dict(demo.files)
    for call in [*tool_calls(demo, "pulsing"), *tool_calls(demo, "pulsing:pulse-2")]:
        if call.name == "edit_file":
            text = files[call.input["path"]]
            assert text.count(call.input["oldString"]) == 1, call.input
            files[call.input["path"]] = text.replace(call.input["oldString"], call.input["newString"])
    assert 'name = "world"' in files["greeter/core.py"]
    assert "def test_greet_empty_name" in files["tests/test_core.py"]


def test_shorthand_and_defaults():
    scenario = parse_scenario({"scripts": {"discussion": ["Hello there."]}})
    (step,) = scenario.scripts["discussion"]
    assert step.content == [TextBlock(text="Hello there.")]
    assert step.effective_stop_reason == "end_turn" and step.fail_first == [] and step.delay_ms == 0
    tool_step = parse_scenario({"scripts": {"review": [{"content": [{"type": "tool_use", "name": "get_diff"}]}]}})
    assert tool_step.scripts["review"][0].effective_stop_reason == "tool_use"


def test_toml_scenarios_load(tmp_path: Path):
    path = tmp_path / "s.toml"
    path.write_text('[[scripts."pulsing:pulse-2"]]\ncontent = [{ type = "text", text = "hi" }]\nfail_first = [429]\n')
    scenario = load_scenario(path)
    assert scenario.source == "s.toml"
    assert scenario.scripts["pulsing:pulse-2"][0].fail_first == [429]


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            {"scripts": {"research": [{"content": [{"type": "tool_use", "input": {}}]}]}},
            'Object missing required field `name` - at `scripts["research"][0].content[0]`',
        ),
        (
            {"scripts": {"research": ["ok", {"content": [{"type": "txt", "text": "?"}]}]}},
            "Invalid value 'txt' - at `scripts[\"research\"][1].content[0].type`",
        ),
        (
            {"scripts": {"plan": [{"contents": []}]}},
            'Object contains unknown field `contents` - at `scripts["plan"][0]`',
        ),
        (
            {"scripts": {"plan": [{"content": [{"type": "text", "text": "x"}], "delay_ms": -1}]}},
            'Expected `int` >= 0 - at `scripts["plan"][0].delay_ms`',
        ),
        ({"scripts": {"planning": ["x"]}}, "unknown role 'planning' in script key 'planning'"),
        ({"scripts": {"pulsing:pulse 2": ["x"]}}, "bad script key 'pulsing:pulse 2'"),
        (
            {"scripts": {"plan": [{"content": [{"type": "text", "text": "x"}], "fail_first": [429, 502]}]}},
            'unsupported error status 502 - at `scripts["plan"][0].fail_first[1]`',
        ),
        (
            {"scripts": {"plan": [{"content": [{"type": "text", "text": "x"}], "fail_first": [{"status": 1}]}]}},
            'unsupported error status 1 - at `scripts["plan"][0].fail_first[0].status`',
        ),
        (
            {"scripts": {"plan": [{"content": [{"type": "text", "text": "x"}], "stop_reason": "tool_use"}]}},
            "stop_reason 'tool_use' needs a tool_use block",
        ),
        ({"scripts": {"plan": [{"content": []}]}}, 'at least one content block - at `scripts["plan"][0].content`'),
        ({"scripts": {"plan": []}}, 'script has no steps - at `scripts["plan"]`'),
        ({"scripts": {}}, "`scripts` is empty"),
        ({"script": {}}, "Object contains unknown field `script`"),
        ({"scripts": {"plan": ["x"]}, "check_tools": "yes"}, "Expected `bool`, got `str` - at `check_tools`"),
        (
            {
                "scripts": {
                    "plan": [{"content": [{"type": "tool_use", "name": "a", "id": "toolu_1"}]}],
                    "review": [{"content": [{"type": "tool_use", "name": "b", "id": "toolu_1"}]}],
                }
            },
            "tool_use id 'toolu_1' is used twice",
        ),
    ],
)
def test_malformed_scenarios_name_the_bad_field(document: dict[str, Any], expected: str):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(document, source="bad.json")
    assert str(caught.value).startswith("bad.json: ")
    assert expected in str(caught.value)


def test_unreadable_and_invalid_files(tmp_path: Path):
    with pytest.raises(ScenarioError, match="cannot read scenario"):
        load_scenario(tmp_path / "missing.json")
    with pytest.raises(ScenarioError, match="no bundled scenario 'nope'"):
        load_scenario("nope")
    broken = tmp_path / "broken.json"
    broken.write_text('{"scripts": ')
    with pytest.raises(ScenarioError, match=r"^broken.json: not valid JSON"):
        load_scenario(broken)
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("scripts = [")
    with pytest.raises(ScenarioError, match=r"^bad.toml: not valid TOML"):
        load_scenario(bad_toml)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"scripts": {"review": ["fine"]}}))
    assert load_scenario(str(good)).source == "good.json"
