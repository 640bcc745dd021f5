"""SSE fan-out benchmark (a script, not a test). Its last line is a JSON object of the figures.

    python tests/benchmarks/sse_fanout.py [--sizes 1,10,100,1000] [--runs 3] [--source demo|synthetic] [--no-deltas]

For each size N, N clients follow one busy workflow (``/api/events?workflow=ID``, deltas on as a browser's
``EventSource`` has them) through the gateway of ``autarch up`` (embedded nats-server, fresh data directory,
free ports), and the benchmark measures, for each recorded event of the workflow, when the *last* of the N
clients received it:

- ``event_to_last_client``: that time minus the event's ``occurred_at`` (when the service recorded it: its
  commit and the relay are included, as a user watching sees them), p50/p99 over the events of ``--runs``
  workflows (a new one each time, the clients connected anew);
- ``stream_to_last_client``: that time minus when JetStream stored the event (its own timestamp): the part the
  gateway's fan-out owns;
- that every client got every event of the workflow exactly once, in order (``every_client_every_event``);
- the gateway's resident memory with the N clients connected (``VmRSS``) and its peak (``VmHWM``), and the CPU
  seconds it spent on the size.

The busy workflow (``--source``):

- ``demo`` (default): the demo workflow ``autarch demo`` runs — scoping, research, planning, preflight, two
  pulses and review with the scripted model, auto-approved — through the real services, one per size;
- ``synthetic``: only the orchestrator runs; the benchmark itself records ``--events`` events of one workflow
  (``workflow:note_taken``, ~``--event-bytes`` of JSON each) at ``--rate`` per second, each followed by
  ``--deltas-per-event`` live deltas, straight into the stream: a steadier, busier source that isolates the
  gateway.

The clients: one process of their own (``--client-processes`` to split them), raw non-blocking sockets on one
event loop, each reading with ``recvmsg`` and the kernel's receive timestamp (``SO_TIMESTAMPNS``): the time a
read's bytes reached the client's socket, so the client's own processing of the other N-1 connections is not
counted (each socket's receive buffer is 1 MiB, so a client process reading late does not hold the gateway's
writes back either). ``client_overhead`` reports it apart (the user-space time of the read minus the kernel's,
p99): what a client timing its reads itself would have added. A read that holds several events dates them all
by its last packet, so early ones in it count slightly late. The machine has 2 cores shared by the gateway, nats-server,
the services, the clients and anything else running: ``load_avg`` is reported with each size.

Importable: :func:`fanout_curve` runs the whole curve on a system it starts (``tests/benchmarks/growth.py`` calls
it); :func:`measure_size` measures one size on a running one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import msgspec
import nats
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autarch.contracts import subjects
from autarch.contracts.agents import TurnDelta
from autarch.contracts.events import WorkflowNoteTaken

SIZES = (1, 10, 100, 1000)

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python's socket module does not name it
_ANCILLARY = socket.CMSG_SPACE(16)
_RECEIVE_BUFFER = 1 << 20


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def proc_status_mb(pid: int, field_name: str) -> float | None:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``) in MiB, or None when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- the clients ------------------------------------------------------------------------------------------------


@dataclass
class _Conn:
    sock: socket.socket
    tail: bytes = b""
    status_ok: bool | None = None
    connected: bool = False
    last: int = 0
    received: int = 0
    deltas: int = 0
    repeats: int = 0
    closed: bool = False


def _client_process(pipe: Connection, host: str, port: int, request: bytes, count: int) -> None:
    """Hold ``count`` connections; report when all are live, then, told to, what each event's last arrival was."""
    asyncio.run(_clients(pipe, host, port, request, count))


