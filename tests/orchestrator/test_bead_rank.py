"""Ranking ready beads by impact (``bv --robot-priority``'s way) and finding the critical path."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from autarch.contracts.beads import BeadView, Dependency
from autarch.services.orchestrator.swarm.rank import (
    W_CRITICAL,
    W_PAGERANK,
    W_PRIORITY,
    BlocksGraph,
    critical_path,
    rank_ready,
    ready_ids,
)

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
EPIC = "7d4c2f1e-8a9b-4c3d-9e2f-1a2b3c4d5e6f"


def bead(bead_id: str, *deps: str, status: str = "open", priority: int = 2, age: float | None = 0.0,
         kind: str = "blocks") -> BeadView:
    return BeadView(id=bead_id, epic_id=EPIC, title=f"title of {bead_id}", status=status,  # type: ignore[arg-type]  # status: one of the Literal's values, as the test names it
                    priority=priority, dependencies=[Dependency(bead_id=d, type=kind) for d in deps],  # type: ignore[arg-type]  # kind: one of the Literal's values, as the test names it
                    updated_at=None if age is None else NOW - timedelta(seconds=age))


def order(beads: list[BeadView]) -> list[str]:
    return [r.bead_id for r in rank_ready(beads, now=NOW).ready]


def diamond(*, a: str = "open") -> list[BeadView]:
    """b and c wait on a; d waits on b and c."""
    return [bead("a", status=a), bead("b", "a"), bead("c", "a"), bead("d", "b", "c")]


# --- readiness ----------------------------------------------------------------------------------------


def test_ready_means_open_with_every_blocker_closed() -> None:
    beads = [bead("a", status="closed"), bead("b", "a"), bead("c", "b"), bead("d", "zzz"), bead("e", status="bounced"),
             bead("f", status="in_progress")]
    assert ready_ids(beads) == ["b"]  # c waits on b; d on an unknown bead; e is bounced; f is taken


def test_a_dependency_on_an_unknown_bead_blocks_and_is_never_unblocked_by_another() -> None:
    beads = [bead("a"), bead("b", "a", "ghost")]
    result = rank_ready(beads, now=NOW)
    assert [r.bead_id for r in result.ready] == ["a"]
    assert result.ready[0].unblocks == []  # closing a leaves b waiting on ghost


def test_parent_child_links_do_not_hold_a_bead_back() -> None:
    beads = [bead("part", "group", kind="parent-child"), bead("group")]
    assert ready_ids(beads) == ["group", "part"]
    result = rank_ready(beads, now=NOW)
    assert result.critical_path == [] and all(r.unblocks == [] and r.blocker_ratio == 0 for r in result.ready)


# --- ranking ------------------------------------------------------------------------------------------


def test_diamond_its_root_first_then_the_branches_by_the_critical_path() -> None:
    [root] = rank_ready(diamond(), now=NOW).ready
    assert (root.bead_id, root.unblocks, root.blocker_ratio, root.pagerank, root.on_critical_path) == (
        "a", ["b", "c"], 1.0, 1.0, True)
    branches = rank_ready(diamond(a="closed"), now=NOW)
    assert branches.critical_path == ["b", "d"]  # b or c: the smaller id
    b, c = branches.ready
    assert (b.bead_id, c.bead_id) == ("b", "c")
    assert b.unblocks == c.unblocks == []  # d still waits on the other one
    assert b.blocker_ratio == c.blocker_ratio == 0.5 and b.pagerank == c.pagerank and b.betweenness == c.betweenness
    assert b.score == pytest.approx(c.score + W_CRITICAL)


def test_chain_only_its_head_is_ready_and_it_holds_everything_back() -> None:
    beads = [bead("a"), bead("b", "a"), bead("c", "b"), bead("d", "c")]
    result = rank_ready(beads, now=NOW)
    assert result.critical_path == ["a", "b", "c", "d"]
    [head] = result.ready
    assert (head.bead_id, head.unblocks, head.blocker_ratio, head.on_critical_path) == ("a", ["b"], 1.0, True)


def test_independent_beads_go_by_priority_then_id_with_every_field_filled() -> None:
    result = rank_ready([bead("z", priority=1), bead("y"), bead("x")], now=NOW)
    assert result.epic_id == EPIC and result.critical_path == []
    assert [r.bead_id for r in result.ready] == ["z", "x", "y"]
    z = result.ready[0]
    assert (z.title, z.priority, z.pagerank, z.betweenness, z.blocker_ratio, z.staleness, z.unblocks) == (
        "title of z", 1, 1.0, 0.0, 0.0, 0.0, [])
    assert z.score == pytest.approx(W_PAGERANK + W_PRIORITY * 3 / 4)


def test_the_bead_that_blocks_the_most_work_ranks_first_even_over_priority() -> None:
    beads = [bead("hub", priority=3), bead("leaf", priority=0), *[bead(f"w{i}", "hub") for i in range(4)]]
    ranked = rank_ready(beads, now=NOW).ready
    assert [r.bead_id for r in ranked] == ["hub", "leaf"]
    hub, leaf = ranked
    assert hub.blocker_ratio == 4 / 5 and hub.unblocks == ["w0", "w1", "w2", "w3"] and hub.on_critical_path
    # Betweenness: the 6 pairs of waiting beads meet only through hub, of 10 pairs among the 5 others.
    assert hub.pagerank == 1.0 > leaf.pagerank and hub.betweenness == 0.6 > leaf.betweenness == 0.0


def test_transitive_blockers_count_in_the_blocker_ratio() -> None:
    # r1 holds back m directly and t1, t2 through it; r2 holds back only s.
    beads = [bead("r1"), bead("m", "r1"), bead("t1", "m"), bead("t2", "m"), bead("r2"), bead("s", "r2")]
    r1, r2 = rank_ready(beads, now=NOW).ready
    assert (r1.bead_id, r1.blocker_ratio, r1.unblocks) == ("r1", 3 / 5, ["m"])
    assert (r2.bead_id, r2.blocker_ratio, r2.unblocks) == ("r2", 1 / 5, ["s"])


def test_staleness_breaks_ties_relative_to_the_stalest_ready_bead() -> None:
    result = rank_ready([bead("fresh", age=150), bead("stale", age=600), bead("new", age=None)], now=NOW)
    assert [(r.bead_id, r.staleness) for r in result.ready] == [("stale", 1.0), ("fresh", 0.25), ("new", 0.0)]
    # As in bv, a bead ready for long outranks a fresh one a priority level above it; naive stamps are UTC.
    naive = bead("old", age=None, priority=3)
    naive.updated_at = (NOW - timedelta(days=9)).replace(tzinfo=None)
    old, p2 = rank_ready([naive, bead("p2", age=60)], now=NOW).ready
    assert (old.bead_id, old.staleness, p2.bead_id) == ("old", 1.0, "p2")


def test_the_order_is_score_then_priority_then_id() -> None:
    assert order([bead("b"), bead("a")]) == ["a", "b"]
    assert order([bead("p3", priority=3), bead("p1", priority=1)]) == ["p1", "p3"]


# --- critical path ------------------------------------------------------------------------------------


def test_critical_path_of_a_known_dag() -> None:
    #   a → b → d → e        (x → y beside it, shorter)
    #   a → c ↗
    beads = [*diamond(), bead("e", "d"), bead("x"), bead("y", "x")]
    assert critical_path(beads) == ["a", "b", "d", "e"]  # ties (b or c) go to the smaller id
    assert critical_path([bead("a", status="closed"), *beads[1:]]) == ["b", "d", "e"]
    # Two chains of equal length: the one ending at the smaller id.
    assert critical_path([bead("p"), bead("q", "p"), bead("k"), bead("l", "k")]) == ["k", "l"]
    assert critical_path([bead("solo")]) == [] and critical_path([]) == []


# --- cycles and edge cases ------------------------------------------------------------------------------


def test_a_cycle_ranks_what_is_ready_and_is_left_out_of_the_critical_path() -> None:
    # a ⇄ b can never be ready; c is; e → d is the only chain that can be done. Nothing raises.
    beads = [bead("a", "b"), bead("b", "a"), bead("c"), bead("d", "e"), bead("e"), bead("f", "f")]
    result = rank_ready(beads, now=NOW)
    assert [r.bead_id for r in result.ready] == ["e", "c"]
    assert result.critical_path == ["e", "d"]
    graph = BlocksGraph(beads)
    assert not graph.is_dag() and graph.in_cycles() == {"a", "b", "f"}


def test_nothing_ready_is_an_empty_list() -> None:
    assert rank_ready([], now=NOW).ready == []
    assert rank_ready([], now=NOW, epic_id=EPIC).epic_id == EPIC
    assert rank_ready([bead("a", status="closed")], now=NOW).ready == []


def test_levels_of_the_graph() -> None:
    assert BlocksGraph([*diamond(), bead("e", "d")]).levels() == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 3}


def test_closed_beads_given_by_id_rank_as_closed_beads_given_whole() -> None:
    # The orchestrator ranks with the views of the beads not closed and the ids of the closed ones: every ranking,
    # score and critical path must be the one the whole epic gives.
    rng = random.Random(34)
    statuses = ["open", "open", "open", "closed", "closed", "in_progress", "bounced"]
    for _ in range(300):
        ids = [f"b{k}" for k in range(rng.randint(1, 14))]
        beads = [
            bead(b, *rng.sample([*ids[:i], "ghost"], k=min(i + 1, rng.randint(0, 3))), status=rng.choice(statuses),
                 priority=rng.randint(0, 4), age=rng.choice([None, 0.0, 5.0, 60.0]),
                 kind=rng.choice(["blocks", "blocks", "related"]))
            for i, b in enumerate(ids)
        ]
        whole = rank_ready(beads, now=NOW)
        live = [b for b in beads if b.status != "closed"]
        closed = [b.id for b in beads if b.status == "closed"]
        assert rank_ready(live, now=NOW, closed=closed, epic_id=EPIC) == whole
        assert ready_ids(live, closed=closed) == ready_ids(beads)
