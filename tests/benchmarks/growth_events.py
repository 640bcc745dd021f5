"""The ``event_store`` curve of the growth benchmark (a script, not a test): does resuming near the end of the
event stream cost the same with a thousand events behind it as with a million? Its last line is a JSON object.

    python tests/benchmarks/growth_events.py [--sizes 1000,10000,100000,1000000] [--probes 20]

One ``autarch up`` (the orchestrator alone, fresh data directory, free ports) whose event stream is filled, size
after size, to each count of events (``workflow:note_taken`` of one workflow per ``PER_WORKFLOW`` events, about
300 bytes each, written straight into JetStream as the relay writes them, many in flight at once). At each size,
``--probes`` times each, a new SSE client of the gateway measures from its request to the moment it has:

- ``since``: ``GET /api/events?since=<last - 10>&deltas=false`` (every workflow's events): the last event;
- ``resume_workflow``: ``GET /api/events?workflow=<the last workflow>`` with ``Last-Event-ID: <last - 10>``, as
  a browser's ``EventSource`` resumes: the last event;
- ``resume_old_workflow``: the same for the *first* workflow (its events all at the stream's start, none after
  the resume point): its ``: connected`` line, i.e. until the gateway knows there is nothing to send.

p50/p99 of each, the ratio of the largest size's p99 to the smallest's (goal ≤ 1.25), and the resident memory
(``VmRSS``) of the gateway, nats-server and the orchestrator at each size.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sse_fanout import pct, proc_status_mb, running_system  # type: ignore[import-not-found]  # a sibling script, found from this folder

from autarch.contracts import subjects
from autarch.contracts.events import WorkflowNoteTaken

SIZES = (1_000, 10_000, 100_000, 1_000_000)
PER_WORKFLOW = 100
"""Events of one workflow: a million events are ten thousand workflows."""
GOAL_RATIO = 1.25
_FLUSH = 2000
_NAMESPACE = uuid.UUID("6f1c1b7e-9a54-4a43-8a5e-0c1e3f6d2b10")


def workflow_of(n: int) -> str:
    """The workflow the ``n``-th event (from 0) belongs to."""
    return _workflow(n // PER_WORKFLOW)


@functools.lru_cache(maxsize=4)
def _workflow(index: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, str(index)))


async def fill(nats_url: str, start: int, end: int) -> float:
    """Record events ``start`` … ``end - 1`` into the stream; seconds taken.

    Published without waiting for each acknowledgement (a round trip each would make a million take minutes):
    a flush every ``_FLUSH`` events keeps the server's queue short, and the stream's count at the end says
    whether every one was stored."""
    nc = await nats.connect(nats_url, pending_size=64 * 1024 * 1024)
    encoder = msgspec.json.Encoder()
    began = time.monotonic()
    try:
        stamp = datetime.now(UTC)
        for n in range(start, end):
            workflow = workflow_of(n)
            event = WorkflowNoteTaken(workflow_id=workflow, occurred_at=stamp, note_id=str(uuid.uuid4()),
                                      stage="research", session_id=workflow, note=f"note {n}")
            await nc.publish(subjects.event(workflow, "workflow", workflow, "note_taken"), encoder.encode(event))
            if n % _FLUSH == _FLUSH - 1:
                await nc.flush(timeout=60)
        await nc.flush(timeout=60)
        js = nc.jetstream()
        deadline = time.monotonic() + 120
        while (held := (await js.stream_info(subjects.EVENTS_STREAM)).state.messages) < end:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the stream holds {held} events, {end} were written")
            await asyncio.sleep(0.1)
    finally:
        await nc.close()
    return time.monotonic() - began


async def probe(client: httpx.AsyncClient, path: str, *, until: bytes, headers: dict[str, str] | None = None
                ) -> float:
    """Milliseconds from the request of ``path`` to the first read holding ``until``."""
    started = time.perf_counter()
    seen = b""
    async with client.stream("GET", path, headers=headers) as response:
        response.raise_for_status()
        async for chunk in response.aiter_raw():
            seen = seen[-len(until):] + chunk
            if until in seen:
                return (time.perf_counter() - started) * 1000
    raise RuntimeError(f"{path} ended before {until!r}")


async def measure(url: str, token: str, last: int, probes: int) -> dict[str, list[float]]:
    """Each probe ``probes`` times against a stream whose last sequence is ``last``."""
    newest, oldest = workflow_of(last - 1), workflow_of(0)
    resume = str(last - 10)
    done = f"\nid: {last}\r".encode()
    kinds: dict[str, tuple[str, bytes, dict[str, str] | None]] = {
        "since": (f"/api/events?since={resume}&deltas=false", done, None),
        "resume_workflow": (f"/api/events?workflow={newest}&deltas=false", done, {"Last-Event-ID": resume}),
        "resume_old_workflow": (f"/api/events?workflow={oldest}&deltas=false", b": connected",
                                {"Last-Event-ID": resume}),
    }
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60,
                                 trust_env=False) as client:
        for round_ in range(probes + 1):
            for kind, (path, until, headers) in kinds.items():
                took = await probe(client, path, until=until, headers=headers)
                if round_:  # the first round warms the gateway's connection to NATS and its imports up, untimed
                    times[kind].append(took)
    return times


def event_store_curve(tmp: Path, *, sizes: tuple[int, ...] = SIZES, probes: int = 20,
                      report: Any = None) -> dict[str, Any]:
    """The whole curve on a system of its own (see the module's docstring)."""
    rows: list[dict[str, Any]] = []
    with running_system(tmp, source="synthetic") as system:
        pids = {name: pid for name, pid in system.extra["pids"].items()
                if name in ("gateway", "nats-server", "orchestrator")}
        written = 0
        for size in sizes:
            fill_s = asyncio.run(fill(system.nats_url, written, size))
            written = size
            times = asyncio.run(measure(system.url, system.token, size, probes))
            row: dict[str, Any] = {"events": size, "fill_s": round(fill_s, 1),
                                   "events_per_s": round((size - (rows[-1]["events"] if rows else 0)) / fill_s)}
            for kind, values in times.items():
                row[f"{kind}_p50_ms"] = round(statistics.median(values), 2)
                row[f"{kind}_p99_ms"] = round(pct(values, 99), 2)
            row["rss_mb"] = {name: proc_status_mb(pid, "VmRSS") for name, pid in pids.items()}
            rows.append(row)
            if report is not None:
                report(row)
    first, last = rows[0], rows[-1]
    ratios = {kind: round(last[f"{kind}_p99_ms"] / first[f"{kind}_p99_ms"], 2)
              for kind in ("since", "resume_workflow", "resume_old_workflow")}
    ratios_p50 = {kind: round(last[f"{kind}_p50_ms"] / first[f"{kind}_p50_ms"], 2) for kind in ratios}
    return {"curve": "event_store", "sizes": rows, "ratios_p99": ratios, "ratios_p50": ratios_p50,
            "ratio": max(ratios_p50.values()), "goal": GOAL_RATIO, "probes": probes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--probes", type=int, default=20)
    args = parser.parse_args()

    def report(row: dict[str, Any]) -> None:
        print(f"{row['events']:>8} events (filled at {row['events_per_s']}/s): "
              + "; ".join(f"{k} p50 {row[f'{k}_p50_ms']} p99 {row[f'{k}_p99_ms']} ms"
                          for k in ("since", "resume_workflow", "resume_old_workflow"))
              + f"; RSS {row['rss_mb']}", flush=True)

    with tempfile.TemporaryDirectory(prefix="autarch-bench-events-") as d:
        figures = event_store_curve(Path(d), sizes=tuple(int(s) for s in args.sizes.split(",")),
                                    probes=args.probes, report=report)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