async def _clients(pipe: Connection, host: str, port: int, request: bytes, count: int) -> None:
    loop = asyncio.get_running_loop()
    conns: list[_Conn] = []
    # Per event id: [latest kernel receive time (ns), receptions, latest user-space read time (ns)].
    events: dict[int, list[int]] = {}
    overhead: list[int] = []  # user-space minus kernel time of each read, ns
    live = 0
    all_live = loop.create_future()

    def readable(conn: _Conn) -> None:
        nonlocal live
        try:
            data, ancillary, _, _ = conn.sock.recvmsg(1 << 18, _ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancillary = b"", []
        now = time.time_ns()
        if not data:
            conn.closed = True
            loop.remove_reader(conn.sock.fileno())
            return
        kernel = now
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanos = struct.unpack("qq", value[:16])
                kernel = seconds * 1_000_000_000 + nanos
        overhead.append(now - kernel)
        buffer = conn.tail + data if conn.tail else data
        cut = buffer.rfind(b"\n")
        if cut < 0:
            conn.tail = buffer
            return
        complete, conn.tail = buffer[:cut + 1], buffer[cut + 1:]
        if conn.status_ok is None:
            conn.status_ok = complete.startswith(b"HTTP/1.1 200")
        if not conn.connected and b"\n: connected" in complete:
            conn.connected = True
            live += 1
            if live == count and not all_live.done():
                all_live.set_result(None)
        conn.deltas += complete.count(b"_delta\r\n")
        at = complete.find(b"\nid: ")
        while at >= 0:
            end = complete.find(b"\r", at + 5)
            sequence = int(complete[at + 5:end])
            if sequence <= conn.last:
                conn.repeats += 1
            conn.last = sequence
            conn.received += 1
            seen = events.get(sequence)
            if seen is None:
                events[sequence] = [kernel, 1, now]
            else:
                seen[1] += 1
                if kernel > seen[0]:
                    seen[0] = kernel
                if now > seen[2]:
                    seen[2] = now
            at = complete.find(b"\nid: ", end)

    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        # Room for seconds of events: a client process slower than the gateway (a thousand sockets on a busy core)
        # must not close its TCP windows, or the kernel's arrival times would be the client's reading pace.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER)
        sock.setblocking(False)
        await loop.sock_connect(sock, (host, port))
        await loop.sock_sendall(sock, request)
        conn = _Conn(sock)
        conns.append(conn)
        loop.add_reader(sock.fileno(), readable, conn)
    # Live, or as many as managed within the time allowed (today's main did not get 1,000 there).
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_live, 120)
    pipe.send(("live", live))
    # Told the sequences to wait for (or to stop): report once every connection has the last one.
    commands: asyncio.Queue[Any] = asyncio.Queue()
    loop.add_reader(pipe.fileno(), lambda: commands.put_nowait(pipe.recv()))
    wanted, deadline = await commands.get()
    started = time.monotonic()
    while any(c.last < wanted and not c.closed for c in conns) and time.monotonic() - started < deadline:
        await asyncio.sleep(0.05)
    for conn in conns:
        loop.remove_reader(conn.sock.fileno())
        conn.sock.close()
    overhead.sort()
    pipe.send({
        "events": events,
        "status_ok": sum(1 for c in conns if c.status_ok),
        "repeats": sum(c.repeats for c in conns),
        "closed_early": sum(1 for c in conns if c.closed),
        "short": sum(1 for c in conns if c.last < wanted),
        "received": [c.received for c in conns],
        "deltas": max((c.deltas for c in conns), default=0),
        "overhead_p99_ms": round(overhead[int(0.99 * (len(overhead) - 1))] / 1e6, 3) if overhead else None,
        "cpu_s": round(time.process_time(), 2),
    })


