"""Concurrent workflows benchmark (a script, not a test). Its last line is a JSON object of the figures.

    python tests/benchmarks/workflows.py [--workflows N] [--timeout S]

Starts the system ``autarch demo`` starts (``autarch up --services orchestrator,tools,git,agent_runner`` with
the gateway and an embedded nats-server, on free ports and a fresh data directory) with the scripted model in
its own process, then runs N demo workflows at once — each on its own sample repository, each followed over SSE
(``/api/events?workflow=ID``) and auto-approved by its own driver thread — through scoping, research, planning,
preflight, two pulses and review. It reports:

- total wall time (first create → last ``workflow:completed``) and per-workflow time (its create → its
  ``workflow:completed`` as received) p50/p99;
- event → SSE latency: on one extra ``/api/events`` stream (every workflow), receive time minus the event's
  ``occurred_at`` (both wall clock on this machine), p50/p99, and the same by the event type's prefix
  (``workflow``, ``turn``, ``session``, ...: which service's events lag). The stream is read by a client
  process of its own (``--probe thread``: beside the drivers, sharing their GIL, as this script did before);
- that latency split where JetStream stored the event (its own timestamp, read back from the stream after the
  run): ``event_to_stream`` is the writing service's part (its commit, the relay's fsync and publish),
  ``stream_to_sse`` the rest (NATS → gateway → the SSE client);
- peak memory (``VmHWM`` of ``/proc/<pid>/status``) of each service process, the gateway and nats-server, read
  from ``<data dir>/run.json`` after the workflows ended;
- CPU seconds (``utime + stime`` of ``/proc/<pid>/stat``) of each of those processes, the scripted model and
  the supervisor, read at the same moment, and their sum; apart, the CPU seconds of the children each one
  reaped (``cutime + cstime``: the commands the tools service ran, git's git). On a busy machine wall-clock
  latency moves with everyone else's load; CPU time spent per run does much less, so it is the figure to
  compare before/after a change there. ``cpu_s_during_run`` is the same less what each had used when the
  workflows started (start-up's imports and connections), with the reaped children's sum as ``children``.

Every workflow's branch is checked: its two pulse commits on top of ``main``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import nats

from autarch.cli.demo_cmd import BRANCH, SERVICES, create_workflow, demo_scenario, drive, make_sample_repo
from autarch.cli.gateway_client import Connection, GatewayClient
from autarch.cli.local.natsserver import free_port
from autarch.cli.local_system import SSE_KEEPALIVE, LocalSystem, scrubbed_env
from autarch.cli.render import SseComment, parse_sse
from autarch.contracts import subjects

COMMITS = ["test(greeter): cover the empty-name greeting", "feat(greeter): greet the world when the name is empty"]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def peak_rss_mb(pid: int) -> float | None:
    """``VmHWM`` (the process's peak resident set) in MiB, or None when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> tuple[float, float] | None:
    """CPU time the process has used so far, and that of the children it reaped (e.g. the commands the tools
    service ran), in seconds; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after its closing parenthesis are fixed.
    fields = stat[stat.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    tick = os.sysconf("SC_CLK_TCK")
    return round((utime + stime) / tick, 2), round((cutime + cstime) / tick, 2)


def start_model(tmp: Path, scenario: str = "demo") -> tuple[subprocess.Popen[bytes], str]:
    """The scripted model (bundled ``demo``, or a scenario file) in its own process, so it does not share this
    one's GIL."""
    port = free_port()
    log = tmp / "model.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "autarch.services.scripted_model", scenario, "--port",
                                 str(port)],
                                env=scrubbed_env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"scripted model exited: {log.read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError("scripted model did not answer /healthz")


Received = tuple[str, str, str, float, float]
"""One event as the latency stream saw it: (type, workflow_id, occurred_at as sent, occurred, received)."""


