"""The runner's pure parts on their own: stream accumulation, block rules, transcripts, compaction, replay."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import anthropic.types as t
import msgspec

from autarch.contracts.agents import TurnUsage
from autarch.contracts.tool_catalog import ROLES, Role
from autarch.runtime.settings import Settings
from autarch.runtime.sqlite_store import MODULE as SQLITE_MODULE
from autarch.runtime.sqlite_store import SYNCHRONOUS_ENV
from autarch.services.agent_runner import compaction
from autarch.services.agent_runner.agents import AgentRegistry, parse_models
from autarch.services.agent_runner.application import SessionApplication
from autarch.services.agent_runner.blocks import classify
from autarch.services.agent_runner.compaction import (
    build_digest,
    compaction_point,
    digest_budget,
    estimate_tokens,
    session_digest,
)
from autarch.services.agent_runner.domainmodel import Session
from autarch.services.agent_runner.model_client import _Accumulator
from autarch.services.agent_runner.pricing import cost_usd
from autarch.services.agent_runner.prompts import PROMPTS
from autarch.services.agent_runner.transcript import build_messages
from autarch.services.agent_runner.turn_loop import CallModel, Complete, RunTool, next_action, truncate
from autarch.services.agent_runner.views import view_of
from autarch.services.scripted_model.protocol import validate_request

REGISTRY = AgentRegistry(settings=Settings(data_dir="/tmp/unused"))


def _events(*raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The events as the SDK hands them to the model client (their JSON objects), each checked against the
    SDK's model of its type first, so the fixture is a stream the API could send."""
    kinds = {
        "message_start": t.RawMessageStartEvent,
        "content_block_start": t.RawContentBlockStartEvent,
        "content_block_delta": t.RawContentBlockDeltaEvent,
        "content_block_stop": t.RawContentBlockStopEvent,
        "message_delta": t.RawMessageDeltaEvent,
        "message_stop": t.RawMessageStopEvent,
    }
    for event in raw:
        kinds[event["type"]].model_validate(event)  # type: ignore[attr-defined]  # pydantic models
    return list(raw)


def test_a_tool_input_that_is_not_json_is_kept_and_flagged_not_fatal():
    acc = _Accumulator()
    message = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "x",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": 1},
    }
    deltas = []
    for event in _events(
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Reading."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "tu1", "name": "read_file", "input": {}},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"path": '}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "oops}"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 12},
        },
        {"type": "message_stop"},
    ):
        delta = acc.feed(event)
        if delta:
            deltas.append(delta)
    assert acc.content() == [
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "tu1", "name": "read_file", "input": {}},
    ]
    assert acc.malformed == {"tu1": '{"path": oops}'}
    assert deltas == [(False, "Reading.")]
    assert (acc.usage.input_tokens, acc.usage.output_tokens, acc.stop_reason) == (7, 12, "tool_use")


def _session(role: Role = "pulsing", *, notes: list[str] | None = None) -> Session:
    agent = REGISTRY.get(role)
    return Session(
        session_id=str(uuid.uuid4()),
        role=role,
        model=agent.model,
        root="/repo",
        run_id="wf",
        channel_id=None,
        script=None,
        notes=notes or [],
    )


def _turn(session: Session, text: str) -> str:
    turn_id = str(uuid.uuid4())
    session.start_turn(
        turn_id=turn_id,
        index=len(session.turns),
        text=text,
        notes=list(session.stage_notes),
        message_id=None,
        stage_notes=None,
        at=datetime.now(UTC),
    )
    return turn_id