class Clients:
    """``count`` SSE clients of ``path`` in ``processes`` processes of their own."""

    def __init__(self, url: str, token: str, path: str, count: int, *, processes: int = 1) -> None:
        parsed = httpx.URL(url)
        request = (f"GET {path} HTTP/1.1\r\nHost: {parsed.host}:{parsed.port}\r\nAuthorization: Bearer {token}\r\n"
                   "Accept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n").encode()
        ctx = multiprocessing.get_context("spawn")
        self._pipes: list[Connection] = []
        self._procs = []
        shares = [count // processes + (1 if i < count % processes else 0) for i in range(processes)]
        for share in (s for s in shares if s):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_client_process, args=(theirs, parsed.host, parsed.port, request, share),
                               daemon=True)
            proc.start()
            self._pipes.append(ours)
            self._procs.append(proc)
        self.count = count

    def wait_live(self, timeout: float = 180) -> int:
        """Wait until every client is live (its ``: connected`` came) or gave up waiting; how many are."""
        live = 0
        for pipe in self._pipes:
            if not pipe.poll(timeout):
                raise RuntimeError("an SSE client process did not report")
            word, count = pipe.recv()
            assert word == "live"
            live += count
        return live

    def finish(self, last_sequence: int, timeout: float = 60) -> dict[str, Any]:
        """Wait until every client has ``last_sequence`` (or ``timeout``), close them, and merge what they saw."""
        for pipe in self._pipes:
            pipe.send((last_sequence, timeout))
        merged: dict[str, Any] = {"events": {}, "status_ok": 0, "repeats": 0, "closed_early": 0, "short": 0,
                                  "received": [], "overhead_p99_ms": [], "cpu_s": 0.0, "deltas": 0}
        for pipe in self._pipes:
            if not pipe.poll(timeout + 60):
                raise RuntimeError("an SSE client process did not report")
            part = pipe.recv()
            for sequence, (kernel, n, user) in part["events"].items():
                seen = merged["events"].setdefault(sequence, [kernel, 0, user])
                seen[0], seen[1], seen[2] = max(seen[0], kernel), seen[1] + n, max(seen[2], user)
            for key in ("status_ok", "repeats", "closed_early", "short"):
                merged[key] += part[key]
            merged["received"] += part["received"]
            merged["overhead_p99_ms"].append(part["overhead_p99_ms"])
            merged["cpu_s"] += part["cpu_s"]
            merged["deltas"] = max(merged["deltas"], part["deltas"])
        for proc in self._procs:
            proc.join(10)
        return merged

    def kill(self) -> None:
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()


# --- the system and the busy workflow ----------------------------------------------------------------------------


@dataclass
class System:
    """A running ``autarch up`` (and the scripted model when the source is ``demo``)."""

    url: str
    token: str
    nats_url: str
    gateway_pid: int
    source: str
    repos: Path
    alive: Callable[[], bool]
    client: Callable[[], Any]
    made: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def running_system(tmp: Path, *, source: str = "demo") -> Iterator[System]:
    """``autarch up`` with what ``source`` needs: the demo's services and the scripted model, or the
    orchestrator alone. File descriptors raised to the hard limit first (a thousand sockets each side)."""
    from autarch.cli.demo_cmd import SERVICES
    from autarch.cli.local_system import LocalSystem
    from tests.benchmarks.workflows import start_model

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    model = None
    if source == "demo":
        model, model_url = start_model(tmp)
        system = LocalSystem(tmp / "data", model_url, services=SERVICES)
    else:
        system = LocalSystem(tmp / "data", "http://127.0.0.1:9", services=("orchestrator",))
    try:
        system.start()
        info = system.run_info() or {}
        pids = {name: int(pid) for name, pid in (info.get("children") or {}).items() if pid}
        if info.get("nats_pid"):
            pids["nats-server"] = int(info["nats_pid"])
        yield System(url=system.url, token=system.token, nats_url=f"nats://127.0.0.1:{system.nats_port}",
                     gateway_pid=int(info["children"]["gateway"]), source=source, repos=tmp / "repos",
                     alive=system.alive, client=system.client, extra={"pids": pids})
    finally:
        system.stop()
        if model is not None:
            model.terminate()
            try:
                model.wait(10)
            except subprocess.TimeoutExpired:
                model.kill()


def _workflow_id(key: str) -> str:
    """The id the gateway gives a workflow created with ``Idempotency-Key: key`` (so clients can follow it first)."""
    from autarch.gateway.app import _IDEMPOTENCY_NS

    return str(uuid.uuid5(_IDEMPOTENCY_NS, key))


def run_demo_workflow(system: System, key: str, *, timeout: float = 300) -> str:
    """Create the demo workflow (``Idempotency-Key: key``) on a sample repository of its own and drive it to its
    end, approving every card; its outcome."""
    from autarch.cli.demo_cmd import BRANCH, REQUEST, TITLE, demo_scenario, drive, make_sample_repo

    repo = system.repos / key
    make_sample_repo(repo, demo_scenario()["files"])
    with system.client() as client:
        r = httpx.post(f"{system.url}/api/workflows", headers={"Authorization": f"Bearer {system.token}",
                                                              "Idempotency-Key": key},
                       json={"title": TITLE, "request": REQUEST, "repo": str(repo), "branch": BRANCH}, timeout=60,
                       trust_env=False)
        r.raise_for_status()
        outcome = drive(client, r.json()["id"], timeout=timeout, alive=system.alive)
    return outcome.status


