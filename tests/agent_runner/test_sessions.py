"""Agent sessions through real NATS, the real tools service and the real SDK against the scripted model."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import msgspec
import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import StartSession, TurnAccepted
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.services.agent_runner.domainmodel import Session
from autarch.services.agent_runner.service import open_runner

from .conftest import RUNNER, runner_settings, start_session, wait_turn
from .runners import run_turn_collecting_deltas
from .scenarios import NEW, PULSE_DONE, RESEARCH_CARD


async def test_research_session_reads_files_and_submits_a_research_card(nc, runner, repo):
    accepted = await start_session(nc, role="research", script="read-and-submit", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome is not None
    assert (turn.outcome.kind, turn.outcome.tool) == ("block", "submit_research")
    assert turn.outcome.arguments == RESEARCH_CARD
    read, grep = turn.tool_calls[:2]
    assert (read.name, read.is_error) == ("read_file", False)
    assert "Greet someone by name" in read.output
    assert grep.name == "grep" and json.loads(grep.output)["results"]
    assert turn.model_calls == 2
    assert [t.text for t in turn.thoughts] == ["greet is simple; one caller in tests."]
    assert turn.messages == ["Let me read the code.", "I have what I need."]
    assert turn.usage.input_tokens > 0 and turn.cost_usd > 0


async def test_pulsing_session_edits_a_file_runs_a_shell_command_and_completes_the_pulse(nc, runner, repo):
    accepted = await start_session(nc, role="pulsing", script="edit-and-shell", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome is not None and turn.outcome.kind == "block", turn
    assert (turn.outcome.tool, turn.outcome.arguments) == ("complete_pulse", PULSE_DONE)
    read, edit, shell, done = turn.tool_calls
    assert [c.is_error for c in (read, edit, shell)] == [False, False, False], turn.tool_calls
    assert (done.name, done.output) == ("complete_pulse", None)
    assert NEW in (repo / "greeter/core.py").read_text()
    assert json.loads(shell.output)["stdout"].strip() == "Hello, world!"
    assert shell.duration_ms > 0


def _request_for_step(scripted, key: str, step: int) -> dict:
    """The body of the last successful request for ``step`` of script ``key`` (one test per script)."""
    bodies = [r.body for r in scripted.requests if r.key == key and r.step == step and r.outcome == "ok"]
    assert bodies, f"no request for {key} step {step}"
    return bodies[-1]


def _tool_results(body: dict) -> dict[str, dict]:
    """tool_use id → tool_result block, over the request's messages."""
    return {
        b["tool_use_id"]: b
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }


