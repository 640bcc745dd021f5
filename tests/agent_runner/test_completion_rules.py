"""complete_pulse's rules (Conventional Commit summary, progressive rejection and its escape hatch), baseline
filtering, and research's mandatory yield: the pure parts on their own, then through the real runner."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import (
    BLOCK_TOOL_DESCRIPTIONS,
    Baseline,
    SendMessage,
    TurnAccepted,
    block_tool_definitions,
)
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.runtime.sqlite_store import MODULE as SQLITE_MODULE
from autarch.runtime.sqlite_store import SYNCHRONOUS_ENV
from autarch.services.agent_runner.agents import AgentRegistry
from autarch.services.agent_runner.application import SessionApplication
from autarch.services.agent_runner.baselines import error_lines, explained_by_baselines, matches
from autarch.services.agent_runner.blocks import classify
from autarch.services.agent_runner.completion import unresolved_failures
from autarch.services.agent_runner.domainmodel import Session, ToolCall
from autarch.services.agent_runner.prompts import PROMPTS
from autarch.services.agent_runner.views import view_of

from .conftest import RUNNER, start_session, wait_turn
from .scenarios import ISSUES, KNOWN_WARNING, NEW_ERROR, PULSE_DONE

REGISTRY = AgentRegistry(settings=Settings(data_dir="/tmp/unused"))
PULSING = REGISTRY.get("pulsing")
LEGACY = Baseline(issue_type="Warning", source="Build", pattern="CS0618", file_path="src/Legacy.cs")


def _pulse(**input: Any) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": "z", "name": "complete_pulse", "input": input}]


def _failed_shell(stdout: str = "", stderr: str = "", *, exit_code: int | None = 1, **extra: Any) -> ToolCall:
    call = ToolCall(tool_use_id=str(uuid.uuid4()), name="shell", input={"command": "make"}, step=0)
    result = {"success": exit_code is not None, "exit_code": exit_code, "stdout": stdout, "stderr": stderr, **extra}
    call.output, call.is_error = json.dumps(result), True
    return call


def _rule(content: list[dict[str, Any]], *, history: Sequence[ToolCall] = (), rejections: int = 0,
          baselines: Sequence[Baseline] = ()) -> str | None:
    """The rule a reply broke (None: it ended the turn)."""
    verdict = classify(content=content, agent=PULSING, history=history, completion_rejections=rejections,
                       baselines=baselines)
    if verdict.ending_id is not None:
        return None
    [rejection] = verdict.rejections
    return rejection.rule


def _complete_pulse_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    return next(t for t in tools if t["name"] == "complete_pulse")["input_schema"]


# --- block-tool definitions -----------------------------------------------------------------------------


def test_block_tools_are_described_as_tool_calls_with_every_yield_rule():
    for role in ("scoping", "research", "plan", "preflight", "pulsing"):
        for definition in block_tool_definitions(role):
            text = definition.description
            assert ":::" not in text and "autarch-" not in text and "emit" not in text.lower(), definition.name
            for rule in ("ends your turn", "on its own", "last content of your message", "stop"):
                assert rule in text, (definition.name, rule)
    assert set(BLOCK_TOOL_DESCRIPTIONS) == {"submit_scope", "submit_research", "submit_plan", "request_extension",
                                            "ask_questions", "complete_pulse", "complete_preflight"}


def test_the_escape_hatch_is_offered_only_once_open_and_the_prompt_never_names_it():
    closed, opened = PULSING.tools_for(escape_hatch=False), PULSING.tools_for(escape_hatch=True)
    assert "unresolvedIssues" not in _complete_pulse_schema(closed)["properties"]
    assert "unresolvedIssues" in _complete_pulse_schema(opened)["properties"]
    assert "unresolvedIssues" not in json.dumps(closed) and "unresolvedIssues" in json.dumps(opened)
    for tools in (closed, opened):
        assert tools[-1]["cache_control"] == {"type": "ephemeral"}
        assert sum("cache_control" in t for t in tools) == 1
    assert [t["name"] for t in closed] == [t["name"] for t in opened]
    assert all("unresolvedIssues" not in prompt and "escape hatch" not in prompt for prompt in PROMPTS.values())
    # A role without complete_pulse has a single tool list.
    research = REGISTRY.get("research")
    assert research.tools_for(escape_hatch=True) is research.tools


# --- complete_pulse's checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("summary", "accepted"),
    [
        ("feat(auth): validate JWT tokens", True),
        ("fix: handle an empty name", True),
        ("refactor(core)!: drop the old greeting\n\nBREAKING CHANGE: greet() takes a name", True),
        ("ci(github actions): cache the venv", True),
        ("Updated the greeting", False),
        ("feature(auth): validate tokens", False),  # not one of seed 004's types
        ("Feat(auth): validate tokens", False),
        ("feat(auth):validate tokens", False),
        ("feat(): empty scope", False),
        ("feat(auth): ", False),
    ],
)
def test_the_summary_must_be_a_conventional_commit_of_the_seed_types(summary, accepted):
    rule = _rule(_pulse(summary=summary, filesChanged=["a.py"]))
    assert rule == (None if accepted else "invalid_arguments")
    if not accepted:
        verdict = classify(content=_pulse(summary=summary, filesChanged=[]), agent=PULSING, history=[],
                           completion_rejections=0)
        message = json.loads(verdict.rejections[0].message)["error"]
        assert "Conventional Commit" in message and "feat(auth): validate JWT tokens" in message


def test_unresolved_issues_are_refused_before_the_hatch_opens_and_when_nothing_is_unresolved():
    failing = [_failed_shell(stderr="error: boom happened here")]
    with_issues = _pulse(**PULSE_DONE, unresolvedIssues=ISSUES)
    plain = _pulse(**PULSE_DONE)
    # Before the hatch opens, the field is an argument error whether or not something failed...
    assert _rule(with_issues, history=failing, rejections=1) == "invalid_arguments"
    assert _rule(with_issues, history=[], rejections=0) == "invalid_arguments"
    # ...and the plain call is refused while the failure stands, until the hatch opens.
    assert _rule(plain, history=failing, rejections=1) == "completion_rejected"
    assert _rule(with_issues, history=failing, rejections=2) is None
    assert _rule(plain, history=failing, rejections=2) == "completion_rejected"
    # Once open, listing issues when nothing is unresolved would halt the workflow for nothing.
    verdict = classify(content=with_issues, agent=PULSING, history=[], completion_rejections=2)
    assert verdict.ending_id is None and verdict.rejections[0].rule == "invalid_arguments"
    assert "nothing is unresolved" in verdict.rejections[0].message
    assert _rule(plain, history=[], rejections=2) is None


# --- baselines ------------------------------------------------------------------------------------------


def test_a_baseline_matches_a_line_by_pattern_and_by_the_file_it_names():
    assert matches(LEGACY, "src/Legacy.cs(10,5): warning CS0618: obsolete")
    assert matches(LEGACY, r"C:\work\src\Legacy.cs(10,5): warning CS0618: obsolete")
    assert matches(LEGACY, "/tmp/wt/src/Legacy.cs:10: warning CS0618")
    assert not matches(LEGACY, "src/Other.cs(10,5): warning CS0618: obsolete")  # another file
    assert not matches(LEGACY, "src/OldLegacy.cs(10,5): warning CS0618")  # not the same file
    assert not matches(LEGACY, "src/Legacy.cs.bak(1,1): warning CS0618")
    assert not matches(LEGACY, "src/Legacy.cs(10,5): warning CS0612: obsolete")  # another issue
    anywhere = Baseline(issue_type="Error", source="Test", pattern="test_flaky_network")
    assert matches(anywhere, "FAILED tests/test_net.py::test_flaky_network - TimeoutError")


def test_error_lines_are_diagnostics_not_tallies_or_wrap_ups():
    output = "\n".join([
        "  Restoring packages...",
        KNOWN_WARNING,
        "main.c:3:5: error: unknown type name 'foo'",
        "a.py:1:8: F401 [*] `os` imported but unused",
        "  3:1  error  'x' is defined but never used  no-unused-vars",
        "ZeroDivisionError: division by zero",
        "Build FAILED.",
        "    1 Warning(s)",
        "    2 Error(s)",
        "make: *** [Makefile:2: all] Error 1",
        "Found 2 errors in the same file, starting at: src/a.ts:3",
        "==== 1 failed, 2 passed in 0.12s ====",
        "FAILED (failures=1)",
        "Time Elapsed 00:00:01.23",
    ])
    assert error_lines(output) == [
        KNOWN_WARNING,
        "main.c:3:5: error: unknown type name 'foo'",
        "a.py:1:8: F401 [*] `os` imported but unused",
        "3:1  error  'x' is defined but never used  no-unused-vars",
        "ZeroDivisionError: division by zero",
    ]


def test_a_failed_command_is_explained_only_when_every_error_line_is_a_baseline():
    only_known = _failed_shell(stderr=f"{KNOWN_WARNING}\nBuild FAILED.\n    1 Warning(s)\n")
    assert explained_by_baselines(only_known.output, [LEGACY])
    assert unresolved_failures([only_known], [LEGACY]) == []
    assert len(unresolved_failures([only_known])) == 1  # without baselines it is a failure
    one_more = _failed_shell(stdout=KNOWN_WARNING, stderr=f"{NEW_ERROR}\nBuild FAILED.")
    assert not explained_by_baselines(one_more.output, [LEGACY])
    assert len(unresolved_failures([one_more], [LEGACY])) == 1
    # Nothing to judge is never "explained": no output, a timeout, output cut away, a result that is not JSON.
    assert not explained_by_baselines(_failed_shell().output, [LEGACY])
    assert not explained_by_baselines(_failed_shell(stdout="Build FAILED.").output, [LEGACY])
    timed_out = _failed_shell(stderr=KNOWN_WARNING, exit_code=None, error="Command timed out after 60 seconds")
    assert not explained_by_baselines(timed_out.output, [LEGACY])
    cut = _failed_shell(stderr=f"{KNOWN_WARNING}\n... [900 characters omitted] ...\n{KNOWN_WARNING}")
    assert not explained_by_baselines(cut.output, [LEGACY])
    assert not explained_by_baselines(only_known.output[:60] + "\n[output truncated: 2000 bytes", [LEGACY])


# --- recorded sessions ----------------------------------------------------------------------------------


def test_a_session_recorded_before_baselines_existed_still_loads(tmp_path):
    db = tmp_path / "events.sqlite"
    env = {"PERSISTENCE_MODULE": SQLITE_MODULE, "SQLITE_DBNAME": str(db), SYNCHRONOUS_ENV: "NORMAL"}
    app = SessionApplication(env=env)
    session = Session(session_id=str(uuid.uuid4()), role="pulsing", model="m", root="/repo", run_id="wf",
                      channel_id=None, script=None, notes=["n"])
    app.save(session)
    app.close()
    # Rewrite the stored Started event as an older runner wrote it: without the baselines key.
    with sqlite3.connect(db) as connection:
        [(state,)] = connection.execute("SELECT state FROM stored_events WHERE topic LIKE '%Session.Started'")
        old = json.loads(state)
        assert old.pop("baselines") is None
        connection.execute("UPDATE stored_events SET state = ? WHERE topic LIKE '%Session.Started'",
                           (json.dumps(old).encode(),))
    app = SessionApplication(env=env)
    again = app.get_session(str(session.id))
    app.close()
    assert again.baselines == [] and view_of(again) == view_of(session)


# --- through the runner ---------------------------------------------------------------------------------


def _requests(scripted, key: str) -> dict[int, dict]:
    """Step → the body of its successful request."""
    return {r.step: r.body for r in scripted.requests if r.key == key and r.outcome == "ok"}


def _error(call) -> dict[str, Any]:
    assert call.is_error, call
    return json.loads(call.output)


async def test_a_build_failing_only_on_baseline_issues_does_not_hold_back_completion(nc, runner, repo):
    accepted = await start_session(nc, role="pulsing", script="baseline-only", root=repo, baselines=[LEGACY])
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    shell, done = turn.tool_calls
    assert shell.is_error and "CS0618" in shell.output  # the build did fail...
    assert (turn.outcome.kind, turn.outcome.tool) == ("block", "complete_pulse"), turn  # ...on a known issue only
    assert done.output is None and turn.violations == []


async def test_one_new_error_beside_baseline_issues_still_rejects_completion(nc, runner, repo):
    accepted = await start_session(nc, role="pulsing", script="baseline-plus-new", root=repo, baselines=[LEGACY])
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert (turn.outcome.kind, turn.outcome.tool) == ("block", "request_extension"), turn
    refused = next(c for c in turn.tool_calls if c.name == "complete_pulse")
    error = _error(refused)
    assert error["rule"] == "completion_rejected" and "CS0103" in error["error"]


async def test_the_escape_hatch_is_revealed_in_the_tools_only_after_repeated_rejections(nc, runner, repo, scripted):
    accepted = await start_session(nc, role="pulsing", script="escape-hatch", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert (turn.outcome.kind, turn.outcome.tool) == ("block", "complete_pulse"), turn
    assert turn.outcome.arguments["unresolvedIssues"] == ISSUES
    refused = [_error(c) for c in turn.tool_calls if c.name == "complete_pulse" and c.output is not None]
    assert [e["rule"] for e in refused] == ["invalid_arguments", "completion_rejected", "completion_rejected"]
    assert "no unresolvedIssues argument" in refused[0]["error"]
    assert "unresolvedIssues" not in refused[1]["error"] and "unresolvedIssues" in refused[2]["error"]
    # What the model was offered: complete_pulse without the field until the second rejection, then with it.
    requests = _requests(scripted, "pulsing:escape-hatch")
    offered = {step: "unresolvedIssues" in _complete_pulse_schema(body["tools"])["properties"]
               for step, body in requests.items()}
    assert offered == {0: False, 1: False, 2: False, 3: False, 4: True}
    assert all(body["tools"][-1]["cache_control"] == {"type": "ephemeral"} for body in requests.values())
    assert all("unresolvedIssues" not in body["system"][0]["text"] for body in requests.values())


async def test_listing_issues_once_everything_is_fixed_is_refused_and_the_plain_completion_accepted(
        nc, runner, repo):
    accepted = await start_session(nc, role="pulsing", script="hatch-not-needed", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert (turn.outcome.kind, turn.outcome.tool) == ("block", "complete_pulse"), turn
    assert "unresolvedIssues" not in turn.outcome.arguments
    refused = [_error(c) for c in turn.tool_calls if c.name == "complete_pulse" and c.output is not None]
    assert [e["rule"] for e in refused] == ["completion_rejected", "completion_rejected", "invalid_arguments"]
    assert "nothing is unresolved" in refused[-1]["error"]


async def test_a_bad_commit_summary_is_refused_and_fixed_within_the_turn(nc, runner, repo):
    accepted = await start_session(nc, role="pulsing", script="bad-summary", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [turn] = view.turns
    assert (turn.outcome.kind, turn.outcome.tool) == ("block", "complete_pulse"), turn
    assert turn.outcome.arguments["summary"].startswith("fix(greeter)!: greet the world")
    refused = [_error(c) for c in turn.tool_calls if c.output is not None]
    assert [e["rule"] for e in refused] == ["invalid_arguments", "invalid_arguments"]
    assert all("Conventional Commit" in e["error"] for e in refused)
    assert turn.model_calls == 3 and turn.violations == ["complete_pulse: invalid_arguments"] * 2


async def test_research_must_yield_after_eight_actions_but_may_still_take_notes(nc, runner, repo):
    accepted = await start_session(nc, role="research", script="over-the-limit", root=repo)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    first = view.turns[0]
    assert (first.outcome.kind, first.outcome.tool) == ("block", "request_extension"), first
    calls = first.tool_calls
    actions = [c for c in calls if c.name not in ("take_note", "request_extension")]
    assert len(actions) == 9
    assert all(not c.is_error for c in actions[:8]), actions
    refused = _error(actions[8])
    assert refused["rule"] == "research_yield" and "request_extension" in refused["error"]
    recorded = runner.sessions[accepted.session_id].turns[0].calls
    assert [recorded[c.tool_use_id].started for c in actions] == [True] * 8 + [False]  # the ninth never ran
    notes = [c for c in calls if c.name == "take_note"]
    assert len(notes) == 2 and all(recorded[c.tool_use_id].started for c in notes)
    assert all("research_yield" not in (c.output or "") for c in notes)
    # The count is per turn: the next turn's first action runs.
    follow = await request(nc, subjects.request(RUNNER, "send_message"),
                           SendMessage(session_id=accepted.session_id, text="Go on."), TurnAccepted)
    view = await wait_turn(nc, accepted.session_id, follow.turn_id)
    second = view.turns[1]
    assert (second.outcome.kind, second.outcome.tool) == ("block", "submit_research"), second
    assert not second.tool_calls[0].is_error and "Greet someone" in second.tool_calls[0].output
