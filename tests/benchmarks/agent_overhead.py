"""Agent runner overhead benchmark (a script, not a test). Its last line is a JSON object of the figures.

    python tests/benchmarks/agent_overhead.py [--sessions N] [--steps N] [--stops N]

Measures the platform's own time per tool round trip: from the moment the model's reply carrying a
``tool_use`` has been read off the stream, through recording the reply, running the tool in the
tools service over NATS and recording its result, to the moment the next model request goes out on
the wire (an httpx request hook, so the SDK's request building is included). The scripted model
answers at once and runs in its own process, as does the tools service (each tool is a ``read_file``
of a small file); the runner runs here with its production code and the embedded default store
(SQLite, ``synchronous=NORMAL``). Sessions run one after another, so this is latency, not throughput.

A second, short phase measures how fast a stop ends a running turn (the issue promises within a
second): a discussion turn streams a long reply slowly, and once its deltas flow a ``stop_session``
is sent. ``stop_*`` is the time from sending the command to its reply, which comes once
``turn:completed`` (cancelled) is recorded in the store; ``stop_event_*`` is the time until that
event arrives from the stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anthropic
import httpx
import msgspec

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.contracts import subjects
from autarch.contracts.agents import (
    GetSession,
    SessionStopped,
    SessionView,
    StartSession,
    StopSession,
    TurnAccepted,
)
from autarch.contracts.events import TurnCompleted
from autarch.runtime.bus import connect, ensure_event_stream
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.agent_runner.model_client import ModelClient
from autarch.services.agent_runner.service import open_runner

GOAL_P50_MS = 5.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def scenario(steps: int) -> dict:
    read = {"type": "tool_use", "name": "read_file", "input": {"reason": "Read the module", "path": "core.py"}}
    done = {"type": "tool_use", "name": "complete_pulse",
            "input": {"summary": "chore: benchmark", "filesChanged": []}}
    slow = {"delay_ms": 20, "content": [{"type": "text", "text": " ".join(f"word{n}" for n in range(500))}]}
    return {"check_tools": True, "scripts": {"pulsing:bench": [{"content": [read]}] * steps + [{"content": [done]}],
                                             "discussion:stop": [slow]}}


def start_process(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


def wait_for_url(log: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(r"at (http://\S+)", log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"scripted model exited: {log.read_text()}")
        time.sleep(0.05)
    raise RuntimeError("scripted model did not announce its URL")


async def stop_latencies(nc, repo: Path, *, stops: int) -> tuple[list[float], list[float]]:
    """(command → recorded, command → event on the stream) in ms, for ``stops`` turns stopped mid-reply."""
    recorded: list[float] = []
    streamed: list[float] = []
    for n in range(stops + 1):
        command = StartSession(session_id=str(uuid.uuid4()), role="discussion", root=str(repo), kickoff="Talk.",
                               script="stop", run_id=str(uuid.uuid4()))
        deltas = await nc.subscribe(subjects.deltas(command.run_id, command.session_id))  # type: ignore[arg-type]  # set above
        done = await nc.subscribe(subjects.event(command.run_id, "turn", command.session_id, "completed"))  # type: ignore[arg-type]  # set above
        await request(nc, subjects.request("agent_runner", "start_session"), command, TurnAccepted)
        await deltas.next_msg(timeout=30)  # the reply is streaming
        await asyncio.sleep(0.05 + 0.01 * (n % 5))  # land the stop at varied points of the stream
        began = time.perf_counter()
        await request(nc, subjects.request("agent_runner", "stop_session"),
                      StopSession(session_id=command.session_id, reason="benchmark stop"), SessionStopped)
        replied = time.perf_counter()
        event = msgspec.json.decode((await done.next_msg(timeout=30)).data, type=TurnCompleted)
        arrived = time.perf_counter()
        await deltas.unsubscribe()
        await done.unsubscribe()
        assert event.outcome == "cancelled", event
        if n == 0:
            continue  # warm-up
        recorded.append((replied - began) * 1000)
        streamed.append((arrived - began) * 1000)
    return recorded, streamed


async def run(tmp: Path, *, sessions: int, steps: int, stops: int) -> dict:
    nats = EmbeddedNats(tmp / "nats").start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTARCH_")}
        env.update(AUTARCH_NATS_URL=nats.url, AUTARCH_DATA_DIR=str(tmp / "data"))
        (tmp / "scenario.json").write_text(json.dumps(scenario(steps)))
        model_log = tmp / "model.log"
        procs.append(start_process(["-m", "autarch.services.scripted_model", str(tmp / "scenario.json")], env,
                                   model_log))
        procs.append(start_process(["-m", "autarch.services.tools"], env, tmp / "tools.log"))
        base_url = wait_for_url(model_log, procs[0])
        repo = tmp / "repo"
        repo.mkdir()
        (repo / "core.py").write_text("def greet(name):\n    return 'Hello, ' + name\n" * 20)

        sent: list[float] = []

        async def on_request(_request: httpx.Request) -> None:
            sent.append(time.perf_counter())

        received: list[float] = []
        settings = Settings(data_dir=str(tmp / "data"), nats_url=nats.url, anthropic_base_url=base_url)
        http = anthropic.DefaultAsyncHttpxClient(event_hooks={"request": [on_request]})
        model = ModelClient(settings=settings, http_client=http)
        nc = await connect(nats.url, name="bench")
        await ensure_event_stream(nc)
        runner, stop = await open_runner(nc, settings, model=model)
        runner.deps.on_reply = lambda _session, reply, _at: received.append(reply.received_at)
        await request(nc, subjects.request("tools", "list_tools"), {"role": "pulsing"}, dict, retry_unavailable=30)
        overheads: list[float] = []
        started = time.perf_counter()
        for n in range(sessions + 1):
            sent.clear()
            received.clear()
            command = StartSession(session_id=str(uuid.uuid4()), role="pulsing", root=str(repo), kickoff="Go.",
                                   script="bench", run_id=str(uuid.uuid4()))
            # Wait on the turn:completed event (no polling: it would load the process being measured).
            done = await nc.subscribe(subjects.event(command.run_id, "turn", command.session_id, "completed"))  # type: ignore[arg-type]  # set above
            accepted = await request(nc, subjects.request("agent_runner", "start_session"), command, TurnAccepted)
            await done.next_msg(timeout=120)
            await done.unsubscribe()
            view = await request(nc, subjects.request("agent_runner", "get_session"),
                                 GetSession(session_id=accepted.session_id), SessionView)
            assert view.turns[0].outcome.tool == "complete_pulse", view.turns[0].outcome
            assert len(sent) == steps + 1 and len(received) == steps + 1, (len(sent), len(received))
            if n == 0:
                continue  # warm-up: imports, connections, caches
            overheads.extend((sent[i + 1] - received[i]) * 1000 for i in range(steps))
        elapsed = time.perf_counter() - started
        stop_recorded, stop_streamed = await stop_latencies(nc, repo, stops=stops)
        await stop()
        await nc.drain()
        return {
            "round_trips": len(overheads),
            "sessions": sessions,
            "tool_calls_per_turn": steps,
            "overhead_p50_ms": round(pct(overheads, 50), 3),
            "overhead_p90_ms": round(pct(overheads, 90), 3),
            "overhead_p99_ms": round(pct(overheads, 99), 3),
            "overhead_mean_ms": round(sum(overheads) / len(overheads), 3),
            "round_trips_per_s": round(len(overheads) / elapsed, 1),
            "goal_p50_ms": GOAL_P50_MS,
            "stops": len(stop_recorded),
            "stop_p50_ms": round(pct(stop_recorded, 50), 3),
            "stop_max_ms": round(max(stop_recorded), 3),
            "stop_event_p50_ms": round(pct(stop_streamed, 50), 3),
            "stop_event_max_ms": round(max(stop_streamed), 3),
            "store": "sqlite (WAL, synchronous=NORMAL)",
            "machine_cores": os.cpu_count(),
        }
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        nats.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=20, help="sessions measured (one more warms up)")
    parser.add_argument("--steps", type=int, default=25, help="tool round trips per session's turn")
    parser.add_argument("--stops", type=int, default=20, help="turns stopped mid-reply (one more warms up)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        figures = asyncio.run(run(Path(d), sessions=args.sessions, steps=args.steps, stops=args.stops))
    for key, value in figures.items():
        print(f"{key:>22}: {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