async def run_synthetic_workflow(nats_url: str, workflow_id: str, *, events: int, rate: float, event_bytes: int,
                                 deltas_per_event: int) -> str:
    """Record ``events`` events of ``workflow_id`` at ``rate`` a second, each followed by its live deltas."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    session = str(uuid.uuid4())
    filler = "x" * max(0, event_bytes - 250)
    subject = subjects.event(workflow_id, "workflow", workflow_id, "note_taken")
    delta_subject = subjects.deltas(workflow_id, session)
    start = time.monotonic()
    try:
        for n in range(events):
            await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
            event = WorkflowNoteTaken(workflow_id=workflow_id, occurred_at=datetime.now(UTC), note_id=str(uuid.uuid4()),
                                      stage="research", session_id=session, note=f"note {n} {filler}")
            await js.publish(subject, msgspec.json.encode(event), stream=subjects.EVENTS_STREAM)
            for d in range(deltas_per_event):
                delta = TurnDelta(type="turn:message_delta", session_id=session, turn_id=f"turn-{n}",
                                  text=f"token {d} ", run_id=workflow_id)
                await nc.publish(delta_subject, msgspec.json.encode(delta))
        await nc.flush()
    finally:
        await nc.close()
    return "completed"


async def recorded_events(nats_url: str, workflow_id: str) -> list[tuple[int, float, float]]:
    """The workflow's events in the stream: (sequence, occurred_at, stored at), wall-clock seconds."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        # A pull consumer: its pending count is what the stream holds (a push one has sent it away already).
        sub = await js.pull_subscribe(subjects.run_events(workflow_id), stream=subjects.EVENTS_STREAM,
                                      config=ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=30))
        pending = (await sub.consumer_info()).num_pending
        found: list[tuple[int, float, float]] = []
        while pending:
            for msg in await sub.fetch(min(pending, 256), timeout=10):
                at = json.loads(msg.data)["occurred_at"]
                occurred = datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp()
                found.append((msg.metadata.sequence.stream, occurred, msg.metadata.timestamp.timestamp()))
                pending = msg.metadata.num_pending
        await sub.unsubscribe()
        return found
    finally:
        await nc.close()


# --- one size, the curve ------------------------------------------------------------------------------------------


