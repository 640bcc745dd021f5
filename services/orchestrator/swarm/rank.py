"""Ready work ranked by impact, the way ``bv --robot-priority`` (beads_viewer) ranks it, and the critical path.

The graph is the ``blocks`` dependencies among beads not yet closed, with an edge from each bead to the bead
it waits on, so PageRank flows towards blockers: a bead much work waits on (directly or through others) ranks
high. Its betweenness says it bridges parts of the graph; its blocker ratio how much of the open work it holds
back; staleness how long it has been ready; priority what the planner said. Being on the critical path (the
longest chain of ``blocks`` dependencies) adds a bonus: delaying such a bead delays the whole epic.

The graph work is rustworkx's (compiled, no scipy): networkx's ``pagerank`` needs scipy and numpy, which only
the indexer's extra brings.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Protocol

import rustworkx as rx

from autarch.contracts.beads import BeadView, RankedBead, ReadyList

__all__ = [
    "W_BETWEENNESS",
    "W_BLOCKER_RATIO",
    "W_CRITICAL",
    "W_PAGERANK",
    "W_PRIORITY",
    "W_STALENESS",
    "BlocksGraph",
    "critical_path",
    "rank_ready",
    "ready_ids",
]

# Weights of the impact score; every part is 0..1 first. The first five are bv's own (its ImpactScore), so a
# score here reads like one from `bv --robot-priority`: the graph (what waiting work a bead releases) weighs
# 0.8, the planner's priority and age only break what the graph leaves even.
W_PAGERANK = 0.30
"""Blockers of much work (transitively) first: closing them releases the most."""
W_BETWEENNESS = 0.30
"""Bridges between parts of the graph: a delay there ripples into both."""
W_BLOCKER_RATIO = 0.20
"""The share of the open work that waits on it, directly or not."""
W_STALENESS = 0.10
"""Ready for long and still untaken: surface it before it is forgotten."""
W_PRIORITY = 0.10
"""The planner's 0 (critical) … 4 (backlog), as 1 … 0."""
W_CRITICAL = 0.10
"""Ours, on top of bv's: on the critical path, a delay delays the whole epic (the score may exceed 1)."""

_DIGITS = 6
"""Scores and their parts are rounded, so that equal graphs give equal (and comparable) numbers."""


class _Dependency(Protocol):
    @property
    def bead_id(self) -> str: ...
    @property
    def type(self) -> str: ...


