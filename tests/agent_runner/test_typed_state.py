"""A session's turns are typed state (outcome, pushed mail, verification evidence); the events recorded with the
dict payloads every version has written replay into it, and what is built from it is what it was."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec

from autarch.contracts.agents import TurnOutcome
from autarch.contracts.beads import VerificationEvidence, VerificationRun
from autarch.runtime.aggregates import project
from autarch.services.agent_runner.domainmodel import GivenMail, Session
from autarch.services.agent_runner.transcript import build_messages
from autarch.services.agent_runner.views import view_of

AT = datetime(2026, 11, 25, 9, tzinfo=UTC)
EVIDENCE = VerificationEvidence(bead_id="b1", passed=True, attempt=1, recorded_at=AT,
                                runs=[VerificationRun(step="verify", command="pytest -q", exit_code=0, passed=True,
                                                      ran_at=AT, duration_ms=12.5)])
MAIL = {"type": "text", "text": "<coordination-mail>\nYou have 1 new coordination message\n</coordination-mail>"}


def _recorded() -> Session:
    """A worker's session whose turn got mail, a verification and its end, recorded as the runner records them."""
    session = Session(session_id=str(uuid.uuid4()), role="pulsing", model="m", root="/wt", run_id=None,
                      channel_id=None, script=None, notes=[])
    session.start_turn(turn_id="t1", index=0, text="Do b1", notes=[], message_id=None, stage_notes=None, at=AT)
    session.receive_mail(turn_id="t1", step=0, message_ids=["m1"], block=MAIL)
    session.record_reply(turn_id="t1", content=[{"type": "tool_use", "id": "u1", "name": "complete_pulse",
                                                  "input": {"summary": "feat: b1"}}],
                         stop_reason="tool_use", usage={"input_tokens": 10, "output_tokens": 5}, cost_usd=0.01,
                         model="m", ending_id="u1")
    evidence = msgspec.to_builtins(EVIDENCE)
    session.record_verification(turn_id="t1", tool_use_id="u1", evidence=evidence, refusal=None)
    session.complete_turn(turn_id="t1", outcome={"kind": "block", "tool": "complete_pulse",
                                                 "arguments": {"summary": "feat: b1"}, "detail": "",
                                                 "evidence": evidence, "partial_text": "…"},
                          at=AT, text="", thoughts="", usage={"input_tokens": 10, "output_tokens": 5},
                          cost_usd=0.01, tool_calls=1, model_calls=1)
    return session


def test_recorded_dict_payloads_replay_as_typed_state() -> None:
    replayed = project(None, _recorded().collect_events())
    turn = replayed.turns[0]
    assert turn.outcome == TurnOutcome(kind="block", tool="complete_pulse", arguments={"summary": "feat: b1"},
                                       evidence=EVIDENCE)
    assert turn.evidence == {"u1": EVIDENCE}
    assert turn.mail == [GivenMail(step=0, text=MAIL["text"])]
    assert replayed.mail_received == {"m1"}


def test_what_is_built_from_the_typed_state_is_what_the_dicts_gave() -> None:
    replayed = project(None, _recorded().collect_events())
    opening = build_messages(replayed, current=replayed.turns[0])[0]["content"]
    assert opening[-1] == MAIL  # the mail block goes to the model exactly as it was recorded
    outcome = view_of(replayed).turns[0].outcome
    assert msgspec.to_builtins(outcome) == {"kind": "block", "tool": "complete_pulse",
                                            "arguments": {"summary": "feat: b1"}, "detail": "",
                                            "evidence": msgspec.to_builtins(EVIDENCE), "tokens_used_pct": None}
    assert outcome is not replayed.turns[0].outcome  # the view does not share the session's state
