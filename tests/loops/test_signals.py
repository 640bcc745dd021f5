"""Seed 001's signal protocol: explicit tags, the inference table in its order, BLOCKED as the safe default."""

from __future__ import annotations

import pytest

from autarch.services.orchestrator.loop.signals import anchor_hint, commit_message, read_signal, summarise


@pytest.mark.parametrize(("text", "signal", "reason"), [
    ("Done.\n<signal>CONTINUE</signal>", "CONTINUE", None),
    ("<signal>complete</signal>", "COMPLETE", None),
    ("<signal>BLOCKED: Need API key for Stripe integration</signal>", "BLOCKED",
     "Need API key for Stripe integration"),
    ("<signal> BLOCKED </signal>", "BLOCKED", "the agent signalled BLOCKED, with no reason"),
    # Several tags: the last one is the agent's final word.
    ("I could say <signal>COMPLETE</signal> but no.\n<signal>CONTINUE</signal>", "CONTINUE", None),
])
def test_explicit_signals(text, signal, reason):
    reading = read_signal(text)
    assert (reading.signal, reading.source, reading.reason) == (signal, "explicit", reason)


@pytest.mark.parametrize(("text", "signal"), [
    ("All tasks are complete.", "COMPLETE"),
    ("The implementation is complete and tested.", "COMPLETE"),
    ("I need your input on the colour scheme.", "BLOCKED"),
    ("Please provide the database URL.", "BLOCKED"),
    ("I cannot proceed without network access.", "BLOCKED"),
    ("```python\nprint(1)\n```", "CONTINUE"),
    ("Created file api/health.py.", "CONTINUE"),
    ("The next step is the route.", "CONTINUE"),
    # The table's order: COMPLETE is looked for before BLOCKED, BLOCKED before CONTINUE.
    ("Created file x.py. All tasks are complete.", "COMPLETE"),
    ("Created file x.py, but please provide the key.", "BLOCKED"),
])
def test_inferred_signals_follow_the_table_in_order(text, signal):
    reading = read_signal(text)
    assert (reading.signal, reading.source) == (signal, "inferred")


def test_an_inferred_block_gives_the_sentence_as_its_reason():
    assert read_signal("Wrote the client. Please provide the Stripe key. Thanks").reason == \
        "Please provide the Stripe key"


def test_no_recognisable_pattern_is_blocked():
    reading = read_signal("Hmm, interesting.")
    assert (reading.signal, reading.source) == ("BLOCKED", "default")


def test_anchor_hint_is_read_with_its_reason():
    hint = anchor_hint("ok\n<anchor_hint>\n  <turn_id>3c1d-42</turn_id>\n  <reason>The API design</reason>\n"
                       "</anchor_hint>")
    assert hint is not None and (hint.turn_id, hint.reason) == ("3c1d-42", "The API design")
    assert anchor_hint("<anchor_hint><turn_id>t9</turn_id></anchor_hint>").reason is None
    assert anchor_hint("<anchor_hint><turn_id> </turn_id></anchor_hint>") is None
    assert anchor_hint("no hint") is None


def test_commit_message_takes_the_agents_conventional_subject():
    text = "Reading first.\n\nfeat(api): add the health route\n\nIt returns ok.\n<signal>CONTINUE</signal>"
    subject, body = commit_message(text, 2, "Add a health endpoint")
    assert subject == "feat(api): add the health route"
    assert "<signal>" not in body and "It returns ok." in body
    assert summarise(text) == "feat(api): add the health route"


def test_commit_message_without_a_conventional_line_names_the_iteration():
    subject, _ = commit_message("Did some work.\n<signal>CONTINUE</signal>", 3, "Add a health endpoint\nmore")
    assert subject == "chore(loop): iteration 3: Add a health endpoint"
    assert summarise("```\ncode\n```\nWrote it.") == "Wrote it."
    assert summarise("<signal>COMPLETE</signal>") == "(no output)"
