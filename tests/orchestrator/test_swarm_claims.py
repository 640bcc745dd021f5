"""Claims under concurrent workers: never two holders of a bead, never a lost bead.

Each simulated worker has its own ``SwarmBook`` over its own application on one SQLite store, as separate
orchestrator processes sharing a store would: a claim is a conditional write, so when two race for a bead,
the store refuses the second save and that worker re-reads and finds the bead taken. Workers also crash
mid-bead (their attempt is reopened, as a lapsed lease reopens it) and the bead is done by someone else.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autarch.contracts.beads import Dependency
from autarch.runtime.errors import ServiceFailure
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.swarm.book import SwarmBook, ranked
from autarch.services.orchestrator.swarm.model import Bead, Swarm
from autarch.services.orchestrator.writer import BatchedWriter

WID = "0f9e8d7c-6b5a-4c3d-8e2f-1a2b3c4d5e6f"


@st.composite
def dags(draw: st.DrawFn) -> list[dict[str, object]]:
    n = draw(st.integers(min_value=1, max_value=9))
    beads = []
    for i in range(n):
        deps = draw(st.lists(st.integers(min_value=0, max_value=max(0, i - 1)), max_size=2, unique=True)) if i else []
        bead = Bead(id=f"b{i}", title=f"bead {i}", files=[f"f{i}.py"], verify=["true"],
                    dependencies=[Dependency(bead_id=f"b{d}") for d in deps])
        beads.append(msgspec.to_builtins(bead))
    return beads


def _app(path: Path) -> WorkflowApplication:
    return WorkflowApplication(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path),
                                    "SQLITE_LOCK_TIMEOUT": "10"})


async def _run(store: Path, beads: list[dict[str, object]], workers: int, crash_rate: float, seed: int) -> Swarm:
    rng = random.Random(seed)
    first = _app(store)
    swarm = Swarm(workflow_id=WID, mode="swarm", max_workers=workers, beads=beads, at="2026-11-25T09:00:00+00:00")
    for i in range(workers):
        swarm.join(f"w{i}", f"w{i}", f"/wt/{i}")
    first.save(swarm)
    books = []
    for _ in range(workers):
        app = _app(store)
        writer = BatchedWriter(app=app)
        writer.start()
        books.append(SwarmBook(app=app, writer=writer))

    async def worker(index: int) -> None:
        book, name = books[index], f"w{index}"
        idle_rounds = 0
        while idle_rounds < 200:
            current = await book.read(WID)
            if current.all_closed():
                return
            ready = ranked(current).ready
            if not ready:
                idle_rounds += 1
                await asyncio.sleep(0.002)
                continue
            pick = ready[rng.randrange(len(ready))].bead_id  # workers race for overlapping picks on purpose
            try:
                _, attempt = await book.change(WID, lambda s, b=pick: s.claim(b, name))  # type: ignore[misc]  # bound now
            except ServiceFailure:
                continue  # another worker won: read again
            await asyncio.sleep(rng.random() * 0.003)
            key = (attempt.bead_id, attempt.number)
            if rng.random() < crash_rate:
                await book.change(WID, lambda s, k=key: s.reopen(s.attempts[k], "lease lapsed"))  # type: ignore[misc]  # bound now
            else:
                await book.change(WID, lambda s, k=key: s.merged_as(s.attempts[k], f"commit-{k[0]}-{k[1]}"))  # type: ignore[misc]  # bound now

    try:
        await asyncio.gather(*(worker(i) for i in range(workers)))
    finally:
        for book in books:
            await book.writer.stop()
    return _app(store).get_swarm(WID)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(beads=dags(), workers=st.integers(min_value=2, max_value=4), crash_rate=st.sampled_from([0.0, 0.3]),
       seed=st.integers(min_value=0, max_value=10_000))
def test_concurrent_claims_never_double_a_bead_and_never_lose_one(tmp_path_factory, beads, workers, crash_rate,
                                                                  seed) -> None:
    store = tmp_path_factory.mktemp("claims") / "events.sqlite"
    swarm = asyncio.run(_run(store, beads, workers, crash_rate, seed))

    # Never lost: every bead closed, merged exactly once.
    assert swarm.all_closed()
    assert sorted(swarm.merged) == sorted(b["id"] for b in beads)
    # Never two holders: per bead, attempts are numbered 1..n and at most one of them landed.
    for bead_id in swarm.beads:
        numbers = sorted(n for (b, n) in swarm.attempts if b == bead_id)
        assert numbers == list(range(1, len(numbers) + 1))
        assert sum(1 for (b, _), a in swarm.attempts.items() if b == bead_id and a.ended == "merged") == 1
    # Dependency order: a bead landed only after every bead blocking it.
    position = {b: i for i, b in enumerate(swarm.merged)}
    for bead in swarm.beads.values():
        assert all(position[d] < position[bead.id] for d in bead.blockers())
    # Never two holders at once, in the order the store recorded: a bead is claimed again only after its last
    # attempt ended, and a worker claims only when its last attempt ended.
    holder: dict[str, str] = {}
    busy: set[str] = set()
    reader = _app(store)
    for event in list(reader.repository.event_store.get(swarm.id)):
        if isinstance(event, Swarm.BeadClaimed):
            assert event.bead_id not in holder and event.worker not in busy, event
            holder[event.bead_id] = event.worker
            busy.add(event.worker)
        elif isinstance(event, Swarm.BeadMerged | Swarm.BeadReopened):
            busy.discard(holder.pop(event.bead_id))
