"""The ``sse_fanout`` curve of the growth benchmark (a script, not a test): event → last SSE client at 1, 10, 100
and 1,000 clients following one busy workflow. Its last line is a JSON object.

    python tests/benchmarks/growth_sse.py [--sizes 1,10,100,1000] [--runs 1] [--events 200] [--rate 25]

The measuring is :mod:`sse_fanout`'s (raw sockets in a process of their own, dated by the kernel's receive
timestamps; every client must get every event once, in order): here its synthetic source, a workflow whose
events the benchmark records straight into the stream at a steady rate, each followed by live deltas, so the
figures are the gateway's rather than the services'. The curve's figure is the p99 of event → last client at the
largest size over that at the smallest (goal ≤ 3), beside the p50s and the gateway's memory at each size. Beside
it, unless ``--no-floor``, the same curve with the clients following :mod:`sse_floor` instead of the gateway (the
least a Python server can do per event: a write per client per window, on the gateway's event loop), and the
gateway's p99 over the floor's at the largest size; and below both the kernel floor (:func:`sse_floor.kernel_floor`:
one event's bytes sent to N loopback sockets by a plain loop of non-blocking ``send``, no event loop), the cost of a
burst at each size.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sse_fanout import fanout_curve  # type: ignore[import-not-found]  # a sibling script, found from this folder
from sse_floor import kernel_floor  # type: ignore[import-not-found]  # a sibling script, found from this folder

SIZES = (1, 10, 100, 1000)
GOAL_RATIO = 3.0
SOURCE = {"events": 200, "rate": 25.0, "event_bytes": 600, "deltas_per_event": 4}
"""The busy workflow: 25 events a second for 8 s, each followed by 4 deltas (the demo's is ~90 events and ~70
deltas in 1 to 2 s, in bursts)."""


def sse_curve(tmp: Path, *, sizes: tuple[int, ...] = SIZES, runs: int = 1, source: dict[str, Any] | None = None,
              floor: bool = True) -> dict[str, Any]:
    """The curve on a system of its own, summed up as the growth benchmark reports curves; with ``floor``, the
    same curve of :mod:`sse_floor` beside it (the least a Python server can do: what the goal is up against)."""

    def report(row: dict[str, Any]) -> None:
        print(f"  sse_fanout: {row['clients']:>5} clients: event→last p50 {row['event_to_last_client_p50_ms']} "
              f"p99 {row['event_to_last_client_p99_ms']} ms; every event once {row['every_client_every_event']}; "
              f"gateway RSS {row['gateway_rss_mb_connected']} MiB (peak {row['gateway_peak_rss_mb']}); "
              f"load {row['load_avg_after']}", flush=True)

    figures = fanout_curve(tmp / "sse", sizes=sizes, source="synthetic", runs=runs, synthetic=source or SOURCE,
                           report=report)
    figures["ratio"] = figures["ratio_event_to_last_client_p99"]
    # The loop uvicorn's "auto" (and the floor's) picks in this environment.
    figures["event_loop"] = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    figures["goal"] = GOAL_RATIO
    if floor:
        print("  sse_fanout: the same clients and source, following the floor (sse_floor.py):", flush=True)
        below = fanout_curve(tmp / "sse-floor", sizes=sizes, source="synthetic", runs=runs,
                             synthetic=source or SOURCE, report=report, reference="floor")
        figures["floor"] = {"sizes": below["sizes"], "ratio": below["ratio_event_to_last_client_p99"]}
        # One event as the gateway frames it (its deltas left out: a lower bound).
        data = b"x" * int((source or SOURCE)["event_bytes"])
        body = b"id: 1\r\nevent: workflow:note_taken\r\ndata: %s\r\n\r\n" % data
        print("  sse_fanout: the kernel floor, one event's bytes to N loopback sockets by a plain send loop:",
              flush=True)
        figures["kernel_floor"] = []
        for size in sizes:
            row = kernel_floor(size, body)
            figures["kernel_floor"].append(row)
            print(f"  sse_fanout: {size:>5} sockets: a burst p50 {row['burst_p50_ms']} p99 {row['burst_p99_ms']} ms "
                  f"({row['per_send_us']} µs a send)", flush=True)
        at_floor = below["sizes"][-1]["event_to_last_client_p99_ms"]
        if at_floor:
            figures["gateway_over_floor_p99_at_largest"] = round(
                figures["sizes"][-1]["event_to_last_client_p99_ms"] / at_floor, 2)
    first, last = figures["sizes"][0], figures["sizes"][-1]
    if first["event_to_last_client_p50_ms"] and last["event_to_last_client_p50_ms"] is not None:
        figures["ratio_p50"] = round(last["event_to_last_client_p50_ms"] / first["event_to_last_client_p50_ms"], 2)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--events", type=int, default=SOURCE["events"])
    parser.add_argument("--rate", type=float, default=SOURCE["rate"])
    parser.add_argument("--deltas-per-event", type=int, default=SOURCE["deltas_per_event"])
    parser.add_argument("--no-floor", action="store_true", help="skip the floor reference's curve")
    args = parser.parse_args()
    source = {**SOURCE, "events": args.events, "rate": args.rate, "deltas_per_event": args.deltas_per_event}
    with tempfile.TemporaryDirectory(prefix="autarch-bench-sse-") as d:
        figures = sse_curve(Path(d), sizes=tuple(int(s) for s in args.sizes.split(",")), runs=args.runs,
                            source=source, floor=not args.no_floor)
    print(f"sse_fanout: p99 at {figures['sizes'][-1]['clients']} / at {figures['sizes'][0]['clients']} client(s) = "
          f"{figures['ratio']} (goal ≤ {GOAL_RATIO}); the floor's {figures.get('floor', {}).get('ratio')}; "
          f"gateway / floor at the largest {figures.get('gateway_over_floor_p99_at_largest')}")
    print(json.dumps(figures))
    return 0 if figures["every_client_every_event"] else 1


if __name__ == "__main__":
    sys.exit(main())
