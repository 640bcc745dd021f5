"""A turn that ended while no orchestrator recorded it, rebuilt as the ``turn:completed`` event the runner sent.

Every context catches up the same way after a restart (the workflow driver, the loop driver and the swarm
driver): it asks the agent runner for the session and hands each finished turn it has not seen to its own
``on_turn``, as if the event had arrived. One function builds that event, so the three cannot drift apart.
"""

from __future__ import annotations

from autarch.contracts.agents import SessionView, TurnView
from autarch.contracts.events import TurnCompleted

__all__ = ["turn_completed"]


def turn_completed(owner_id: str, session: SessionView, turn: TurnView) -> TurnCompleted:
    """The ``turn:completed`` event of a finished ``turn`` of ``session``, on the stream of ``owner_id``.

    ``owner_id`` is what the event's ``run_id`` names: a workflow, an epic's workflow, or a loop session.
    """
    outcome = turn.outcome
    assert outcome is not None, f"turn {turn.turn_id} has not ended"
    usage = turn.usage
    return TurnCompleted(
        run_id=owner_id, occurred_at=turn.completed_at or turn.started_at, session_id=session.session_id,
        turn_id=turn.turn_id, text="\n\n".join(turn.messages), thoughts="\n\n".join(t.text for t in turn.thoughts),
        outcome=outcome.kind, tool=outcome.tool, arguments=outcome.arguments, detail=outcome.detail,
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens, cost_usd=turn.cost_usd,
        tool_calls=len(turn.tool_calls), model_calls=turn.model_calls, evidence=outcome.evidence)
