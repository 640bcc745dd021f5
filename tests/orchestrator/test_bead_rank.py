"""Ranking ready beads by impact (``bv --robot-priority``'s way) and finding the critical path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from autarch.contracts.beads import BeadView, Dependency
from autarch.services.orchestrator.bead_rank import critical_path, rank_ready, ready_ids

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
EPIC = "7d4c2f1e-8a9b-4c3d-9e2f-1a2b3c4d5e6f"


def bead(bead_id: str, *deps: str, status: str = "open", priority: int = 2, age: float = 0.0,
         kind: str = "blocks") -> BeadView:
    return BeadView(id=bead_id, epic_id=EPIC, title=bead_id, status=status, priority=priority,  # type: ignore[arg-type]
                    dependencies=[Dependency(bead_id=d, type=kind) for d in deps],  # type: ignore[arg-type]
                    updated_at=NOW - timedelta(seconds=age))


def order(beads: list[BeadView]) -> list[str]:
    return [r.bead_id for r in rank_ready(beads, now=NOW).ready]


def test_ready_means_open_with_every_blocker_closed() -> None:
    beads = [bead("a", status="closed"), bead("b", "a"), bead("c", "b"), bead("d", "zzz"), bead("e", status="bounced")]
    assert ready_ids(beads) == ["b"]  # c waits on b; d on an unknown bead; e is bounced


def test_parent_child_links_do_not_hold_a_bead_back() -> None:
    assert ready_ids([bead("epic-part", "group", kind="parent-child"), bead("group")]) == ["epic-part", "group"]


def test_the_bead_that_blocks_the_most_work_ranks_first() -> None:
    beads = [bead("hub"), bead("leaf"), *[bead(f"w{i}", "hub") for i in range(4)]]
    ranked = rank_ready(beads, now=NOW).ready
    assert [r.bead_id for r in ranked] == ["hub", "leaf"]
    hub = ranked[0]
    assert hub.blocker_ratio == 4 / 5 and hub.unblocks == ["w0", "w1", "w2", "w3"] and hub.on_critical_path


def test_critical_path_of_a_diamond_with_a_tail() -> None:
    beads = [bead("a"), bead("b", "a"), bead("c", "a"), bead("d", "b", "c"), bead("e", "d"), bead("x")]
    assert critical_path(beads) == ["a", "b", "d", "e"]  # ties (b or c) go to the smaller id
    closed = [bead("a", status="closed"), *beads[1:]]
    assert critical_path(closed) == ["b", "d", "e"]


def test_equal_beads_go_by_priority_then_staleness_then_id() -> None:
    assert order([bead("p3", priority=3), bead("p1", priority=1)]) == ["p1", "p3"]
    assert order([bead("fresh", age=10), bead("stale", age=600)]) == ["stale", "fresh"]
    assert order([bead("b"), bead("a")]) == ["a", "b"]


def test_a_cycle_ranks_what_is_ready_and_has_no_critical_path() -> None:
    beads = [bead("a", "b"), bead("b", "a"), bead("c")]
    result = rank_ready(beads, now=NOW)
    assert [r.bead_id for r in result.ready] == ["c"] and result.critical_path == []


def test_nothing_ready_is_an_empty_list() -> None:
    assert rank_ready([], now=NOW).ready == []
    assert rank_ready([bead("a", status="closed")], now=NOW).ready == []
