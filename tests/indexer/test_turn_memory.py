"""Turn memory (loop anchors): record once, find, latest, hybrid search, slices within a budget, and restart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from autarch.contracts.turns import TurnRecord
from autarch.services.indexer.turn_memory import TurnMemory

PROJECT = "/srv/shop"
T0 = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)

TEXTS = [
    "Designed the payment flow: Stripe checkout sessions, webhooks confirm the charge before the order ships.",
    "Renamed the CSS classes of the header and fixed the logo's alignment on small screens.",
    "Added pagination to the product list endpoint with limit and offset query parameters.",
    "Wrote the database migration that adds an index on orders.created_at for the monthly report.",
    "Set up the logging configuration: JSON lines to stdout, request ids in every record.",
]


def turn(n: int, text: str, *, session: str = "s1", project: str = PROJECT, tokens: int = 100) -> TurnRecord:
    return TurnRecord(turn_id=f"t{n}", session_id=session, project_path=project, index=n, user_text=f"step {n}",
                      text=text, occurred_at=T0 + timedelta(minutes=n), tokens=tokens)


@pytest.fixture
def memory(tmp_path, embedder):
    memory = TurnMemory(tmp_path / "turns.sqlite", embedder)
    yield memory
    memory.close()


def test_record_is_idempotent_and_find_respects_the_project(memory):
    assert memory.record([turn(i, t) for i, t in enumerate(TEXTS)]) == (5, 5)
    assert memory.record([turn(0, TEXTS[0]), turn(9, "other", project="/srv/other")]) == (1, 6)
    found = memory.find("t2")
    assert found is not None and found.text == TEXTS[2]
    assert memory.find("t2", PROJECT) == found
    assert memory.find("t2", "/srv/other") is None and memory.find("nope") is None
    assert memory.latest(PROJECT).turn_id == "t4" and memory.latest("/srv/other").turn_id == "t9"
    assert memory.latest("/srv/none") is None


def test_search_finds_the_paraphrased_turn_first(memory):
    memory.record([turn(i, t) for i, t in enumerate(TEXTS)])
    # Asked the way a goal is written, with none of the turn's own words for the key idea.
    hits = memory.search(PROJECT, "accept card payments at checkout", limit=3)
    assert hits[0].turn_id == "t0" and 0 < hits[0].score <= 1
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert memory.search(PROJECT, "slow monthly report query", limit=1)[0].turn_id == "t3"
    assert memory.search("/srv/none", "anything", limit=3) == []


def test_a_slice_grows_around_the_anchor_within_the_budget(memory):
    memory.record([turn(i, t, tokens=100) for i, t in enumerate(TEXTS)])
    memory.record([turn(20, "another conversation", session="s2")])
    whole = memory.slice("t2", 1000)
    assert whole.turn_ids == ["t0", "t1", "t2", "t3", "t4"] and whole.node_count == 5 and whole.depth == 2
    three = memory.slice("t2", 300)
    assert three.turn_ids == ["t1", "t2", "t3"] and three.tokens == 300
    assert memory.slice("t2", 300).slice_id == three.slice_id != whole.slice_id
    assert memory.slice("t0", 250).turn_ids == ["t0", "t1"]
    assert memory.slice("t2", 50).turn_ids == ["t2"]  # the anchor always, even over the budget
    assert memory.slice("nope", 100) is None


def test_turns_survive_a_restart(tmp_path, embedder):
    first = TurnMemory(tmp_path / "turns.sqlite", embedder)
    first.record([turn(i, t) for i, t in enumerate(TEXTS)])
    first.close()
    again = TurnMemory(tmp_path / "turns.sqlite", embedder)
    try:
        assert again.find("t3").text == TEXTS[3]
        assert again.search(PROJECT, "accept card payments at checkout", limit=1)[0].turn_id == "t0"
        assert again.record([turn(1, TEXTS[1])]) == (0, 5)
    finally:
        again.close()
