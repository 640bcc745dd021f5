"""The growth benchmark's ``agent_session`` curve (``growth.py --curves agent_session``): does a turn of a long agent
session cost the platform as much at its 500th turn as at its first?

One discussion session of N turns on a fresh system per size (the tools service and the agent runner, the scripted
model in this process): the kickoff, then N - 1 messages, each sent once the turn before it ended. Every turn is one
model call answering some 250 tokens of text, and the scripted model's context window is small enough that older
turns are compacted into a digest (the runner's ``context_window_tokens`` set to it) after some 40 turns, so a long
session runs on compacted requests most of its life. A step is a turn: from its message sent (the kickoff: the
session's start) to its ``turn:completed`` received, minus its model call: that turn's own request replayed to the
scripted model afterwards and timed (see :func:`replayed_model_ms`).
Beside it, the CPU milliseconds each service process spent per turn in the first and the last tenth of the turns
and over all of them (sampled from ``/proc`` as each turn ends), and each process's peak memory.

A size of fewer than :data:`MIN_STEPS` turns runs as many sessions of that size as it takes to measure that many
turns, one after another on the same system, each one's first turn (its kickoff) left out as the first session's is:
the median of a 5-turn session's four turns moved by half from one run to the next on the shared 2-core machine, and
with it the curve's ratio.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from autarch.cli.local_system import LocalSystem
from autarch.contracts import subjects
from autarch.contracts.agents import GetSession, SendMessage, SessionView, StartSession, TurnAccepted
from autarch.runtime.requests import request
from autarch.services.scripted_model import ScriptedModelServer
from tests.benchmarks.growth import cpu_seconds, curve, deciles, peak_rss_mb, processes

__all__ = ["CONTEXT_WINDOW", "session_curve", "session_scenario"]

SERVICES = ("tools", "agent_runner")
CONTEXT_WINDOW = 30_000
"""Tokens: the discussion agent's system prompt and tools, then room for some 40 turns before compaction."""
MIN_STEPS = 49
"""Turns measured at least at each size (a size with fewer turns runs several sessions of its size)."""
REPLY = " ".join(["The answer keeps its place in the conversation and says what the user asked for."] * 12)


def session_scenario(turns: int) -> dict[str, Any]:
    """A discussion script that answers every turn with the same text. A step is the number of assistant messages
    in the request, which compaction lowers again: every step answers alike."""
    return {"description": "agent session growth", "context_window": CONTEXT_WINDOW,
            "scripts": {"discussion:growth": [REPLY] * (turns + 1)}}


def _git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "README.md").write_text("# growth\n")
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b",
           "PATH": "/usr/bin:/bin:/usr/local/bin"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True)
    return path


def model_request_ms(base_url: str, samples: int = 30) -> float:
    """The scripted model's own time for one request of this scenario, median (direct calls)."""
    import httpx

    body = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
            "system": "autarch-role: discussion\nautarch-script: growth\n"}
    headers = {"x-api-key": "scripted", "anthropic-version": "2023-06-01", "x-autarch-script": "growth"}
    times = []
    with httpx.Client(base_url=base_url, trust_env=False) as client:
        for _ in range(samples):
            started = time.perf_counter()
            client.post("/v1/messages", json=body, headers=headers).raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def replayed_model_ms(model: ScriptedModelServer, turns: int) -> list[float] | None:
    """The scripted model's own time for each turn's request, replayed as it came (its body encoded beforehand, so
    the runner's encoding stays the platform's), in turn order; None when the log does not hold one per turn.

    A request carries the whole context (some 30,000 tokens near the compaction threshold, against a hundred at the
    kickoff), and the model's time to read and answer it grows with it: timed on a one-line request, that time
    would be counted as the platform's, and the curve would rise with the context the model is sent, not with the
    session's history.
    """
    import httpx

    sent = [r for r in model.requests if r.path == "/v1/messages" and r.body is not None]
    if len(sent) != turns:
        return None
    headers = {"x-api-key": "scripted", "anthropic-version": "2023-06-01", "content-type": "application/json",
               "x-autarch-script": "growth"}
    times = []
    with httpx.Client(base_url=model.base_url, trust_env=False, timeout=60) as client:
        client.post("/v1/messages", content=json.dumps(sent[0].body).encode(), headers=headers)  # the connection
        for recorded in sent:
            content = json.dumps(recorded.body).encode()
            started = time.perf_counter()
            with client.stream("POST", "/v1/messages", content=content, headers=headers) as reply:
                reply.raise_for_status()
                for _ in reply.iter_raw():
                    pass
            times.append((time.perf_counter() - started) * 1000)
    return times