def follow_latencies(client: GatewayClient, connected: Any, stop: Any) -> list[Received]:
    """One ``/api/events`` stream (all workflows, new events only), until ``stop`` is set: each event with its
    ``occurred_at`` and the wall-clock time it was received."""
    seen: list[Received] = []
    with client.events(workflow=None, since=None, deltas=False, read_timeout=30) as lines:
        for message in parse_sse(lines):
            received = time.time()
            if isinstance(message, SseComment):
                connected.set()
            else:
                event = json.loads(message.data)
                at = event.get("occurred_at")
                if at:
                    occurred = datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp()
                    seen.append((str(event.get("type", "?")), str(event.get("workflow_id")), str(at), occurred,
                                 received))
            if stop.is_set():
                break
    return seen


async def _stored_at(nats_url: str) -> dict[tuple[str, str, str], float]:
    """When JetStream stored each event of the stream (its own timestamp), keyed as the latency stream keys it."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        last = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
        sub = await js.subscribe(">", stream=subjects.EVENTS_STREAM, ordered_consumer=True)
        stored: dict[tuple[str, str, str], float] = {}
        while last:
            message = await sub.next_msg(timeout=10)
            event = json.loads(message.data)
            stored[(str(event.get("type")), str(event.get("workflow_id")), str(event.get("occurred_at")))] = (
                message.metadata.timestamp.timestamp())
            if message.metadata.sequence.stream >= last:
                break
        return stored
    finally:
        await nc.close()


def _probe_process(connection: Connection, connected: Any, stop: Any, results: Any) -> None:
    try:
        results.put(follow_latencies(GatewayClient(connection, trust_env=False), connected, stop))
    except BaseException as exc:
        results.put(repr(exc))
        connected.set()


class LatencyProbe:
    """The latency stream, read by a client of its own: by default a separate process, as a user's browser is,
    so its receive times do not include waiting for this process's GIL behind the 20 driver threads (``thread``
    measures that way, as this script did before, for comparison)."""

    def __init__(self, system: LocalSystem, mode: str) -> None:
        self.mode = mode
        self.seen: list[Received] = []
        self.error: str | None = None
        if mode == "process":
            ctx = multiprocessing.get_context("spawn")
            self.connected, self.stop_event, self._results = ctx.Event(), ctx.Event(), ctx.Queue()
            self._worker: Any = ctx.Process(target=_probe_process, daemon=True,
                                            args=(system.connection(), self.connected, self.stop_event,
                                                  self._results))
        else:
            self.connected, self.stop_event = threading.Event(), threading.Event()  # type: ignore[assignment]  # either kind of Event
            self._results = queue.Queue()  # type: ignore[assignment]  # either kind of Queue
            client = system.client()
            self._worker = threading.Thread(target=_probe_process_thread, args=(client, self), daemon=True)

    def start(self) -> None:
        self._worker.start()

    @property
    def latencies_ms(self) -> list[float]:
        """Receive time minus ``occurred_at`` of every event seen."""
        return [(received - occurred) * 1000 for *_, occurred, received in self.seen]

    def finish(self, timeout: float) -> None:
        """Stop after the next message (the stream's heartbeat comes every few seconds) and collect."""
        self.stop_event.set()
        try:
            result = self._results.get(timeout=timeout)
        except queue.Empty:
            self.error = "the latency stream did not finish"
            return
        if isinstance(result, str):
            self.error = result
            return
        self.seen = result


def _probe_process_thread(client: GatewayClient, probe: LatencyProbe) -> None:
    try:
        probe._results.put(follow_latencies(client, probe.connected, probe.stop_event))
    except BaseException as exc:
        probe._results.put(repr(exc))
        probe.connected.set()


def sample_repos(tmp: Path, workflows: int) -> list[Path]:
    """One sample repository of the demo per workflow."""
    files = demo_scenario()["files"]
    repos = []
    for i in range(workflows):
        repo = tmp / "repos" / f"wf-{i:03d}"
        make_sample_repo(repo, files)
        repos.append(repo)
    return repos


@dataclass
class Runs:
    """What the drivers saw: each workflow's outcome and create → completed time, and the wall time of all."""

    outcomes: dict[int, str] = field(default_factory=dict)
    durations: dict[int, float] = field(default_factory=dict)
    wall: float = 0.0


def drive_all(system: LocalSystem, repos: list[Path], *, timeout: float, urls: list[str] | None = None) -> Runs:
    """Create and drive one demo workflow per repository, all at once, each by its own thread and client (the
    ``i``-th on ``urls[i % len(urls)]``, default the system's gateway), through to its end."""
    runs, ends = Runs(), []
    barrier = threading.Barrier(len(repos))

    def driver(i: int) -> None:
        url = urls[i % len(urls)] if urls else system.url
        client = GatewayClient(Connection(url=url, token=system.token, sse_keepalive=SSE_KEEPALIVE), timeout=60,
                               trust_env=False)
        try:
            barrier.wait()
            begin = time.monotonic()
            wid = create_workflow(client, repos[i], title=f"Greet the world #{i}")

            def on_event(event: Mapping[str, Any], _received: float) -> None:
                if event.get("type") == "workflow:completed":
                    now = time.monotonic()
                    runs.durations[i] = now - begin
                    ends.append(now)

            outcome = drive(client, wid, timeout=timeout, alive=system.alive, on_event=on_event)
            ok = outcome.status == "completed"
            runs.outcomes[i] = "completed" if ok else f"{outcome.status}: {outcome.message}"
        except Exception as exc:
            runs.outcomes[i] = f"error: {exc!r}"
        finally:
            client.close()

    threads = [threading.Thread(target=driver, args=(i,), daemon=True) for i in range(len(repos))]
    first = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 60)
    runs.wall = (max(ends) if ends else time.monotonic()) - first
    return runs


