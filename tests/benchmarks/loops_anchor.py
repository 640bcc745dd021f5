"""Anchor resolution benchmark (a script, not a test). Its last line is a JSON object of the figures.

    .venv/bin/python tests/benchmarks/loops_anchor.py [--turns 10000] [--samples 200]

Starts a nats-server and the indexer as its own process (``python -m autarch.services.indexer``, the local
MiniLM model, a fresh data directory), records ``--turns`` generated loop turns of one project (sessions of 20
iterations, varied prose about varied subjects) in batches of 500 through ``record_turns``, then times each step of
an iteration's anchor resolution (seed 001's order) as NATS requests, p50/p99 in ms:

- **chained_or_explicit**: ``find_turn`` of a hinted or given turn id (with the project);
- **semantic**: ``search_turns`` with a goal the memory has not seen (the query is embedded), and
  **semantic_repeated_goal**: the same goal again (a loop asks with its goal before every iteration: cached);
- **temporal**: ``latest_turn``;
- **slice**: ``turn_slice`` of a 4,000-token budget around a random anchor.

It also reports how often the best semantic hit is about the goal's subject (``semantic_top_hit_on_topic``), and
how long a restarted indexer takes to answer again with the turns loaded. The goal of issue 13: semantic p50
≤ 20 ms. :func:`measure_anchor_resolution` is the part ``tests/benchmarks/loops.py`` can call on its own system.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.contracts import subjects
from autarch.contracts.turns import (
    FindTurn,
    LatestTurn,
    RecordTurns,
    SearchTurns,
    SliceView,
    TurnFound,
    TurnHits,
    TurnRecord,
    TurnSlice,
    TurnsRecorded,
)
from autarch.runtime.requests import request

__all__ = ["measure_anchor_resolution", "turn_text"]

SESSION_LENGTH = 20
"""Iterations of one generated loop session (its turns' ``index`` 0..19)."""
BATCH = 500

# (subject, words the turns use for it, how a goal would say it without most of those words)
TOPICS = [
    ("payment flow", "Stripe checkout sessions and the payment webhook", "take card payments when a customer buys"),
    ("login form", "the login form's password check and lockout", "users cannot sign in after a wrong password"),
    ("search index", "the product search index and its analyzers", "finding products by name returns nothing"),
    ("database migration", "the Alembic migration of the orders table", "change the schema of stored purchases"),
    ("logging setup", "structured JSON logging with request ids", "trace one request through the server output"),
    ("rate limiter", "the token-bucket rate limiter on the public API", "stop clients that call us too often"),
    ("email templates", "the order confirmation email templates", "the receipt message looks broken on phones"),
    ("image upload", "image upload with resizing to thumbnails", "customers attach photos to their reviews"),
    ("cache layer", "the Redis cache in front of the catalogue queries", "pages are slow; keep hot answers around"),
    ("feature flags", "feature flags read from the settings service", "turn new behaviour on for some users only"),
    ("audit trail", "the audit trail of admin actions", "record who changed what in the back office"),
    ("CSV export", "the nightly CSV export of orders", "a spreadsheet of yesterday's sales every morning"),
    ("webhook retries", "retries with backoff for outgoing webhooks", "partners miss notifications when down"),
    ("session cookies", "secure, http-only session cookies", "keep people signed in safely between visits"),
    ("pagination", "limit and offset pagination of list endpoints", "long lists should come a page at a time"),
    ("dark mode", "a dark colour theme following the system setting", "the site hurts the eyes at night"),
    ("i18n strings", "translated message catalogues for the storefront", "support shoppers in German and French"),
    ("background jobs", "the Celery worker queue for slow tasks", "heavy work should not block web requests"),
    ("access tokens", "JWT validation of bearer tokens on the API", "reject forged or expired credentials"),
    ("health checks", "liveness and readiness endpoints for Kubernetes", "the cluster should restart a stuck pod"),
]
ACTIONS = ["Designed", "Implemented", "Refactored", "Wrote tests for", "Documented", "Fixed a bug in", "Profiled",
           "Reviewed", "Simplified", "Hardened", "Started on", "Finished"]
DETAILS = [
    "Touched {module} and its tests; {passed} of {total} tests pass.",
    "The change is behind a setting, off by default, until the staging run is clean.",
    "Measured before and after: {before} ms down to {after} ms at the 95th percentile.",
    "Left a TODO in {module}: the error message should name the field that failed.",
    "Split {module} in two so each part has one reason to change.",
    "The CI run failed once on a timeout in {module}; it passed on the second try.",
    "Asked for a review of the public interface before going further.",
    "Removed the dead code path the old implementation needed.",
]
MODULES = ["api/routes.py", "core/models.py", "billing/service.py", "auth/tokens.py", "web/templates/base.html",
           "jobs/worker.py", "search/indexer.py", "storage/orders.py", "config/settings.py", "notify/mail.py"]
FRAMINGS = ["", "Please:", "Ticket:", "Bug report:", "Next up:", "From the backlog:", "Customer complaint:",
            "Task for today:", "Priority:", "Follow-up:"]
SIGNALS = ["CONTINUE", "CONTINUE", "CONTINUE", "PAUSE: waiting for a decision", "COMPLETE"]


def _topic_of(n: int) -> int:
    # A session works on one subject mostly, sometimes on a neighbour's.
    session = n // SESSION_LENGTH
    return (session * 7 + (1 if n % 9 == 8 else 0)) % len(TOPICS)


def turn_text(n: int) -> tuple[str, str]:
    """The (user text, assistant text) of generated turn ``n``: deterministic, varied, about one subject."""
    rng = random.Random(n)
    subject, words, _ = TOPICS[_topic_of(n)]
    iteration = n % SESSION_LENGTH + 1
    user = (f"Iteration {iteration}: continue with the {subject}." if iteration > 1
            else f"Goal: improve the {subject}. Work in small steps and commit each.")
    parts = [f"{rng.choice(ACTIONS)} {words}."]
    for detail in rng.sample(DETAILS, 2):
        total = rng.randint(20, 400)
        parts.append(detail.format(module=rng.choice(MODULES), passed=total - rng.randint(0, 3), total=total,
                                   before=rng.randint(80, 900), after=rng.randint(5, 79)))
    parts.append(f"Signal: {rng.choice(SIGNALS)}.")
    return user, " ".join(parts)


def _turns(project_path: str, first: int, last: int, start: datetime) -> list[TurnRecord]:
    turns = []
    for n in range(first, last):
        user, text = turn_text(n)
        turns.append(TurnRecord(
            turn_id=f"bench-{n}", session_id=f"session-{n // SESSION_LENGTH}", project_path=project_path,
            index=n % SESSION_LENGTH, user_text=user, text=text, occurred_at=start + timedelta(seconds=30 * n),
            loop_session_id=f"session-{n // SESSION_LENGTH}", iteration_number=n % SESSION_LENGTH + 1,
            tokens=(len(user) + len(text)) // 4))
    return turns


def _pct(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(q) - 1))]


async def measure_anchor_resolution(nc: Client, project_path: str, n_turns: int, *,
                                    samples: int = 200) -> dict[str, Any]:
    """Record ``n_turns`` generated turns of ``project_path``, then time each anchor-resolution step over NATS.

    Args:
        nc: a connection to the NATS the indexer serves on.
        project_path: the project the turns belong to (use a fresh one: turn ids are ``bench-<n>``).
        n_turns: how many turns to record (sessions of 20).
        samples: requests timed per strategy.

    Returns:
        ``turns``, ``record_s``, ``record_turns_per_s``, ``<strategy>_ms_p50``/``_ms_p99`` for
        ``chained_or_explicit``, ``semantic``, ``semantic_repeated_goal``, ``temporal`` and ``slice``, and
        ``semantic_top_hit_on_topic`` (0..1).
    """

    async def ask(verb: str, payload: Any, reply: type) -> Any:
        return await request(nc, subjects.request("indexer", verb), payload, reply, timeout=120)

    start = datetime(2026, 11, 1, tzinfo=UTC)
    began = time.perf_counter()
    for first in range(0, n_turns, BATCH):
        await ask("record_turns", RecordTurns(turns=_turns(project_path, first, min(n_turns, first + BATCH), start)),
                  TurnsRecorded)
    record_s = time.perf_counter() - began
    rng = random.Random(13)
    ids = [f"bench-{rng.randrange(n_turns)}" for _ in range(samples + 1)]
    # Goals the memory has not seen (each is embedded): every subject's paraphrase in several framings.
    framings = [(f, t) for f in FRAMINGS for t in range(len(TOPICS))]
    rng.shuffle(framings)
    goals = [(t, f"{f} {TOPICS[t][2]}".lstrip() + (f" ({i // len(framings)})" if i >= len(framings) else ""))
             for i, (f, t) in enumerate(framings[i % len(framings)] for i in range(samples + 1))]
    on_topic: list[bool] = []

    async def semantic(i: int) -> None:
        topic, goal = goals[i]
        hits = await ask("search_turns", SearchTurns(project_path=project_path, query=goal, limit=5), TurnHits)
        on_topic.append(bool(hits.items) and _topic_of(int(hits.items[0].turn_id.split("-")[1])) == topic)

    cases = {
        "chained_or_explicit": lambda i: ask("find_turn", FindTurn(turn_id=ids[i], project_path=project_path),
                                             TurnFound),
        "semantic": semantic,
        "semantic_repeated_goal": lambda i: ask("search_turns", SearchTurns(project_path=project_path,
                                                                            query=goals[0][1], limit=5), TurnHits),
        "temporal": lambda i: ask("latest_turn", LatestTurn(project_path=project_path), TurnFound),
        "slice": lambda i: ask("turn_slice", TurnSlice(turn_id=ids[i], token_budget=4000), SliceView),
    }
    figures: dict[str, Any] = {"turns": n_turns, "record_s": round(record_s, 1),
                               "record_turns_per_s": round(n_turns / record_s) if record_s else 0}
    for name, call in cases.items():
        await call(samples)  # warm (the last sample's input, not timed)
        on_topic.clear()
        times = []
        for i in range(samples):
            t0 = time.perf_counter()
            await call(i)
            times.append((time.perf_counter() - t0) * 1000)
        figures[f"{name}_ms_p50"] = round(_pct(times, 50), 2)
        figures[f"{name}_ms_p99"] = round(_pct(times, 99), 2)
        if name == "semantic":
            figures["semantic_top_hit_on_topic"] = round(sum(on_topic) / len(on_topic), 3)
    return figures


async def _start_indexer(nats_url: str, data_dir: Path, nc: Client) -> tuple[asyncio.subprocess.Process, float]:
    env = {**os.environ, "AUTARCH_NATS_URL": nats_url, "AUTARCH_DATA_DIR": str(data_dir)}
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "autarch.services.indexer", env=env,
                                                   stderr=asyncio.subprocess.DEVNULL)
    for _ in range(1200):
        try:
            await nc.request(subjects.request("indexer", "latest_turn"), b'{"project_path": "/"}', timeout=0.25)
            return process, time.perf_counter() - began
        except Exception:
            if process.returncode is not None:
                raise RuntimeError(f"the indexer exited with {process.returncode}") from None
            await asyncio.sleep(0.1)
    raise RuntimeError("the indexer did not answer within 2 minutes")


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=60)