class _Bead(Protocol):
    """What the graph reads of a bead: a :class:`BeadView` or the orchestrator's own record."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def dependencies(self) -> Sequence[_Dependency]: ...


class BlocksGraph:
    """The ``blocks`` edges among not-closed beads: edge b → d when b waits on d.

    Dependencies on closed beads no longer hold anything back and those on unknown beads have no node, so
    neither is an edge (an unknown one still keeps its bead from being ready: see :func:`ready_ids`).
    """

    def __init__(self, beads: Iterable[_Bead]) -> None:
        beads = list(beads)
        live = sorted({b.id for b in beads if b.status != "closed"})
        self.graph: rx.PyDiGraph = rx.PyDiGraph()
        self.index: dict[str, int] = {bead_id: self.graph.add_node(bead_id) for bead_id in live}
        for b in beads:
            if b.id not in self.index:
                continue
            for dep in b.dependencies:
                target = self.index.get(dep.bead_id)
                if dep.type == "blocks" and target is not None and not self.graph.has_edge(self.index[b.id], target):
                    self.graph.add_edge(self.index[b.id], target, None)

    def name(self, node: int) -> str:
        return str(self.graph[node])

    def is_dag(self) -> bool:
        return rx.is_directed_acyclic_graph(self.graph)

    def in_cycles(self) -> set[str]:
        """Beads on a dependency cycle (none of them can ever become ready)."""
        cyclic = {self.name(n) for scc in rx.strongly_connected_components(self.graph) if len(scc) > 1 for n in scc}
        return cyclic | {self.name(n) for n in self.graph.node_indices() if self.graph.has_edge(n, n)}

    def waiting_on(self, bead_id: str) -> set[str]:
        """Beads that wait on ``bead_id``, directly or through others."""
        return {self.name(n) for n in rx.ancestors(self.graph, self.index[bead_id])}

    def levels(self) -> dict[str, int]:
        """Depth of each bead: 0 for one that waits on nothing, else one more than its deepest blocker.

        Needs a DAG (check :meth:`is_dag`): rustworkx raises ``DAGHasCycle`` otherwise.
        """
        depth: dict[str, int] = {}
        for node in reversed(rx.topological_sort(self.graph)):
            blockers = [depth[self.name(s)] for s in self.graph.successor_indices(node)]
            depth[self.name(node)] = 1 + max(blockers) if blockers else 0
        return depth


def ready_ids(beads: Iterable[_Bead], *, closed: Collection[str] = ()) -> list[str]:
    """Open beads whose every ``blocks`` dependency is closed (a dependency on an unknown bead blocks).

    ``closed``: ids of closed beads left out of ``beads`` (they count as closed beads given in it would)."""
    beads = list(beads)
    return _ready_among(beads, _closed_ids(beads, closed))


def _closed_ids(beads: Iterable[_Bead], closed: Collection[str]) -> set[str]:
    return {b.id for b in beads if b.status == "closed"} | set(closed)


def _ready_among(beads: list[_Bead], done: set[str]) -> list[str]:
    return sorted(b.id for b in beads if b.status == "open" and not _open_blockers(b, done))


def critical_path(beads: Iterable[_Bead]) -> list[str]:
    """The longest chain of ``blocks`` dependencies among beads not closed, first to do → last; empty when no
    bead waits on another.

    Ties go to the chain ending at the smaller id, then through the smaller blocker, so every run gives the same
    answer. Beads on a dependency cycle (the verbs refuse edges that make one, but a store is a store) are left
    out: none of them can ever become ready, so no chain through them can be done; the path is the longest
    chain among the others.
    """
    g = BlocksGraph(beads)
    for name in sorted(g.in_cycles()):
        g.graph.remove_node(g.index.pop(name))
    if g.graph.num_edges() == 0:
        return []
    # The longest chain ending at each bead, blockers first (``reverse``: as if edges pointed blocker → blocked).
    best: dict[str, list[str]] = {}
    for name in rx.lexicographical_topological_sort(g.graph, key=str, reverse=True):
        chains = [best[g.name(b)] for b in sorted(g.graph.successor_indices(g.index[name]), key=g.name)]
        longest = max(chains, key=len, default=[])  # max keeps the first of equals: the smallest blocker
        best[name] = [*longest, name]
    end = min(best, key=lambda n: (-len(best[n]), n))
    return best[end]


def rank_ready(beads: list[BeadView], *, now: datetime, epic_id: str | None = None,
               closed: Collection[str] = ()) -> ReadyList:
    """The ready beads, highest impact first (ties: priority, then id), with the critical path.

    Args:
        beads: every bead of the epic (closed ones too: they are what makes others ready), or every bead not
            closed with the ids of the closed ones in ``closed``: the same answer, without a view of each bead the
            epic ever closed.
        now: the time staleness is measured at.
        epic_id: the reply's ``epic_id``; default the beads' own (empty when there are none).
        closed: the ids of closed beads not in ``beads``.

    Staleness counts from ``updated_at`` (else ``created_at``; the orchestrator puts the time a bead became
    ready there) and is relative to the stalest ready bead; a bead with neither stamp counts as fresh.
    """
    epic = epic_id if epic_id is not None else (beads[0].epic_id if beads else "")
    done = _closed_ids(beads, closed)
    ready = _ready_among(list(beads), done)
    path = critical_path(beads)
    if not ready:
        return ReadyList(epic_id=epic, ready=[], critical_path=path)
    g = BlocksGraph(beads)
    by_id = {b.id: b for b in beads}
    pagerank = {g.name(n): s for n, s in rx.pagerank(g.graph).items()}
    top_rank = max(pagerank.values(), default=0.0)
    # Undirected: a ready bead waits on nothing live, so it has no out-edge and can lie on no directed path;
    # what counts is whether it joins beads that would otherwise not meet (the work hanging off it).
    undirected = g.graph.to_undirected(multigraph=False)
    betweenness = {undirected[n]: s for n, s in rx.graph_betweenness_centrality(undirected, normalized=True).items()}
    others = len(g.index) - 1
    ages = {b: _age(by_id[b], now) for b in ready}
    oldest = max(ages.values())
    on_path = set(path)
    # Who is held back by exactly one bead: each open bead whose only not-closed blocker that is.
    sole_blocker: dict[str, list[str]] = {}
    for b in beads:
        remaining = _open_blockers(b, done)
        if b.status == "open" and len(remaining) == 1:
            sole_blocker.setdefault(remaining.pop(), []).append(b.id)
    ranked = []
    for bead_id in ready:
        bead = by_id[bead_id]
        priority = min(max(bead.priority, 0), 4)
        parts = {
            "pagerank": pagerank[bead_id] / top_rank if top_rank > 0 else 0.0,
            "betweenness": betweenness[bead_id],
            "blocker_ratio": len(g.waiting_on(bead_id)) / others if others > 0 else 0.0,
            "staleness": ages[bead_id] / oldest if oldest > 0 else 0.0,
        }
        score = (W_PAGERANK * parts["pagerank"] + W_BETWEENNESS * parts["betweenness"]
                 + W_BLOCKER_RATIO * parts["blocker_ratio"] + W_STALENESS * parts["staleness"]
                 + W_PRIORITY * (4 - priority) / 4 + W_CRITICAL * (bead_id in on_path))
        ranked.append(RankedBead(
            bead_id=bead_id, title=bead.title, score=round(score, _DIGITS),
            **{k: round(v, _DIGITS) for k, v in parts.items()}, priority=bead.priority,
            on_critical_path=bead_id in on_path, unblocks=sorted(sole_blocker.get(bead_id, []))))
    ranked.sort(key=lambda r: (-r.score, r.priority, r.bead_id))
    return ReadyList(epic_id=epic, ready=ranked, critical_path=path)


def _open_blockers(bead: _Bead, closed: set[str]) -> set[str]:
    """The ``blocks`` dependencies of ``bead`` not closed yet (unknown beads included: they never close)."""
    return {d.bead_id for d in bead.dependencies if d.type == "blocks" and d.bead_id not in closed}


def _age(bead: BeadView, now: datetime) -> float:
    """Seconds since the bead's stamp (0 without one, or for a stamp in the future); naive times are UTC."""
    stamp = bead.updated_at or bead.created_at
    if stamp is None:
        return 0.0
    return max(0.0, (_aware(now) - _aware(stamp)).total_seconds())


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