def _cpu_by_process(system: LocalSystem, model: subprocess.Popen[bytes]) -> dict[str, tuple[float, float] | None]:
    """CPU seconds (own, reaped children's) of every process of the system, the scripted model included."""
    info = system.run_info() or {}
    pids = {name: pid for name, pid in (info.get("children") or {}).items() if pid}
    if info.get("nats_pid"):
        pids["nats-server"] = info["nats_pid"]
    pids["scripted_model"] = model.pid
    if system.proc is not None:
        pids["supervisor"] = system.proc.pid
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def run(tmp: Path, *, workflows: int, timeout: float, probe_mode: str = "process") -> dict:
    model, model_url = start_model(tmp)
    system = LocalSystem(tmp / "data", model_url, services=SERVICES)
    try:
        started = time.monotonic()
        system.start()
        startup_s = time.monotonic() - started
        repos = sample_repos(tmp, workflows)
        at_start = _cpu_by_process(system, model)
        probe = LatencyProbe(system, probe_mode)
        probe.start()
        if not probe.connected.wait(30):
            raise RuntimeError("the latency stream did not connect")

        runs = drive_all(system, repos, timeout=timeout)
        durations, outcomes, wall = runs.durations, runs.outcomes, runs.wall
        probe.finish(30)
        if probe.error:
            raise RuntimeError(f"the latency stream failed: {probe.error}")
        stored = asyncio.run(_stored_at(f"nats://127.0.0.1:{system.nats_port}"))

        info = system.run_info() or {}
        memory = {name: peak_rss_mb(pid) for name, pid in (info.get("children") or {}).items() if pid}
        if info.get("nats_pid"):
            memory["nats-server"] = peak_rss_mb(info["nats_pid"])
        used = _cpu_by_process(system, model)
        cpu = {name: u[0] for name, u in used.items() if u is not None}
        cpu["total"] = round(sum(cpu.values()), 2)
        children_cpu = {name: u[1] for name, u in used.items() if u is not None and u[1]}
        # The part spent while the workflows ran (start-up's imports and connections left out).
        cpu_run = {name: round(u[0] - at_start[name][0], 2) for name, u in used.items()  # type: ignore[index]  # checked below
                   if u is not None and at_start.get(name) is not None}
        cpu_run["total"] = round(sum(cpu_run.values()), 2)
        cpu_run["children"] = round(sum(u[1] - at_start[name][1] for name, u in used.items()  # type: ignore[index, misc]  # checked below
                                        if u is not None and at_start.get(name) is not None), 2)

        failed = {i: o for i, o in outcomes.items() if o != "completed"}
        bad_branches = []
        for i, repo in enumerate(repos):
            log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s", f"main..{BRANCH}"],
                                 capture_output=True, text=True).stdout.splitlines()
            if log != COMMITS:
                bad_branches.append(i)
        if failed or len(outcomes) < workflows:
            print(f"failed workflows: {failed or 'some drivers did not finish'}", file=sys.stderr)
            print(system.log_tail(40), file=sys.stderr)
        times = list(durations.values())
        lat = probe.latencies_ms
        by_kind: dict[str, list[float]] = {}
        for kind, _, _, occurred, received in probe.seen:
            by_kind.setdefault(kind.split(":")[0], []).append((received - occurred) * 1000)
        # Where the time went: writer (store, relay) up to JetStream's store time, then stream → gateway → client.
        to_stream, from_stream = [], []
        to_stream_by_kind: dict[str, list[float]] = {}
        for kind, wid, at, occurred, received in probe.seen:
            if (kind, wid, at) in stored:
                to_stream.append((stored[kind, wid, at] - occurred) * 1000)
                from_stream.append((received - stored[kind, wid, at]) * 1000)
                to_stream_by_kind.setdefault(kind.split(":")[0], []).append(to_stream[-1])
        return {
            "workflows": workflows,
            "workflows_completed": sum(1 for o in outcomes.values() if o == "completed"),
            "branches_ok": workflows - len(bad_branches),
            "startup_s": round(startup_s, 2),
            "total_wall_s": round(wall, 2),
            "workflow_p50_s": round(pct(times, 50), 2) if times else None,
            "workflow_p99_s": round(pct(times, 99), 2) if times else None,
            "workflows_per_min": round(len(times) / wall * 60, 1) if wall > 0 and times else None,
            "sse_events": len(lat),
            "event_to_sse_p50_ms": round(pct(lat, 50), 2) if lat else None,
            "event_to_sse_p99_ms": round(pct(lat, 99), 2) if lat else None,
            "event_to_sse_by_kind": {kind: {"n": len(v), "p50_ms": round(pct(v, 50), 1), "p99_ms": round(pct(v, 99), 1)}
                                     for kind, v in sorted(by_kind.items())},
            "event_to_stream_p50_ms": round(pct(to_stream, 50), 2) if to_stream else None,
            "event_to_stream_p99_ms": round(pct(to_stream, 99), 2) if to_stream else None,
            "stream_to_sse_p50_ms": round(pct(from_stream, 50), 2) if from_stream else None,
            "stream_to_sse_p99_ms": round(pct(from_stream, 99), 2) if from_stream else None,
            "event_to_stream_by_kind": {kind: {"p50_ms": round(pct(v, 50), 1), "p99_ms": round(pct(v, 99), 1)}
                                        for kind, v in sorted(to_stream_by_kind.items())},
            "peak_rss_mb": memory,
            "cpu_s": cpu,
            "cpu_s_during_run": cpu_run,
            "children_cpu_s": children_cpu,
            "latency_probe": probe_mode,
            "store": "sqlite (embedded default)",
            "machine_cores": os.cpu_count(),
        }
    finally:
        system.stop()
        model.terminate()
        try:
            model.wait(10)
        except subprocess.TimeoutExpired:
            model.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", type=int, default=20, help="demo workflows run at once")
    parser.add_argument("--timeout", type=float, default=300, help="seconds one workflow may take")
    parser.add_argument("--probe", choices=("process", "thread"), default="process",
                        help="read the latency stream in a process of its own (a separate client, the default) or "
                             "in a thread beside the drivers (how this script measured before)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="autarch-bench-") as d:
        figures = run(Path(d), workflows=args.workflows, timeout=args.timeout, probe_mode=args.probe)
    for key, value in figures.items():
        if isinstance(value, dict):
            print(f"{key:>22}:")
            for name, sub in value.items():
                print(f"{name:>22}  {sub}")
        else:
            print(f"{key:>22}: {value}")
    print(json.dumps(figures))
    # Figures of a run in which workflows failed are not figures of the system working: say so in the exit code.
    ok = figures["workflows_completed"] == figures["branches_ok"] == figures["workflows"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
