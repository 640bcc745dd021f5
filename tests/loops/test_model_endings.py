"""Every way a model reply can end, met in a loop session (every service a process, the scripted model speaking
the Messages API through the real SDK): the iteration's agent is cut off by ``max_tokens`` inside a tool call,
paused, refused, outgrows the context window, or sends arguments that are not what the tool takes."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from autarch.contracts.loops import LoopView
from tests.workflows.conftest import make_repo
from tests.workflows.endings import (
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

from .conftest import FILES, Loops, text, write

HEALTH = "def health():\n    return 'ok'\n"
DONE = "feat(shop): add a health function\n\n<signal>COMPLETE</signal>"


def _start(model, loops: Loops, script: str, steps: list[Any], *, context_window: int | None = None) -> LoopView:
    scenario: dict[str, Any] = {"files": FILES, "scripts": {f"loop:{script}.i1": steps}}
    files = FILES
    if context_window is not None:
        scenario["context_window"] = context_window
        files = {**FILES, **BIG_FILES}
    model.use(scenario)
    repo = make_repo(loops.tmp / script, files)
    return loops.start(repo, script)


def _requests(model, script: str) -> list:
    return [r for r in model.requests if r.key == f"loop:{script}.i1"]


def _health_committed(view: LoopView) -> None:
    assert view.total_commits == 1 and view.iterations[0].files_changed == ["shop/health.py"], view
    shown = subprocess.run(["git", "-C", view.project_path, "show", f"{view.branch_name}:shop/health.py"],
                           check=True, capture_output=True, text=True).stdout
    assert shown == HEALTH


def test_a_call_cut_by_max_tokens_is_made_again_with_twice_the_budget(model, loops: Loops):
    block = write("shop/health.py", HEALTH)
    started = _start(model, loops, "cut", [cut(block), {"content": [block]}, DONE])
    view = loops.wait_status(started.id, "complete")
    _health_committed(view)
    budgets = [r.body["max_tokens"] for r in _requests(model, "cut") if r.outcome == "ok"]
    assert budgets[1] == 2 * budgets[0] and budgets[2] == budgets[1]
    cut_result = _requests(model, "cut")[1].body["messages"][-1]["content"][0]
    assert cut_result["is_error"] and "max_tokens limit" in cut_result["content"]


def test_a_paused_reply_is_carried_on(model, loops: Loops):
    started = _start(model, loops, "pause", [paused("Looking at the shop first"),
                                             {"content": [write("shop/health.py", HEALTH)]}, DONE])
    view = loops.wait_status(started.id, "complete")
    _health_committed(view)
    carried_on = _requests(model, "pause")[1].body["messages"]
    assert carried_on[-1] == {"role": "assistant", "content": [text("Looking at the shop first")]}


def test_a_refusal_blocks_the_session_with_the_models_words(model, loops: Loops):
    started = _start(model, loops, "refuse", [refused()])
    view = loops.wait_status(started.id, "blocked")
    it = view.iterations[0]
    assert it.status == "failed" and it.signal == "BLOCKED"
    assert EXPLANATION in (view.status_reason or "") and f'its words: "{REFUSED_WORDS}"' in (view.status_reason or "")
    assert view.total_commits == 0


def test_an_iteration_over_the_context_window_is_compacted_and_goes_on(model, loops: Loops):
    steps = [*reads(0, 4), {"content": [write("shop/health.py", HEALTH)]}, DONE]
    started = _start(model, loops, "window", steps, context_window=window("loop"))
    view = loops.wait_status(started.id, "complete")
    _health_committed(view)
    requests = _requests(model, "window")
    assert [r.step for r in requests if r.outcome == "rejected"] == [4]
    assert all("prompt is too long" in (r.error or "") for r in requests if r.outcome == "rejected")


def test_an_iteration_still_over_the_window_blocks_the_session_with_a_typed_reason(model, loops: Loops):
    started = _start(model, loops, "overflow", [reads_at_once(4), DONE], context_window=window("loop"))
    view = loops.wait_status(started.id, "blocked")
    assert view.iterations[0].status == "failed"
    reason = view.status_reason or ""
    assert "context_overflow" in reason and "prompt is too long" in reason and "nothing is left to compact" in reason


def test_arguments_that_are_not_what_the_tool_takes_are_errors_the_agent_fixes(model, loops: Loops):
    wrong_shape = {"content": [call("write_file", reason="Write it", path=["shop/health.py"], content=7)]}
    started = _start(model, loops, "args", [malformed("write_file"), wrong_shape,
                                            {"content": [write("shop/health.py", HEALTH)]}, DONE])
    view = loops.wait_status(started.id, "complete")
    _health_committed(view)
    results = [b for m in _requests(model, "args")[-1].body["messages"] if m["role"] == "user"
               and isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"]
    assert results[0]["is_error"] and "not a JSON object" in json.loads(results[0]["content"])["error"]
    assert results[1]["is_error"] and "Invalid arguments for write_file" in results[1]["content"]
