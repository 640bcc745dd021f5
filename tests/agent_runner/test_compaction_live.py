"""In-turn compaction through the real runner: one long pulsing turn outgrows a small context window.

The scripted model here enforces a context window (``prompt is too long``, as the real API refuses),
so a turn that never compacts fails where this one keeps going.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from autarch.runtime.settings import Settings
from autarch.services.agent_runner.agents import AgentRegistry
from autarch.services.agent_runner.compaction import KEEP_RECENT_STEPS
from autarch.services.scripted_model import ScriptedModelServer
from autarch.services.scripted_model.protocol import estimate_tokens

from .conftest import REPO_FILES, git_repo
from .runners import own_runner, run_turn
from .scenarios import step, text, tool

READS = 10
LINES = 400
NOTE = "Keep greet() backwards compatible."
TASK = "Implement pulse-1: read every part of the module, then report."


def _part(n: int) -> str:
    return "".join(f"part {n} line {i}: the greeting module keeps its helpers here\n" for i in range(LINES))


def _result_tokens() -> int:
    """What one read_file result adds to a request, as the scripted model counts it (some 7k tokens)."""
    numbered = "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(_part(0).splitlines(), 1))
    return estimate_tokens(msgspec.json.encode(numbered))


def _fixed_tokens() -> int:
    """The system prompt and tool definitions of a pulsing request, as the scripted model counts them."""
    agent = AgentRegistry(settings=Settings(data_dir="/tmp/unused")).get("pulsing")
    return estimate_tokens(msgspec.json.encode(agent.system) + msgspec.json.encode(agent.tools))


WINDOW = _fixed_tokens() + int(5.5 * _result_tokens())
"""Room for five results, not six: without compaction the request for step 6 is refused."""

SCENARIO = {
    "context_window": WINDOW,
    "check_tools": True,
    "scripts": {
        "pulsing:long": [
            *(step(tool("read_file", reason=f"Read part {n}", path=f"parts/part{n}.txt")) for n in range(READS)),
            step(text("Read every part.")),
        ],
    },
}


@pytest.fixture(scope="module")
def windowed() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCENARIO) as server:
        yield server


@pytest.fixture
def long_repo(tmp_path: Path) -> Path:
    return git_repo(tmp_path / "repo", {**REPO_FILES, **{f"parts/part{n}.txt": _part(n) for n in range(READS)}})


async def _run(nc, data_dir, server, repo, **settings):
    async with own_runner(nc, data_dir, server, context_window_tokens=WINDOW, **settings):
        _, turn = await run_turn(nc, role="pulsing", script="long", root=repo, kickoff=TASK, notes=[NOTE],
                                 timeout=60)
    return turn


def _results(messages: list[dict]) -> list[dict]:
    return [b for m in messages if m["role"] == "user" for b in m["content"] if b.get("type") == "tool_result"]


def _stubs(results: list[dict]) -> list[int]:
    return [n for n, r in enumerate(results) if r["content"].startswith('{"elided"')]


async def test_a_long_turn_elides_its_older_results_and_keeps_going_past_the_window(
    nc, data_dir, tools, windowed, long_repo
):
    windowed.reset()
    turn = await _run(nc, data_dir, windowed, long_repo)
    assert turn.outcome is not None and turn.outcome.kind == "end_turn", turn.outcome
    assert turn.model_calls == READS + 1 and turn.messages == ["Read every part."]
    assert all(not c.is_error and f"part {n} line 0" in c.output for n, c in enumerate(turn.tool_calls))
    requests = [r for r in windowed.requests if r.key == "pulsing:long"]
    assert [r.outcome for r in requests] == ["ok"] * (READS + 1)  # never over the window
    last = requests[-1].body["messages"]
    # The task and the notes are sent whole, in the turn's opening message.
    opening = last[0]["content"]
    assert NOTE in opening[0]["text"] and opening[1]["text"] == TASK
    results = _results(last)
    assert len(results) == READS
    stubs = _stubs(results)
    # Older results went in rounds as the turn grew (not one more at every step); recent ones stay whole.
    first_round = _stubs(_results(requests[6].body["messages"]))
    assert first_round and len(first_round) < len(stubs)
    assert all(_stubs(_results(r.body["messages"])) == first_round for r in requests[7:-2])
    assert stubs == list(range(len(stubs))) and len(stubs) >= READS - 5
    assert all(f"part {n} line 0" in results[n]["content"] for n in range(len(stubs), READS))
    assert len(stubs) <= READS - KEEP_RECENT_STEPS
    stub = json.loads(results[0]["content"])["elided"]
    assert "call read_file again" in stub and "context window" in stub
    # The model still sees each call it made, with its arguments.
    paths = [b["input"]["path"] for m in last if m["role"] == "assistant" for b in m["content"]]
    assert paths == [f"parts/part{n}.txt" for n in range(READS)]


async def test_a_request_the_api_finds_too_long_is_compacted_and_sent_again(nc, data_dir, tools, windowed, long_repo):
    windowed.reset()
    # A threshold at the window itself is never crossed by a request the model accepted: the runner never
    # compacts ahead, so the API's own refusal ("prompt is too long") is what makes it compact.
    turn = await _run(nc, data_dir, windowed, long_repo, compaction_threshold=1.0)
    assert turn.outcome is not None and turn.outcome.kind == "end_turn", turn.outcome
    assert turn.model_calls == READS + 1 and not any(c.is_error for c in turn.tool_calls)
    requests = [r for r in windowed.requests if r.key == "pulsing:long"]
    refused = [r.step for r in requests if r.outcome == "rejected"]
    assert refused and refused[0] == 6  # room for five results, not six
    assert all("prompt is too long" in (r.error or "") for r in requests if r.outcome == "rejected")
    # Each refused request was followed by one at the same step, compacted, which the model answered.
    for n, r in enumerate(requests):
        if r.outcome == "rejected":
            after = requests[n + 1]
            assert (after.step, after.outcome) == (r.step, "ok")
            assert len(_stubs(_results(after.body["messages"]))) > len(_stubs(_results(r.body["messages"])))


async def test_a_request_still_too_long_after_compacting_ends_the_turn_with_a_typed_outcome(
        nc, data_dir, tools, windowed, long_repo):
    windowed.reset()
    # Six parts read in one reply: the next request is over the window, and one reply's results cannot be elided
    # (the last replies of a turn are always sent whole).
    reads = [tool("read_file", reason=f"Read part {n}", path=f"parts/part{n}.txt") for n in range(6)]
    windowed.use({**SCENARIO, "scripts": {"pulsing:long": [{"content": reads}, step(text("Read them."))]}})
    try:
        turn = await _run(nc, data_dir, windowed, long_repo, compaction_threshold=1.0)
    finally:
        windowed.use(SCENARIO)
    assert turn.outcome is not None and turn.outcome.kind == "context_overflow", turn.outcome
    detail = turn.outcome.detail
    assert detail.startswith("the request is longer than the model's context window (model API answered 400: "
                             "prompt is too long: ")
    assert "nothing is left to compact" in detail
    assert turn.model_calls == 1