async def _run(tmp: Path, turns: int, samples: int) -> dict[str, Any]:
    server = EmbeddedNats(tmp / "nats").start()
    try:
        nc = await nats.connect(server.url)
        try:
            process, _ = await _start_indexer(server.url, tmp / "data", nc)
            try:
                figures = await measure_anchor_resolution(nc, "/bench/anchors", turns, samples=samples)
            finally:
                await _stop(process)
            # A restart loads every remembered turn before it answers.
            process, ready_s = await _start_indexer(server.url, tmp / "data", nc)
            try:
                found = await request(nc, subjects.request("indexer", "find_turn"),
                                      FindTurn(turn_id=f"bench-{turns - 1}"), TurnFound)
                assert found.turn is not None, "a recorded turn was lost in the restart"
                figures["restart_to_answer_s"] = round(ready_s, 2)
            finally:
                await _stop(process)
            return figures
        finally:
            await nc.close()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="autarch-bench-anchors-") as tmp_dir:
        figures = asyncio.run(_run(Path(tmp_dir), args.turns, args.samples))
    figures["goal_semantic_ms_p50"] = 20
    print(f"recorded {figures['turns']} turns in {figures['record_s']} s ({figures['record_turns_per_s']} turns/s); "
          f"a restarted indexer answers after {figures['restart_to_answer_s']} s")
    for name in ("chained_or_explicit", "semantic", "semantic_repeated_goal", "temporal", "slice"):
        print(f"{name:>24}: p50 {figures[f'{name}_ms_p50']:7.2f} ms   p99 {figures[f'{name}_ms_p99']:7.2f} ms")
    print(f"semantic best hit on the goal's subject: {figures['semantic_top_hit_on_topic']:.1%} "
          f"(goal: semantic p50 <= {figures['goal_semantic_ms_p50']} ms)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