def _reply(
    session: Session, turn_id: str, *blocks: dict[str, Any], input_tokens: int = 100, ending_id: str | None = None
) -> None:
    session.record_reply(
        turn_id=turn_id,
        content=list(blocks),
        stop_reason="tool_use",
        model="claude-opus-4-6",
        usage={
            "input_tokens": input_tokens,
            "output_tokens": 10,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
        cost_usd=0.001,
        ending_id=ending_id,
    )


def _result(session: Session, turn_id: str, tool_use_id: str, name: str, output: str, is_error: bool = False) -> None:
    session.complete_tool(
        turn_id=turn_id,
        tool_use_id=tool_use_id,
        name=name,
        output=output,
        is_error=is_error,
        duration_ms=1.0,
        replayed=False,
    )


def _end(session: Session, turn_id: str, outcome: dict[str, Any]) -> None:
    session.complete_turn(
        turn_id=turn_id,
        outcome=outcome,
        at=datetime.now(UTC),
        text="",
        thoughts="",
        usage=msgspec.structs.asdict(TurnUsage()),
        cost_usd=0.0,
        tool_calls=0,
        model_calls=0,
    )


def _use(tool_use_id: str, name: str, **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id, "name": name, "input": input}


def _body(session: Session, messages: list[dict[str, Any]]) -> dict[str, Any]:
    agent = REGISTRY.get(session.role)
    return {
        "model": agent.model,
        "max_tokens": agent.max_tokens,
        "system": agent.system,
        "tools": agent.tools,
        "messages": messages,
    }


def test_compaction_keeps_notes_and_the_current_turn_and_leaves_a_valid_history():
    session = _session(notes=["The greeting lives in greeter/core.py"])
    first = _turn(session, "Implement pulse-1: greet the world.")
    _reply(session, first, _use("a", "read_file", reason="Read greet before changing it", path="greeter/core.py"))
    _result(session, first, "a", "read_file", "def greet(name): ...")
    _reply(
        session,
        first,
        {"type": "text", "text": "Pausing."},
        _use("b", "request_extension", reason="Long pulse", completed=["read"], remaining=["edit"]),
        input_tokens=190_000,
        ending_id="b",
    )
    _end(session, first, {"kind": "block", "tool": "request_extension", "arguments": {}, "detail": ""})
    current = _turn(session, "Go on.")
    turn = session.turns[-1]
    before = build_messages(session, current=turn)
    assert before[-1]["content"][0]["content"] == json.dumps({"success": True, "status": "submitted"})
    assert validate_request(_body(session, before)) is None

    through = compaction_point(session, current=turn, threshold_tokens=160_000)
    assert through == 0
    session.compact(turn_id=current, through=through, context_tokens=190_000)
    after = build_messages(session, current=turn)
    assert validate_request(_body(session, after)) is None
    assert [m["role"] for m in after] == ["user"]
    digest, notes, text = (b["text"] for b in after[0]["content"])
    assert "Implement pulse-1: greet the world." in digest  # the task survives
    assert "read_file: Read greet before changing it" in digest  # each action survives as its reason
    assert "request_extension" in digest
    assert "The greeting lives in greeter/core.py" in notes
    assert text == "Go on."
    assert compaction_point(session, current=turn, threshold_tokens=160_000) is None  # nothing left to compact


WINDOW = 30_000
"""The growth benchmark's window: compaction starts some 40 turns into a discussion of ~1,000-character turns."""


def _discussion(session: Session, turns: int, *, on_turn: Any = None) -> None:
    """``turns`` turns of ~1,000 characters each way, compacted as the runner does before each model call."""
    for n in range(turns):
        turn_id = _turn(session, f"Kickoff: build the greeter, keep it small. {'x' * 900}" if n == 0 else
                        f"Question {n + 1}: what about part {n}? " + "y" * 1_000)
        turn = session.turns[-1]
        through = compaction_point(session, current=turn, threshold_tokens=int(WINDOW * 0.8))
        if through is not None:
            session.compact(turn_id=turn_id, through=through, context_tokens=session.last_context_tokens(),
                            digest_tokens=digest_budget(WINDOW))
        request = json.dumps(build_messages(session, current=turn))
        _reply(session, turn_id, {"type": "text", "text": f"Answer {n + 1}. " + "z" * 1_000},
               _use(f"t{n}", "read_file", reason=f"Check part {n}", path="greeter/core.py"),
               input_tokens=estimate_tokens(request), ending_id=None)
        _result(session, turn_id, f"t{n}", "read_file", "def greet(name): ...")
        _end(session, turn_id, {"kind": "end_turn", "detail": ""})
        if on_turn is not None:
            on_turn(session)


def test_a_long_discussion_keeps_its_digest_within_budget_and_never_outgrows_the_window(tmp_path):
    session = _session()
    digests: list[str] = []

    def check(s: Session) -> None:
        assert s.last_context_tokens() < WINDOW  # every request of the session fits
        if s.compacted_through >= 0:
            digest = build_digest(s, through=s.compacted_through, budget_tokens=s.digest_tokens)
            assert estimate_tokens(digest) <= digest_budget(WINDOW)
            digests.append(digest)

    _discussion(session, 400, on_turn=check)
    assert session.compacted_through > 300  # it did compact, many times
    digest = digests[-1]
    assert "Original request: Kickoff: build the greeter, keep it small." in digest  # the goal survives
    last = session.compacted_through + 1
    assert f"Turn {last}. User: Question {last}" in digest and f"- read_file: Check part {last - 1}" in digest
    lines = digest.splitlines()
    brief = [line for line in lines if line.endswith(" | tools: read_file | ended: end_turn")]
    assert len(brief) >= 20  # older turns as one line each, before the newest in full
    assert lines.index(brief[-1]) < lines.index(f"Turn {last}. User: Question {last}: what about part {last - 1}? "
                                                 + "y" * 1_000)
    counted = int(brief[0].split(".")[0].removeprefix("Turn ")) - 1
    assert lines[2] == (f"{counted} earlier turns (turns 1-{counted}), too many to list: ended end_turn ({counted}); "
                        f"tools used: read_file ({counted})")

    # A replay of the same events builds the same requests, whatever the settings are by then.
    env = {"PERSISTENCE_MODULE": SQLITE_MODULE, "SQLITE_DBNAME": str(tmp_path / "e.sqlite"), SYNCHRONOUS_ENV: "NORMAL"}
    app = SessionApplication(env=env)
    app.save(session)
    again = app.get_session(str(session.id))
    assert build_messages(again, current=again.turns[-1]) == build_messages(session, current=session.turns[-1])
    app.close()


def test_the_digest_is_made_once_per_compaction_and_is_the_digest_made_afresh(monkeypatch):
    # Made at every request, the digest cost each turn time in proportion to every turn compacted before it.
    made: list[int] = []

    def counted(session: Session, *, through: int, budget_tokens: int | None = None) -> str:
        made.append(through)
        return build_digest(session, through=through, budget_tokens=budget_tokens)

    monkeypatch.setattr(compaction, "build_digest", counted)
    session = _session()
    compactions: set[int] = set()

    def check(s: Session) -> None:
        if s.compacted_through >= 0:
            compactions.add(s.compacted_through)
            fresh = build_digest(s, through=s.compacted_through, budget_tokens=s.digest_tokens)
            assert session_digest(s) == fresh

    _discussion(session, 200, on_turn=check)
    assert len(compactions) > 3
    assert sorted(made) == sorted(compactions)  # one per compaction, however many requests each served


def test_a_kept_digest_is_made_again_when_a_compacted_turn_changes():
    session = _session()
    _discussion(session, 60)
    _turn(session, "Go on.")
    assert session.compacted_through >= 0
    before = build_messages(session, current=session.turns[-1])
    old = session.turns[0]  # compacted, listed in the digest with how it ended
    assert old.index <= session.compacted_through
    session.complete_turn(turn_id=old.turn_id, outcome={"kind": "cancelled", "detail": "stopped"},
                          at=datetime.now(UTC), text="", thoughts="", usage=msgspec.structs.asdict(TurnUsage()),
                          cost_usd=0.0, tool_calls=0, model_calls=0)
    after = build_messages(session, current=session.turns[-1])
    digest = after[0]["content"][0]["text"]
    assert digest == build_digest(session, through=session.compacted_through, budget_tokens=session.digest_tokens)
    assert digest != before[0]["content"][0]["text"]


def _notes_in_every_turn(session: Session) -> list[str]:
    """The session's notes as they were gathered from every turn at each message (what ``session_notes`` keeps)."""
    notes = []
    for turn in session.turns:
        for call in turn.calls.values():
            if call.name == "take_note" and call.done and not call.is_error and isinstance(call.input, dict):
                note = call.input.get("note")
                if isinstance(note, str) and note.strip():
                    notes.append(note)
    return notes


def test_the_notes_kept_as_calls_complete_are_the_notes_of_every_turn_in_order(tmp_path):
    session = _session()
    first = _turn(session, "Look around.")
    _reply(session, first, _use("a", "take_note", reason="r", note="one"),
           _use("b", "take_note", reason="r", note="two"), _use("c", "take_note", reason="r", note="  "),
           _use("d", "take_note", reason="r"))
    _result(session, first, "b", "take_note", '{"success":true}')  # out of order: listed after "one" all the same
    _result(session, first, "a", "take_note", '{"success":true}')
    _result(session, first, "c", "take_note", '{"success":true}')  # a blank note is no note
    _result(session, first, "d", "take_note", '{"success":true}')  # nor is a call without one
    _end(session, first, {"kind": "end_turn", "detail": ""})
    second = _turn(session, "More.")
    _reply(session, second, _use("e", "take_note", reason="r", note="three"), _use("f", "take_note", reason="r",
                                                                                 note="four"))
    _result(session, second, "e", "take_note", '{"error":"no orchestrator"}', is_error=True)
    _result(session, second, "f", "take_note", '{"success":true}')
    assert session.session_notes() == _notes_in_every_turn(session) == ["one", "two", "four"]
    # A result recorded again replaces the first, either way.
    _result(session, second, "e", "take_note", '{"success":true}')
    _result(session, first, "a", "take_note", '{"error":"lost"}', is_error=True)
    assert session.session_notes() == _notes_in_every_turn(session) == ["two", "three", "four"]

    env = {"PERSISTENCE_MODULE": SQLITE_MODULE, "SQLITE_DBNAME": str(tmp_path / "e.sqlite"), SYNCHRONOUS_ENV: "NORMAL"}
    app = SessionApplication(env=env)
    app.save(session)
    again = app.get_session(str(session.id))
    assert again.session_notes() == session.session_notes() and again == session
    app.close()


def test_a_message_id_names_the_first_turn_it_opened():
    session = _session()
    turns = []
    for n, message_id in enumerate(["m1", None, "m2", "m1"]):
        turn_id = str(uuid.uuid4())
        session.start_turn(turn_id=turn_id, index=n, text="hi", notes=[], message_id=message_id, stage_notes=None,
                           at=datetime.now(UTC))
        turns.append(turn_id)
    assert session.message_turns == {"m1": turns[0], "m2": turns[2]}


def test_a_digest_recorded_without_a_budget_lists_every_turn_as_it_did():
    session = _session()
    _discussion(session, 3)
    current = _turn(session, "Go on.")
    session.compact(turn_id=current, through=2, context_tokens=100)  # a Compacted event of before the budget
    digest = build_messages(session, current=session.turns[-1])[0]["content"][0]["text"]
    assert "Turn 2. User: Question 2" in digest and "Turn 3. User: Question 3" in digest
    assert "  Assistant said: Answer 3." in digest


def test_orphaned_tool_uses_get_synthesized_errors_so_the_history_stays_valid():
    session = _session()
    first = _turn(session, "Do it.")
    _reply(
        session,
        first,
        _use("a", "shell", reason="Run the tests", command="pytest"),
        _use("b", "shell", reason="Lint", command="ruff check"),
    )
    session.start_tool(turn_id=first, tool_use_id="a", name="shell", input={})
    _end(session, first, {"kind": "cancelled", "detail": "stop"})
    _turn(session, "Try again.")
    messages = build_messages(session, current=session.turns[-1])
    assert validate_request(_body(session, messages)) is None
    a, b, text = messages[-1]["content"]
    assert a["is_error"] and "whether it took effect is unknown" in a["content"]
    assert b["is_error"] and "before this tool call ran" in b["content"]
    assert text["text"] == "Try again."


def test_complete_pulse_is_rejected_while_failures_remain_and_the_escape_hatch_opens_later():
    agent = REGISTRY.get("pulsing")
    session = _session()
    turn_id = _turn(session, "Do it.")
    _reply(session, turn_id, _use("a", "shell", reason="Run the tests", command="pytest"))
    _result(session, turn_id, "a", "shell", '{"success": false, "exit_code": 1}', is_error=True)
    history = list(session.turns[0].calls.values())
    done = [_use("z", "complete_pulse", summary="feat: x", filesChanged=["a.py"])]
    first = classify(content=done, agent=agent, history=history, completion_rejections=0)
    assert first.ending_id is None and first.rejections[0].rule == "completion_rejected"
    assert "unresolvedIssues" not in first.rejections[0].message
    second = classify(content=done, agent=agent, history=history, completion_rejections=1)
    assert "unresolvedIssues" in second.rejections[0].message
    hatch = [
        _use(
            "z",
            "complete_pulse",
            summary="feat: x",
            filesChanged=["a.py"],
            unresolvedIssues=[{"issue": "pytest fails", "reason": "flaky upstream"}],
        )
    ]
    assert classify(content=hatch, agent=agent, history=history, completion_rejections=1).ending_id is None
    assert classify(content=hatch, agent=agent, history=history, completion_rejections=2).ending_id == "z"
    # A later successful run of the same command resolves the failure.
    _reply(session, turn_id, _use("c", "shell", reason="Run the tests again", command="pytest"))
    _result(session, turn_id, "c", "shell", '{"success": true, "exit_code": 0}')
    history = list(session.turns[0].calls.values())
    assert classify(content=done, agent=agent, history=history, completion_rejections=0).ending_id == "z"


def test_a_session_rebuilt_from_the_store_is_the_same_session(tmp_path):
    env = {
        "PERSISTENCE_MODULE": SQLITE_MODULE,
        "SQLITE_DBNAME": str(tmp_path / "e.sqlite"),
        SYNCHRONOUS_ENV: "NORMAL",
    }
    app = SessionApplication(env=env)
    session = _session(notes=["note"])
    first = _turn(session, "Do it.")
    _reply(session, first, _use("a", "read_file", reason="Read", path="x"))
    _result(session, first, "a", "read_file", "content")
    app.save(session)
    again = app.get_session(str(session.id))
    assert view_of(again) == view_of(session)
    assert build_messages(again, current=again.turns[-1]) == build_messages(session, current=session.turns[-1])
    assert list(app.session_ids()) == [str(session.id)]
    app.close()


def test_registry_prompts_tools_models_and_prices():
    for role, prompt in PROMPTS.items():
        assert prompt.rstrip().endswith(f"autarch-role: {role}")
        agent = REGISTRY.get(role)
        assert agent.tools[-1]["cache_control"] == {"type": "ephemeral"}
        assert agent.system[-1]["cache_control"] == {"type": "ephemeral"}
    assert "After 8 research actions" in PROMPTS["research"]
    assert "a pulse is a promise" in PROMPTS["pulsing"] and "Leave TODOs or placeholders" in PROMPTS["pulsing"]
    assert "must NOT modify any file tracked by git" in PROMPTS["preflight"]
    assert "ask_questions. Period." in PROMPTS["scoping"]
    assert {d["name"] for d in REGISTRY.get("review").tools} >= {"get_diff", "get_scope_card", "complete_review"}
    assert parse_models("*=m1,plan=m2")["plan"] == "m2"
    assert parse_models("plan=m2,*=m1") == {**dict.fromkeys(ROLES, "m1"), "plan": "m2"}  # the named role wins
    usage = TurnUsage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_read_input_tokens=1_000_000,
        cache_creation_input_tokens=1_000_000,
    )
    assert cost_usd("claude-sonnet-4-5-20250929", usage) == 3.0 + 15.0 + 0.30 + 3.75
    assert truncate("é" * 10, limit=5).startswith("éé\n[output truncated: 20 bytes")