def _one_run(system: System, clients: int, *, deltas: bool, client_processes: int,
             synthetic: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
    """``clients`` clients follow one new busy workflow from before its first event to its last: what they saw."""
    system.made += 1
    key = f"fanout-{clients}-{system.made}-{uuid.uuid4().hex[:8]}"
    workflow_id = _workflow_id(key)
    path = f"/api/events?workflow={workflow_id}" + ("" if deltas else "&deltas=false")
    opened = time.monotonic()
    crowd = Clients(system.url, system.token, path, clients, processes=client_processes)
    try:
        live = crowd.wait_live()
        connect_s = time.monotonic() - opened
        rss_connected = proc_status_mb(system.gateway_pid, "VmRSS")
        cpu_before, load_before = cpu_seconds(system.gateway_pid), load_avg()
        started = time.monotonic()
        try:
            if system.source == "demo":
                outcome = run_demo_workflow(system, key, timeout=timeout)
            else:
                outcome = asyncio.run(run_synthetic_workflow(system.nats_url, workflow_id, **(synthetic or {})))
        except Exception as exc:  # an overwhelmed gateway: what the clients got is still measured
            outcome = f"failed: {exc}"
        ran = time.monotonic() - started
        try:
            expected: list[tuple[int, float, float]] | None = asyncio.run(recorded_events(system.nats_url,
                                                                                        workflow_id))
        except nats.js.errors.BadRequestError:  # no consumer left for reading back (today's main, 1,000 clients)
            expected = None
        # Without the last sequence to wait for, whatever came within half a minute counts.
        seen = crowd.finish(expected[-1][0] if expected else (0 if expected == [] else 1 << 62),
                            timeout=60 if expected is not None else 30)
        knew_last = expected is not None
        if expected is None:
            expected = asyncio.run(recorded_events(system.nats_url, workflow_id))
        rss_after = proc_status_mb(system.gateway_pid, "VmRSS")
    finally:
        crowd.kill()
    run: dict[str, Any] = {
        "outcome": outcome, "events": len(expected), "run_s": ran, "connect_s": connect_s, "live": live,
        "rss_connected": rss_connected, "rss_after": rss_after, "gateway_cpu_s": cpu_seconds(system.gateway_pid)
        - cpu_before, "load_before": load_before, "load_after": load_avg(), "to_last": [], "stream_to_last": [],
        "to_last_user": [], "missing": 0, "repeats": seen["repeats"], "client_cpu_s": seen["cpu_s"],
        "overhead_p99_ms": max((o for o in seen["overhead_p99_ms"] if o is not None), default=None),
        "deltas": seen["deltas"],
    }
    for sequence, occurred, stored in expected:
        got = seen["events"].get(sequence)
        if got is None or got[1] != clients:
            run["missing"] += 1
        if got is None:
            continue
        kernel, _, user = got
        run["to_last"].append((kernel / 1e9 - occurred) * 1000)
        run["stream_to_last"].append((kernel / 1e9 - stored) * 1000)
        run["to_last_user"].append((user / 1e9 - occurred) * 1000)
    run["every"] = (run["missing"] == 0 and seen["repeats"] == 0 and seen["status_ok"] == clients
                    and (seen["short"] == 0 or not knew_last) and all(r == len(expected) for r in seen["received"]))
    return run


def measure_size(system: System, clients: int, *, runs: int = 1, deltas: bool = True, client_processes: int = 1,
                 synthetic: dict[str, Any] | None = None, timeout: float = 300) -> dict[str, Any]:
    """``runs`` times, ``clients`` clients follow one new busy workflow from before its first event to its last;
    the figures of all the runs' events together."""
    done = [_one_run(system, clients, deltas=deltas, client_processes=client_processes, synthetic=synthetic,
                     timeout=timeout) for _ in range(runs)]

    def pooled(key: str, q: float) -> float | None:
        values = [v for run in done for v in run[key]]
        return round(pct(values, q), 2) if values else None

    return {
        "clients": clients,
        "runs": runs,
        "outcomes": [run["outcome"] for run in done],
        "events": sum(run["events"] for run in done),
        "deltas_per_client": [run["deltas"] for run in done],
        "run_s": [round(run["run_s"], 2) for run in done],
        "connect_s": max(round(run["connect_s"], 2) for run in done),
        "clients_live": min(run["live"] for run in done),
        "every_client_every_event": all(run["every"] for run in done),
        "events_missing_somewhere": sum(run["missing"] for run in done),
        "repeats": sum(run["repeats"] for run in done),
        "event_to_last_client_p50_ms": pooled("to_last", 50),
        "event_to_last_client_p99_ms": pooled("to_last", 99),
        "stream_to_last_client_p50_ms": pooled("stream_to_last", 50),
        "stream_to_last_client_p99_ms": pooled("stream_to_last", 99),
        "event_to_last_client_user_space_p99_ms": pooled("to_last_user", 99),
        "client_overhead_p99_ms": max((run["overhead_p99_ms"] for run in done if run["overhead_p99_ms"]),
                                      default=None),
        "client_cpu_s": round(sum(run["client_cpu_s"] for run in done), 2),
        "gateway_rss_mb_connected": max((run["rss_connected"] for run in done if run["rss_connected"]), default=None),
        "gateway_rss_mb_after": max((run["rss_after"] for run in done if run["rss_after"]), default=None),
        "gateway_peak_rss_mb": proc_status_mb(system.gateway_pid, "VmHWM"),
        "gateway_cpu_s": round(sum(run["gateway_cpu_s"] for run in done), 2),
        "load_avg_before": done[0]["load_before"],
        "load_avg_after": done[-1]["load_after"],
    }


@contextmanager
def floor_server(system: System) -> Iterator[System]:
    """The floor reference (:mod:`sse_floor`) on the system's NATS: the system as its clients see it instead."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("sse_floor.py")), "--nats",
                             system.nats_url, "--port", str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "serving", "the floor did not start"
        yield replace(system, url=f"http://127.0.0.1:{port}", gateway_pid=proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def fanout_curve(tmp: Path, *, sizes: tuple[int, ...] = SIZES, source: str = "demo", runs: int = 3,
                 deltas: bool = True, client_processes: int = 1, synthetic: dict[str, Any] | None = None,
                 report: Callable[[dict[str, Any]], None] | None = None, reference: str = "gateway"
                 ) -> dict[str, Any]:
    """The whole curve on a system of its own: one figure set per size and the ratios largest / smallest.

    ``reference="floor"``: the clients follow :mod:`sse_floor` rather than the gateway (synthetic source only)."""
    rows = []
    if reference == "floor" and source != "synthetic":
        raise ValueError("the floor reference follows the synthetic source only")
    with running_system(tmp, source=source) as system, (
            floor_server(system) if reference == "floor" else contextlib.nullcontext(system)) as system:
        if source == "demo":
            run_demo_workflow(system, f"warm-up-{uuid.uuid4().hex[:8]}")  # imports, connections, caches
        else:
            # The first connection and feed of a new server pay one-time costs (the first events of the first size
            # came 40-160 ms late, which was then the smallest size's p99): a short run first, not counted.
            measure_size(system, 1, deltas=deltas, synthetic={**(synthetic or {}), "events": 25})
        for size in sizes:
            row = measure_size(system, size, runs=runs, deltas=deltas, client_processes=client_processes,
                               synthetic=synthetic)
            rows.append(row)
            if report is not None:
                report(row)
    first, last = rows[0], rows[-1]

    def ratio(key: str) -> float | None:
        a, b = first.get(key), last.get(key)
        return round(b / a, 2) if a and b is not None else None

    return {
        "curve": "sse_fanout",
        "server": reference,
        "source": source,
        "deltas": deltas,
        "synthetic": synthetic if source == "synthetic" else None,
        "sizes": rows,
        "ratio_event_to_last_client_p99": ratio("event_to_last_client_p99_ms"),
        "ratio_stream_to_last_client_p99": ratio("stream_to_last_client_p99_ms"),
        "goal_ratio": 3.0,
        "every_client_every_event": all(r["every_client_every_event"] for r in rows),
        "machine_cores": os.cpu_count(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="connected clients, comma-separated")
    parser.add_argument("--source", choices=("demo", "synthetic"), default="demo")
    parser.add_argument("--runs", type=int, default=3, help="busy workflows per size (their events pooled)")
    parser.add_argument("--no-deltas", action="store_true", help="clients ask for recorded events only")
    parser.add_argument("--client-processes", type=int, default=1)
    parser.add_argument("--reference", choices=("gateway", "floor"), default="gateway",
                        help="floor: the clients follow sse_floor.py, the least a Python server does (synthetic)")
    parser.add_argument("--events", type=int, default=300, help="synthetic: events recorded per size")
    parser.add_argument("--rate", type=float, default=50.0, help="synthetic: events a second")
    parser.add_argument("--event-bytes", type=int, default=600, help="synthetic: JSON size of an event")
    parser.add_argument("--deltas-per-event", type=int, default=4, help="synthetic: live deltas after each event")
    args = parser.parse_args()
    synthetic = {"events": args.events, "rate": args.rate, "event_bytes": args.event_bytes,
                 "deltas_per_event": args.deltas_per_event}

    def report(row: dict[str, Any]) -> None:
        print(f"{row['clients']:>5} clients: event→last p50 {row['event_to_last_client_p50_ms']} ms "
              f"p99 {row['event_to_last_client_p99_ms']} ms; stream→last p50 {row['stream_to_last_client_p50_ms']} "
              f"p99 {row['stream_to_last_client_p99_ms']} ms; all {row['every_client_every_event']}; "
              f"gateway RSS {row['gateway_rss_mb_connected']} MiB; load {row['load_avg_after']}", flush=True)

    with tempfile.TemporaryDirectory(prefix="autarch-fanout-") as d:
        figures = fanout_curve(Path(d), sizes=tuple(int(s) for s in args.sizes.split(",")), source=args.source,
                               runs=args.runs, deltas=not args.no_deltas, client_processes=args.client_processes,
                               synthetic=synthetic, report=report, reference=args.reference)
    print(json.dumps(figures))
    return 0 if figures["every_client_every_event"] else 1


if __name__ == "__main__":
    sys.exit(main())
