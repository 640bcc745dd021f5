"""Benchmark: what one loop iteration costs the turn memory as a project's turns grow.

Each loop iteration records its turn (``record_turns``), and the next one searches with the session's goal
(``search_turns``) and slices around its anchor (``turn_slice``). One project's memory is filled with the turns of
one long loop session (their texts drawn from a fixed vocabulary, each holding the goal as a loop's do) up to
each size, in one batch, then the next ``--steps`` iterations are timed one call each. The embedder is a stand-in
that costs nothing, so the figures are the memory's own work, not the model's. The last line printed is JSON.

    .venv/bin/python tests/benchmarks/turn_memory_steps.py [--sizes 300,3000,30000] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from autarch.contracts.turns import TurnRecord
from autarch.services.indexer.embeddings import Kind
from autarch.services.indexer.turn_memory import TurnMemory

GOAL = "Add a step module for each iteration of the benchmark loop"
PROJECT = "/srv/bench"
SESSION = "loop-session"
T0 = datetime(2026, 11, 28, tzinfo=UTC)


class StandIn:
    """Unit vectors from a seeded generator: the memory's own costs, without a model's."""

    id = "stand-in"
    dim = 384

    def __init__(self) -> None:
        self._rng = np.random.default_rng(7)

    def embed(self, texts: Sequence[str], *, kind: Kind = "document") -> np.ndarray:
        out = self._rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="300,3000,30000")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    rng = random.Random(1)
    words = [f"word{i}" for i in range(3000)]

    def turn(n: int) -> TurnRecord:
        text = " ".join(rng.choice(words) for _ in range(80))
        return TurnRecord(turn_id=f"t{n}", session_id=SESSION, project_path=PROJECT, index=n,
                          user_text=f"Iteration {n + 1} of the goal: {GOAL}", text=text,
                          occurred_at=T0 + timedelta(seconds=n), tokens=150)

    rows = []
    with tempfile.TemporaryDirectory(prefix="autarch-bench-") as tmp:
        memory = TurnMemory(Path(tmp) / "turns.sqlite", StandIn())
        held = 0
        for size in (int(s) for s in args.sizes.split(",")):
            if size > held:
                for start in range(held, size, 1000):
                    memory.record([turn(n) for n in range(start, min(size, start + 1000))])
                held = size
            timed: dict[str, list[float]] = {"record": [], "search": [], "slice": []}
            for _ in range(args.steps):
                new = turn(held)
                held += 1
                started = time.perf_counter()
                memory.record([new])
                recorded = time.perf_counter()
                memory.search(PROJECT, GOAL, 6)
                searched = time.perf_counter()
                memory.slice(new.turn_id, 4000)
                sliced = time.perf_counter()
                timed["record"].append(recorded - started)
                timed["search"].append(searched - recorded)
                timed["slice"].append(sliced - searched)
            row = {"turns": size, **{f"{k}_ms": round(statistics.median(v) * 1000, 3) for k, v in timed.items()}}
            rows.append(row)
            print(f"{size:>7} turns: record {row['record_ms']:.2f} ms, search {row['search_ms']:.2f} ms, "
                  f"slice {row['slice_ms']:.3f} ms", file=sys.stderr, flush=True)
        memory.close()
    print(json.dumps({"benchmark": "turn_memory_steps", "steps": args.steps, "sizes": rows}))


if __name__ == "__main__":
    main()