async def run_session(nats_url: str, root: Path, turns: int, pids: dict[str, int]
                      ) -> tuple[list[float], list[str], list[tuple[int, dict[str, float]]], int | None]:
    """Each turn's time (ms, send to ``turn:completed`` received), each turn's outcome, CPU samples, and the last
    turn compacted into the digest at the end (None when the session's view could not be read)."""
    nc = await nats.connect(nats_url)
    workflow_id, session_id = str(uuid.uuid4()), str(uuid.uuid4())
    ended: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_event(msg: Any) -> None:
        if subjects.event_type_from_subject(msg.subject) == "turn:completed":
            ended.put_nowait(json.loads(msg.data))

    sub = await nc.subscribe(subjects.run_events(workflow_id), cb=on_event)
    times: list[float] = []
    outcomes: list[str] = []
    samples: list[tuple[int, dict[str, float]]] = []

    def sample(count: int) -> None:
        cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
        samples.append((count, {k: v for k, v in cpu.items() if v is not None}))

    try:
        sample(0)
        for n in range(turns):
            started = time.perf_counter()
            if n == 0:
                command: Any = StartSession(session_id=session_id, role="discussion", root=str(root),
                                            kickoff="Talk with me about the repository.", run_id=workflow_id,
                                            script="growth")
                await request(nc, subjects.request("agent_runner", "start_session"), command, TurnAccepted,
                              timeout=30, retry_unavailable=30)
            else:
                command = SendMessage(session_id=session_id, text=f"Question {n}: and what comes next?",
                                      message_id=f"m{n}")
                await request(nc, subjects.request("agent_runner", "send_message"), command, TurnAccepted,
                              timeout=30)
            event = await asyncio.wait_for(ended.get(), timeout=120)
            times.append((time.perf_counter() - started) * 1000)
            outcomes.append(str(event.get("outcome")))
            sample(n + 1)
        try:
            view = await request(nc, subjects.request("agent_runner", "get_session"),
                                 GetSession(session_id=session_id), SessionView, timeout=30)
            compacted: int | None = view.compacted_through
        except Exception:  # a view of every turn may be more than one reply carries; the figure is then unknown
            compacted = None
    finally:
        await sub.unsubscribe()
        await nc.close()
    return times, outcomes, samples, compacted


def cpu_per_turn(samples: list[tuple[int, dict[str, float]]], total: int) -> dict[str, dict[str, float]]:
    tenth = max(1, total // 10)

    def between(lo: int, hi: int) -> dict[str, float]:
        first, last = samples[lo], samples[hi]
        return {name: round((last[1].get(name, 0) - first[1].get(name, 0)) * 1000 / (hi - lo), 1)
                for name in first[1]}

    return {"first_tenth": between(1, 1 + tenth) if total > 1 else {}, "last_tenth": between(total - tenth, total),
            "all": between(1, total) if total > 1 else {}}


def sessions_for(turns: int) -> int:
    """How many sessions of ``turns`` turns measure at least :data:`MIN_STEPS` turns, each one's first left out."""
    return 1 if turns >= MIN_STEPS + 1 or turns < 2 else -(-MIN_STEPS // (turns - 1))


def session_size(tmp: Path, turns: int) -> dict[str, Any]:
    sessions = sessions_for(turns)
    with ScriptedModelServer(session_scenario(turns), keep_requests=sessions * turns + 10) as model:
        system = LocalSystem(tmp / "data", model.base_url, services=SERVICES,
                             extra_env={"AUTARCH_CONTEXT_WINDOW_TOKENS": str(CONTEXT_WINDOW)})
        system.start(timeout=120)
        try:
            pids = processes(system)
            root = _git_repo(tmp / "repo")
            began = time.monotonic()
            times: list[float] = []
            outcomes: list[str] = []
            samples: list[tuple[int, dict[str, float]]] = []
            for k in range(sessions):
                got, ended, sampled, compacted = asyncio.run(
                    run_session(f"nats://127.0.0.1:{system.nats_port}", root, turns, pids))
                times += got
                outcomes += ended
                # One run of samples, a sample at each turn's end: the next session's start is this one's end.
                samples += [(count + k * turns, cpu) for count, cpu in sampled[(1 if k else 0):]]
            wall = time.monotonic() - began
            memory = {name: peak_rss_mb(pid) for name, pid in pids.items()}
            replayed = replayed_model_ms(model, len(times))  # before the direct calls below join the log
            model_ms = model_request_ms(model.base_url)
        finally:
            system.stop()
    steps = ([t - m for t, m in zip(times, replayed, strict=True)] if replayed is not None
             else [t - model_ms for t in times])
    first = steps[0] if len(steps) > 1 else None
    if len(steps) > 1:  # each session's first turn (its kickoff, the first one's paying one-time costs) left out
        steps = [step for n, step in enumerate(steps) if n % turns]
    parts = deciles(steps) if steps else []
    good = sum(1 for o in outcomes if o == "end_turn")
    return {
        "turns": turns, "sessions": sessions, "steps_measured": len(steps),
        "first_step_ms": round(first, 1) if first is not None else None,
        "status": ("complete" if good == len(outcomes) == sessions * turns
                   else f"{sessions * turns - good} turns ended otherwise: {sorted(set(outcomes))}"),
        "commits": good // sessions, "wall_s": round(wall, 1), "model_request_ms": round(model_ms, 3),
        "model_ms_per_turn": "each turn's own request, replayed" if replayed is not None else "the median above",
        "model_ms_replayed_first_last": ([round(statistics.median(replayed[:max(1, len(replayed) // 10)]), 2),
                                          round(statistics.median(replayed[-max(1, len(replayed) // 10):]), 2)]
                                         if replayed else None),
        "step_ms_median": round(statistics.median(steps), 1) if steps else None,
        "step_ms_deciles": [round(d, 1) for d in parts],
        "decile_ratio": round(parts[-1] / parts[0], 2) if parts and parts[0] > 0 else None,
        "compacted_through_turn": compacted,
        "cpu_ms_per_turn": cpu_per_turn(samples, len(times)),
        "peak_rss_mb": memory,
    }


def session_curve(tmp: Path, sizes: list[int]) -> dict[str, Any]:
    """The curve of one agent session of each size in ``sizes`` (turns), compaction on."""
    return curve("agent_session", "one agent session of {n} turns", sizes,
                 lambda n: session_size(tmp / f"session{n}", n), size_key="turns")
