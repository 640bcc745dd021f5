"""A turn that ended while the orchestrator was down is rebuilt as the runner's own ``turn:completed`` would be.

The workflow, loop and swarm drivers all catch up through one builder; the swarm's own copy once left out the
event's required ``thoughts`` and raised, so its workers' turns waited for the stream's redelivery instead.
"""

from __future__ import annotations

from datetime import UTC, datetime

from autarch.contracts.agents import SessionView, ThoughtView, ToolCallView, TurnOutcome, TurnUsage, TurnView
from autarch.contracts.base import encode
from autarch.contracts.beads import VerificationEvidence
from autarch.services.orchestrator.caught_up import turn_completed

AT = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)


def _session(turn: TurnView) -> SessionView:
    return SessionView(session_id="s-1", role="pulsing", root="/wt", model="m", status="idle", turns=[turn],
                       usage=turn.usage, cost_usd=turn.cost_usd, notes=[], created_at=AT, run_id="wf-1")


def test_a_finished_turn_becomes_the_event_the_runner_would_have_sent() -> None:
    evidence = VerificationEvidence(bead_id="base", passed=True)
    turn = TurnView(
        turn_id="t-1", index=0, user_text="go", started_at=AT, completed_at=AT.replace(minute=5),
        messages=["first", "second"], thoughts=[ThoughtView(step=0, text="hmm"), ThoughtView(step=1, text="so")],
        tool_calls=[ToolCallView(tool_use_id="u1", name="shell", input={}, step=0, output="ok")],
        usage=TurnUsage(input_tokens=10, output_tokens=20, cache_read_input_tokens=3, cache_creation_input_tokens=4),
        cost_usd=0.25, model_calls=2,
        outcome=TurnOutcome(kind="block", tool="complete_pulse", arguments={"summary": "x"}, evidence=evidence))
    event = turn_completed("epic-1", _session(turn), turn)
    encode(event)  # a complete event: every required field is there
    assert (event.run_id, event.session_id, event.turn_id) == ("epic-1", "s-1", "t-1")
    assert event.occurred_at == AT.replace(minute=5)
    assert (event.text, event.thoughts) == ("first\n\nsecond", "hmm\n\nso")
    assert (event.outcome, event.tool, event.arguments) == ("block", "complete_pulse", {"summary": "x"})
    assert event.evidence == evidence
    assert (event.input_tokens, event.output_tokens, event.cache_read_input_tokens,
            event.cache_creation_input_tokens) == (10, 20, 3, 4)
    assert (event.cost_usd, event.tool_calls, event.model_calls) == (0.25, 1, 2)


def test_a_turn_without_an_end_time_is_dated_by_its_start() -> None:
    turn = TurnView(turn_id="t-2", index=1, user_text="go", started_at=AT, messages=[], thoughts=[], tool_calls=[],
                    usage=TurnUsage(), cost_usd=0.0, model_calls=1,
                    outcome=TurnOutcome(kind="refusal", detail="the model refused: no"))
    event = turn_completed("loop-1", _session(turn), turn)
    assert (event.occurred_at, event.outcome, event.detail, event.thoughts) == (
        AT, "refusal", "the model refused: no", "")
