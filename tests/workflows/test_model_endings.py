"""Every way a model reply can end, met in a whole workflow (every service a process, the scripted model speaking
the Messages API through the real SDK): pulse-1's agent is cut off by ``max_tokens`` inside a tool call, paused,
refused, outgrows the context window, or sends arguments that are not what the tool takes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import scenarios
from .conftest import Client, approve_stages, branch_log, finish, start
from .endings import (
    BIG_FILES,
    EXPLANATION,
    REFUSED_WORDS,
    call,
    cut,
    malformed,
    paused,
    reads,
    reads_at_once,
    refused,
    window,
)

FEAT = "feat(greeter): greet the world when the name is empty"
TEST = "test(greeter): cover the empty-name greeting"


def _pulse_1(*steps: Any, context_window: int | None = None) -> dict[str, Any]:
    """The demo, pulse-1 scripted as ``steps`` (the demo's own steps by name: read, edit, check, complete)."""
    s = scenarios.base()
    demo = s["scripts"]["pulsing"]
    named = {"read": demo[0], "edit": demo[1], "check": demo[2], "complete": demo[3], "done": demo[4]}
    s["scripts"]["pulsing:pulse-1"] = [named[x] if isinstance(x, str) else x for x in steps]
    if context_window is not None:
        s["context_window"] = context_window
        s["files"] = {**s["files"], **BIG_FILES}
    return s


def _edit_block(scenario: dict[str, Any]) -> dict[str, Any]:
    return scenario["scripts"]["pulsing"][1]["content"][0]


def _pulse_1_requests(model) -> list:
    return [r for r in model.requests if r.key == "pulsing:pulse-1"]


def _tool_results(client: Client, wid: str, tool: str) -> list[dict[str, Any]]:
    return [e for e in client.events(wid) if e["type"] == "turn:tool_completed" and e["tool"] == tool]


def _done(client: Client, repo: Path, wid: str) -> None:
    approve_stages(client, wid)
    view = finish(client, wid)
    assert branch_log(repo, view["branch"]) == [TEST, FEAT]


def test_a_call_cut_by_max_tokens_is_made_again_with_twice_the_budget(client: Client, model, tmp_path: Path):
    s = scenarios.base()
    s = _pulse_1("read", cut(_edit_block(s)), "edit", "check", "complete", "done")
    wid, repo = start(client, model, tmp_path, s)
    _done(client, repo, wid)
    first, second = _tool_results(client, wid, "edit_file")[:2]
    assert first["is_error"] and "max_tokens limit" in first["output"] and "did not run" in first["output"]
    assert not second["is_error"]
    budgets = [r.body["max_tokens"] for r in _pulse_1_requests(model) if r.outcome == "ok"]
    assert budgets[2] == 2 * budgets[1] and budgets[-1] == budgets[2]


def test_a_paused_reply_is_carried_on(client: Client, model, tmp_path: Path):
    wid, repo = start(client, model, tmp_path, _pulse_1("read", paused("Thinking about the edit"), "edit", "check",
                                                        "complete", "done"))
    _done(client, repo, wid)
    carried_on = _pulse_1_requests(model)[2].body["messages"]
    assert carried_on[-1] == {"role": "assistant", "content": [{"type": "text", "text": "Thinking about the edit"}]}


def test_a_refusal_halts_the_pulse_with_the_models_words(client: Client, model, tmp_path: Path):
    wid, _ = start(client, model, tmp_path, _pulse_1("read", refused()))
    approve_stages(client, wid)
    view = client.wait_halted(wid, "error", timeout=90)
    message = view["halt"]["message"]
    assert message.startswith("the pulse:pulse-1 agent stopped: the model refused to go on")
    assert EXPLANATION in message and f'its words: "{REFUSED_WORDS}"' in message
    assert view["halt"]["pulse_id"] == "pulse-1"
    [turn] = [e for e in client.events(wid, until="workflow:halted")
              if e["type"] == "turn:completed" and e["outcome"] == "refusal"]
    assert REFUSED_WORDS in turn["detail"]


def test_a_turn_over_the_context_window_is_compacted_and_goes_on(client: Client, model, tmp_path: Path):
    # Room for three big reads: the request after the fourth is refused, compacted (the oldest read elided) and
    # sent again.
    s = _pulse_1("read", *reads(0, 4), "edit", "check", "complete", "done", context_window=window("pulsing"))
    wid, repo = start(client, model, tmp_path, s)
    _done(client, repo, wid)
    requests = _pulse_1_requests(model)
    assert [r.step for r in requests if r.outcome == "rejected"] == [5]
    assert all("prompt is too long" in (r.error or "") for r in requests if r.outcome == "rejected")
    retried = next(r for r in requests if r.step == 5 and r.outcome == "ok")
    results = [b for m in retried.body["messages"] if m["role"] == "user" for b in m["content"]
               if b.get("type") == "tool_result"]
    assert results[1]["content"].startswith('{"elided"') and "part 1 line 0" in results[2]["content"]


def test_a_turn_still_over_the_window_halts_with_a_typed_outcome(client: Client, model, tmp_path: Path):
    s = _pulse_1("read", reads_at_once(4), "edit", context_window=window("pulsing"))
    wid, _ = start(client, model, tmp_path, s)
    approve_stages(client, wid)
    view = client.wait_halted(wid, "error", timeout=90)
    assert view["halt"]["message"].startswith(
        "the pulse:pulse-1 agent failed: the request is longer than the model's context window")
    assert "prompt is too long" in view["halt"]["message"]
    [turn] = [e for e in client.events(wid, until="workflow:halted") if e["type"] == "turn:completed"
              and e["outcome"] == "context_overflow"]
    assert "nothing is left to compact" in turn["detail"]


def test_arguments_that_are_not_what_the_tool_takes_are_errors_the_agent_fixes(client: Client, model,
                                                                               tmp_path: Path):
    wrong_shape = {"content": [call("edit_file", reason="Edit greet", path=["greeter/core.py"], oldString=7)]}
    wid, repo = start(client, model, tmp_path, _pulse_1("read", malformed("edit_file"), wrong_shape, "edit",
                                                        "check", "complete", "done"))
    _done(client, repo, wid)
    bad_json, bad_shape, good = _tool_results(client, wid, "edit_file")[:3]
    assert bad_json["is_error"] and "not a JSON object" in json.loads(bad_json["output"])["error"]
    assert bad_shape["is_error"] and "Invalid arguments for edit_file" in bad_shape["output"]
    assert not good["is_error"]
