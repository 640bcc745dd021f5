"""Benchmark (a script, not a test): what one loop iteration costs the orchestrator's loop book as the session grows.

One session on a SQLite event store, driven through the book as the loop driver drives it (start, a note every fourth
iteration, the turn's outcome, the end: each a command that records its events, keeps the session and makes its view
again), each iteration with a 2.4 KB prompt and a 2 KB output. At each checkpoint (default 300, 3,000 and 30,000
iterations: the size the tests use, 10 and 100 times that) it times the next 50 iterations (wall and CPU ms per
iteration), the default reply (``get_loop``) and a page of the session's first 100 iterations (made from their
events), and the heap grown per iteration since the last checkpoint (tracemalloc). No NATS, no
model: the book's own cost only.

    python tests/benchmarks/loop_steps.py [--sizes 300,3000,30000]

The last line is JSON, with each checkpoint's figures and the ratio of the largest size's ms per iteration to the
smallest's.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from autarch.contracts.loops import GetLoop
from autarch.runtime.settings import OrchestratorSettings
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.kept_views import kept_views_for
from autarch.services.orchestrator.loop.book import LoopBook
from autarch.services.orchestrator.loop.model import Anchor, LoopSession
from autarch.services.orchestrator.writer import BatchedWriter

AT = "2026-11-28T09:00:00+00:00"
TIMED = 50
PROMPT = "slice text " * 220
OUTPUT = "<signal>CONTINUE</signal> " + "y" * 2000


async def iterate(book: LoopBook, sid: str, n: int) -> None:
    """Iteration ``n``: the commands the loop driver records for one iteration."""
    anchor = Anchor(strategy="temporal", turn_id="t", slice_turn_ids=[f"s{n}a", f"s{n}b"])
    await book.change(sid, lambda s: s.start_iteration(task_content=f"iteration {n}\n{PROMPT}", pulse_worktree="/wt",
                                                       base_commit="c", anchor=anchor, context_tokens=10))
    if n % 4 == 0:
        await book.change(sid, lambda s: s.take_note(agent_session_id="a", note=f"n{n}", key=f"k{n}"))
    await book.change(sid, lambda s: s.record_turn(
        n, turn_id=f"t{n}", ending="complete", signal="CONTINUE", signal_source="explicit", reason=None,
        output_summary=f"step {n}", output_full=OUTPUT, commit_subject="feat: step", commit_body="body " * 50,
        anchor_hint_next=None, anchor_hint_reason=None, tokens_used=1, cost_usd=0.0))
    await book.change(sid, lambda s: s.end_iteration(n, commit_hash=f"{n:040x}", files_changed=["a.py"],
                                                     no_progress_limit=0))


async def timed_ms(samples: int, call: Any) -> float:
    """The median ms of ``samples`` awaits of ``call()``."""
    took = []
    for _ in range(samples):
        started = time.perf_counter()
        await call()
        took.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(took), 3)


async def main(sizes: list[int]) -> None:
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="autarch-bench-loop-steps-") as tmp:
        env = {"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(Path(tmp) / "events.sqlite")}
        app = WorkflowApplication(env=env)
        writer = BatchedWriter(app=app, inline=True)
        kept = kept_views_for(env)
        book = LoopBook(app=app, writer=writer, nc=None, settings=OrchestratorSettings(), kept=kept)
        writer.start()
        sid = str(uuid.uuid4())
        last = sizes[-1] + TIMED
        session = LoopSession(session_id=sid, project_name="p", project_path="/p", goal="g", max_iterations=last + 1,
                              anchor_turn_id=None, branch_name="autarch/loop-bench", base_branch="main",
                              context_strategy="prefetch", notify=[], created_by="api", script=None, created_at=AT,
                              max_tokens=None, max_cost_usd=None, status="pending")
        session.branch_prepared(branch="autarch/loop-bench", worktree_path="/wt", base_commit="c0", repository_id="r",
                                at=AT)
        await book.book.save(sid, session)
        gc.collect()
        tracemalloc.start()
        done, heap = 0, tracemalloc.get_traced_memory()[0]
        for size in sizes:
            while done < size:
                done += 1
                await iterate(book, sid, done)
            gc.collect()
            now = tracemalloc.get_traced_memory()[0]
            grown = (now - heap) / max(1, size - (figures[-1]["iterations"] if figures else 0))
            tracemalloc.stop()  # not while timing
            wall, cpu = [], []
            for _ in range(TIMED):
                done += 1
                started, started_cpu = time.perf_counter(), time.process_time()
                await iterate(book, sid, done)
                wall.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - started_cpu) * 1000)
            reply_ms = await timed_ms(5, lambda: book.get_loop(GetLoop(session_id=sid)))
            page_ms = await timed_ms(3, lambda: book.get_loop(GetLoop(session_id=sid, iterations_from=1,
                                                                      iterations_limit=100)))
            row = {"iterations": size, "ms_per_iteration": round(statistics.median(wall), 2),
                   "cpu_ms_per_iteration": round(statistics.median(cpu), 2),
                   "get_loop_ms": reply_ms, "first_page_ms": page_ms,
                   "heap_bytes_per_iteration": round(grown)}
            print(f"{size:>6} iterations: {row['ms_per_iteration']} ms ({row['cpu_ms_per_iteration']} CPU) an "
                  f"iteration, get_loop {row['get_loop_ms']} ms, iterations 1-100 {row['first_page_ms']} ms, heap "
                  f"{row['heap_bytes_per_iteration']} B an iteration", flush=True)
            figures.append(row)
            gc.collect()
            tracemalloc.start()
            heap = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        await writer.stop()
        kept.close()
        app.close()
    ratio = round(figures[-1]["ms_per_iteration"] / figures[0]["ms_per_iteration"], 2)
    print(f"largest/smallest ms per iteration: {ratio}")
    print(json.dumps({"benchmark": "loop_steps", "sizes": figures, "ratio": ratio}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="300,3000,30000")
    asyncio.run(main([int(s) for s in parser.parse_args().sizes.split(",")]))