def test_complete_review_ends_the_turn_only_when_it_succeeds():
    session = _session("review")
    turn_id = _turn(session, "Review the workflow.")
    args = {"reason": "Finish the review", "recommendation": "approve", "summary": "Small and correct."}
    _reply(session, turn_id, _use("r", "complete_review", **args), ending_id="r")
    turn = session.turns[-1]
    assert isinstance(next_action(turn), RunTool)  # run by the tools service, unlike a block tool
    _result(session, turn_id, "r", "complete_review", '{"success": false, "error": "Review card not found"}', True)
    assert next_action(turn) == CallModel()  # the model hears the error and may try again
    _reply(session, turn_id, _use("s", "complete_review", **args), ending_id="s")
    _result(session, turn_id, "s", "complete_review", '{"success": true, "recommendation": "approve"}')
    assert next_action(turn) == Complete({"kind": "block", "tool": "complete_review", "arguments": args, "detail": ""})


async def test_a_cancel_during_the_final_save_does_not_end_the_turn_twice():
    """A stop that lands while turn:completed is being written finds the turn ended: nothing more is recorded."""
    import asyncio

    from autarch.services.agent_runner.turn_loop import RunnerDeps, TurnLoop

    session = _session("discussion")
    turn_id = _turn(session, "hello")
    session.record_reply(turn_id=turn_id, content=[{"type": "text", "text": "Hi."}], stop_reason="end_turn",
                         model="m", usage={}, cost_usd=0.0, ending_id=None)
    saves: list[list[str]] = []

    async def save(s: Session) -> None:
        saves.append([type(e).__name__ for e in s.collect_events()])
        raise asyncio.CancelledError  # the write finished; the task was cancelled meanwhile

    deps = RunnerDeps(nc=None, model=None, budget=None, settings=Settings(data_dir="/tmp/unused"),  # unused here
                      save=save)
    loop = TurnLoop(deps=deps, session=session, turn=session.turns[0], agent=REGISTRY.get("discussion"))
    try:
        await loop.run(record_cancel=lambda: True)
    except asyncio.CancelledError:
        pass
    assert [names[-1] for names in saves] == ["TurnCompleted"]
    assert session.turns[0].outcome.kind == "end_turn"
