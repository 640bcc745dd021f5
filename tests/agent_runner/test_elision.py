"""In-turn compaction on its own: which results are elided, what the model is sent instead, replay."""

from __future__ import annotations

import json

from autarch.runtime.sqlite_store import MODULE as SQLITE_MODULE
from autarch.runtime.sqlite_store import SYNCHRONOUS_ENV
from autarch.services.agent_runner.application import SessionApplication
from autarch.services.agent_runner.compaction import KEEP_RECENT_STEPS, elision_point
from autarch.services.agent_runner.transcript import build_messages
from autarch.services.scripted_model.protocol import validate_request

from .test_units import _body, _reply, _result, _session, _turn, _use

BIG = "\n".join(f"{n:>6}\tline {n} of a long module" for n in range(200))


def _long_turn(steps: int, *, context_tokens: int = 150_000):
    """A pulsing session whose one running turn read a long file at each of ``steps`` replies."""
    session = _session(notes=["Keep greet() backwards compatible."])
    turn_id = _turn(session, "Implement pulse-1: greet the world.")
    for n in range(steps):
        uses = [_use(f"r{n}", "read_file", reason=f"Read part {n}", path=f"part{n}.py")]
        if n == 1:  # a short result in a reply that gets elided
            uses.append(_use("s", "grep", reason="Find the callers", pattern="greet("))
        _reply(session, turn_id, *uses, input_tokens=context_tokens)
        _result(session, turn_id, f"r{n}", "read_file", f"part {n}\n{BIG}")
        if n == 1:
            _result(session, turn_id, "s", "grep", '{"results": [{"file_path": "a.py", "line_number": 3}]}')
    _reply(session, turn_id, _use("e", "edit_file", reason="Fix it", path="a.py", oldString="a", newString="b"),
           input_tokens=context_tokens)
    _result(session, turn_id, "e", "edit_file", json.dumps({"success": True}))
    return session, turn_id


def _results(messages) -> dict[str, dict]:
    return {b["tool_use_id"]: b for m in messages if m["role"] == "user" for b in m["content"]
            if b.get("type") == "tool_result"}


def test_a_turn_over_the_threshold_elides_its_older_long_results_and_keeps_the_task_and_recent_ones():
    session, turn_id = _long_turn(6)
    turn = session.turns[-1]
    assert elision_point(session, current=turn, threshold_tokens=160_000) is None  # under the threshold
    through = elision_point(session, current=turn, threshold_tokens=100_000)
    assert through == len(turn.replies) - 1 - KEEP_RECENT_STEPS == 3
    session.elide_results(turn_id=turn_id, through_step=through, context_tokens=150_000)
    messages = build_messages(session, current=turn)
    assert validate_request(_body(session, messages)) is None
    results = _results(messages)
    for n in range(4):
        stub = json.loads(results[f"r{n}"]["content"])["elided"]
        assert "read_file" in stub and "call read_file again" in stub and "context window" in stub
    for n in (4, 5):
        assert results[f"r{n}"]["content"].startswith(f"part {n}\n")
    # Short results stay whole, in an elided reply (s, reply 1) as in a kept one (e).
    assert json.loads(results["s"]["content"]) == {"results": [{"file_path": "a.py", "line_number": 3}]}
    assert json.loads(results["e"]["content"]) == {"success": True}
    notes, task = messages[0]["content"]
    assert "Keep greet() backwards compatible." in notes["text"] and task["text"].startswith("Implement pulse-1")
    # The calls themselves stay, so the model knows what it ran and with which arguments.
    assert [b["input"].get("path") for m in messages if m["role"] == "assistant" for b in m["content"]][:3] == [
        "part0.py", "part1.py", None]
    # Nothing more to elide until the turn has grown past the kept replies again.
    assert elision_point(session, current=turn, threshold_tokens=100_000) is None


def test_elision_is_recorded_so_a_rebuilt_session_sends_the_same_request(tmp_path):
    app = SessionApplication(env={"PERSISTENCE_MODULE": SQLITE_MODULE,
                                  "SQLITE_DBNAME": str(tmp_path / "e.sqlite"), SYNCHRONOUS_ENV: "NORMAL"})
    try:
        session, turn_id = _long_turn(5)
        session.elide_results(turn_id=turn_id, through_step=2, context_tokens=150_000)
        app.save(session)
        again = app.get_session(str(session.id))
        assert again.turns[-1].elided_through == 2
        assert build_messages(again, current=again.turns[-1]) == build_messages(session, current=session.turns[-1])
    finally:
        app.close()


def test_a_turn_without_long_results_to_elide_records_nothing():
    session = _session()
    turn_id = _turn(session, "Do it.")
    for n in range(6):
        _reply(session, turn_id, _use(f"g{n}", "glob_search", reason="Look", pattern="*.py"), input_tokens=190_000)
        _result(session, turn_id, f"g{n}", "glob_search", '["a.py"]')
    assert elision_point(session, current=session.turns[-1], threshold_tokens=100_000) is None
