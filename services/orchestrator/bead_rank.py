"""Ready work ranked by impact, the way ``bv --robot-priority`` ranks it, and the epic's critical path.

The graph is the ``blocks`` dependencies among beads not yet closed, with an edge from each bead to the
bead it waits on. A bead many others wait on (directly or through others) has a high PageRank there; one
that sits between parts of the graph has a high betweenness; together with how much of the open work it
holds back, how long it has been ready and its priority, that is its impact. The graph work is rustworkx's
(compiled; networkx's PageRank would pull in scipy).
"""

from __future__ import annotations

from datetime import datetime

import rustworkx as rx

from autarch.contracts.beads import BeadView, RankedBead, ReadyList

__all__ = ["BlocksGraph", "critical_path", "rank_ready", "ready_ids"]

# Weights of the impact score (each part is normalised to 0..1 first). Unblocking work dominates, as in
# bv: a bead that holds back much of the epic must go first; staleness and priority break the rest.
W_PAGERANK = 0.30
W_BETWEENNESS = 0.20
W_BLOCKER_RATIO = 0.25
W_STALENESS = 0.05
W_PRIORITY = 0.10
W_CRITICAL = 0.10
"""On the critical path: delaying this bead delays the whole epic."""


class BlocksGraph:
    """The ``blocks`` edges among not-closed beads: edge b → d when b waits on d."""

    def __init__(self, beads: list[BeadView]) -> None:
        live = sorted(b.id for b in beads if b.status != "closed")
        self.graph: rx.PyDiGraph = rx.PyDiGraph()
        self.index = {bead_id: self.graph.add_node(bead_id) for bead_id in live}
        for b in beads:
            if b.id not in self.index:
                continue
            for dep in b.dependencies:
                if dep.type == "blocks" and dep.bead_id in self.index:
                    self.graph.add_edge(self.index[b.id], self.index[dep.bead_id], None)

    def name(self, node: int) -> str:
        return str(self.graph[node])

    def is_dag(self) -> bool:
        return rx.is_directed_acyclic_graph(self.graph)

    def waiting_on(self, bead_id: str) -> set[str]:
        """Beads that wait on ``bead_id``, directly or through others."""
        return {self.name(n) for n in rx.ancestors(self.graph, self.index[bead_id])}

    def levels(self) -> dict[str, int]:
        """Depth of each bead: 0 for one that waits on nothing, else one more than its deepest blocker."""
        depth: dict[str, int] = {}
        for node in reversed(rx.topological_sort(self.graph)):
            blockers = [depth[self.name(s)] for s in self.graph.successor_indices(node)]
            depth[self.name(node)] = 1 + max(blockers) if blockers else 0
        return depth


def ready_ids(beads: list[BeadView]) -> list[str]:
    """Open beads whose every ``blocks`` dependency is closed (a dependency on an unknown bead blocks)."""
    closed = {b.id for b in beads if b.status == "closed"}
    return sorted(b.id for b in beads if b.status == "open"
                  and all(d.bead_id in closed for d in b.dependencies if d.type == "blocks"))


def critical_path(beads: list[BeadView]) -> list[str]:
    """The longest chain of ``blocks`` dependencies among beads not closed, first to do → last.

    A cycle (the verbs refuse edges that make one, but a store is a store) has no longest path: empty.
    """
    g = BlocksGraph(beads)
    if g.graph.num_edges() == 0 or not g.is_dag():
        return []  # no chain at all (or a cycle): nothing is more critical than the rest
    # Longest chain ending at each bead, walking blockers first; ties go to the smaller id so that every run
    # gives the same answer (rustworkx's dag_longest_path picks among equals arbitrarily).
    best: dict[str, list[str]] = {}
    for name in rx.lexicographical_topological_sort(g.graph, key=str, reverse=True):  # blockers come first
        chains = [best[g.name(b)] for b in sorted(g.graph.successor_indices(g.index[name]), key=g.name)]
        longest = max(chains, key=len, default=[])  # max keeps the first of equals: the smallest id
        best[name] = [*longest, name]
    end = min(best, key=lambda n: (-len(best[n]), n))
    return best[end]


def rank_ready(beads: list[BeadView], *, now: datetime) -> ReadyList:
    """The ready beads, highest impact first (ties: priority, then id); with the critical path."""
    epic = beads[0].epic_id if beads else ""
    ready = ready_ids(beads)
    path = critical_path(beads)
    if not ready:
        return ReadyList(epic_id=epic, ready=[], critical_path=path)
    g = BlocksGraph(beads)
    by_id = {b.id: b for b in beads}
    pagerank = {g.name(n): s for n, s in rx.pagerank(g.graph).items()}
    betweenness = {g.name(n): s for n, s in rx.digraph_betweenness_centrality(g.graph, normalized=True).items()}
    open_count = max(1, g.graph.num_nodes() - 1)
    top_rank = max(pagerank.values(), default=1.0) or 1.0
    ages = {b: max(0.0, (now - _since(by_id[b])).total_seconds()) for b in ready}
    oldest = max(ages.values(), default=0.0)
    on_path = set(path)
    ranked = []
    for bead_id in ready:
        bead = by_id[bead_id]
        parts = {
            "pagerank": pagerank.get(bead_id, 0.0) / top_rank,
            "betweenness": betweenness.get(bead_id, 0.0),
            "blocker_ratio": len(g.waiting_on(bead_id)) / open_count,
            "staleness": ages[bead_id] / oldest if oldest > 0 else 0.0,
        }
        score = (W_PAGERANK * parts["pagerank"] + W_BETWEENNESS * parts["betweenness"]
                 + W_BLOCKER_RATIO * parts["blocker_ratio"] + W_STALENESS * parts["staleness"]
                 + W_PRIORITY * (4 - bead.priority) / 4 + W_CRITICAL * (bead_id in on_path))
        node = g.index[bead_id]
        # A bead unblocks those whose only remaining blocker it is.
        unblocks = sorted(g.name(p) for p in g.graph.predecessor_indices(node)
                          if set(g.graph.successor_indices(p)) == {node})
        ranked.append(RankedBead(bead_id=bead_id, title=bead.title, score=round(score, 6),
                                 pagerank=round(parts["pagerank"], 6), betweenness=round(parts["betweenness"], 6),
                                 blocker_ratio=round(parts["blocker_ratio"], 6),
                                 staleness=round(parts["staleness"], 6), priority=bead.priority,
                                 on_critical_path=bead_id in on_path, unblocks=unblocks))
    ranked.sort(key=lambda r: (-r.score, r.priority, r.bead_id))
    return ReadyList(epic_id=epic, ready=ranked, critical_path=path)


def _since(bead: BeadView) -> datetime:
    stamp = bead.updated_at or bead.created_at
    return stamp if stamp is not None else datetime.fromtimestamp(0).astimezone()