@pytest.mark.parametrize(
    ("role", "script", "rules", "outcome_tool"),
    [
        ("pulsing", "two-blocks", ["one_per_message", "one_per_message"], "request_extension"),
        ("scoping", "not-last", ["not_last"], "submit_scope"),
        ("scoping", "not-alone", ["not_alone"], "submit_scope"),
        ("scoping", "bad-args", ["invalid_arguments"], "submit_scope"),
    ],
)
async def test_a_block_rule_violation_is_a_tool_error_and_the_turn_goes_on(
    nc, runner, repo, scripted, role, script, rules, outcome_tool
):
    accepted = await start_session(nc, role=role, script=script, root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome is not None and (turn.outcome.kind, turn.outcome.tool) == ("block", outcome_tool), turn
    assert turn.model_calls == 2
    rejected = [
        c for c in turn.tool_calls if c.step == 0 and c.name in ("submit_scope", "complete_pulse", "request_extension")
    ]
    assert [json.loads(c.output)["rule"] for c in rejected] == rules
    assert all(c.is_error and "Rejected" in json.loads(c.output)["error"] for c in rejected)
    assert len(turn.violations) == len(rules)
    # The model was told: its retry request carries each rejection as an error tool_result.
    retry = _request_for_step(scripted, f"{role}:{script}", 1)
    results = _tool_results(retry)
    for call in rejected:
        assert results[call.tool_use_id]["is_error"] is True
        assert results[call.tool_use_id]["content"] == call.output
    if script == "not-alone":
        read = next(c for c in turn.tool_calls if c.name == "read_file")
        assert not read.is_error and "Greet someone" in read.output  # the other call ran as usual


async def test_bad_tool_input_gets_errors_the_model_can_read_and_the_session_goes_on(nc, runner, repo, scripted):
    accepted = await start_session(nc, role="pulsing", script="bad-input", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome is not None and turn.outcome.kind == "end_turn", turn
    wrong_type, unknown, big, not_mine = turn.tool_calls
    assert wrong_type.is_error and "path" in wrong_type.output
    assert unknown.is_error and "Unknown tool 'teleport'" in json.loads(unknown.output)["error"]
    assert "not available to the pulsing agent" in json.loads(not_mine.output)["error"]
    assert "[output truncated: " in big.output and len(big.output.encode()) < 101_000
    results = _tool_results(_request_for_step(scripted, "pulsing:bad-input", 1))
    assert {c.tool_use_id for c in turn.tool_calls} == set(results)


@pytest.mark.parametrize("script", ["retry", "mid-stream"])
async def test_rate_limits_overloads_and_broken_streams_are_retried(nc, runner, repo, scripted, script):
    accepted = await start_session(nc, role="discussion", script=script, root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert turn.outcome is not None and turn.outcome.kind == "end_turn", turn
    assert turn.model_calls == 1 and turn.messages[0].startswith("Answer after")
    outcomes = [r.outcome for r in scripted.requests if r.key == f"discussion:{script}"]
    expected = ["injected_error", "injected_error", "ok"] if script == "retry" else ["failed_mid_stream", "ok"]
    assert outcomes[-len(expected) :] == expected


async def test_message_deltas_stream_live_and_the_completed_turn_has_the_full_text(nc, runner, repo):
    turn, got = await run_turn_collecting_deltas(nc, role="discussion", script="chat", root=repo)
    assert {d["type"] for d in got} == {"turn:message_delta"}
    assert {d["turn_id"] for d in got} == {turn.turn_id}
    assert "".join(d["text"] for d in got) == turn.messages[0] == "Hello there, this is greeter."


async def test_each_delta_names_the_reply_it_belongs_to(nc, runner, repo):
    turn, got = await run_turn_collecting_deltas(nc, role="discussion", script="two-replies", root=repo)
    by_step = {step: "".join(d["text"] for d in got if d["step"] == step) for step in (0, 1)}
    assert by_step == {0: "Looking at the module.", 1: "It greets by name."}
    assert turn.messages == ["Looking at the module.", "It greets by name."]


async def test_the_workflow_budget_ends_the_turn_before_the_next_model_call(nc, data_dir, scripted, tools, repo):
    _, stop = await open_runner(nc, runner_settings(data_dir, scripted, workflow_token_budget=10))
    try:
        accepted = await start_session(nc, role="discussion", script="budget", root=repo)
        view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    finally:
        await stop()
    [turn] = view.turns
    assert turn.outcome is not None and turn.outcome.kind == "budget_exceeded", turn
    assert "token budget" in turn.outcome.detail
    assert turn.model_calls == 1 and turn.tool_calls[0].output is not None  # the tool still ran; no second call


def _record_elsewhere(runner, command: StartSession) -> str:
    """Record ``command``'s session straight into the runner's store, as another process would have."""
    stored = Session(session_id=command.session_id, role=command.role, model=runner.registry.get(command.role).model,
                     root=command.root, run_id=command.run_id, channel_id=None, script=command.script,
                     notes=[], baselines=[], lease_holder=None, discipline=None)
    turn_id = f"turn-recorded-elsewhere-{uuid.uuid4().hex[:6]}"
    stored.start_turn(turn_id=turn_id, index=0, text=command.kickoff, notes=[], message_id=None, stage_notes=None,
                      at=datetime.now(UTC))
    runner.app.save(stored)
    return turn_id


async def test_a_start_the_store_already_holds_is_answered_from_the_store_and_its_turn_runs(nc, runner, repo):
    # A first try's commit went through but its answer was lost (the store's connection cut at the commit), or a
    # runner before this one recorded the start: the store holds the session, this process does not.
    def command() -> StartSession:
        return StartSession(session_id=str(uuid.uuid4()), role="research", root=str(repo), kickoff="Do the task.",
                            script="read-and-submit", run_id=str(uuid.uuid4()))

    start = subjects.request(RUNNER, "start_session")
    repeat = command()
    recorded = _record_elsewhere(runner, repeat)
    again = await request(nc, start, repeat, TurnAccepted)
    assert (again.turn_id, again.created) == (recorded, False)
    view = await wait_turn(nc, repeat.session_id, recorded)  # recorded, never run: this runner runs it
    [turn] = view.turns
    assert turn.outcome is not None and turn.outcome.tool == "submit_research"

    differing = command()
    _record_elsewhere(runner, differing)
    with pytest.raises(RemoteError) as conflict:
        await request(nc, start, msgspec.structs.replace(differing, kickoff="Something else."), TurnAccepted)
    assert conflict.value.code == "conflict" and "other fields" in str(conflict.value)
