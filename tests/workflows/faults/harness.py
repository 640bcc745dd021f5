"""Shared pieces of the fault tests: the approving client, runs timed from creation to done, SIGKILL of a named
service (the embedded nats-server included), a CPU hog, and the checks that a faulted run matches the control."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.system import System
from tests.workflows.conftest import Client, assert_replay_equals_live, git

__all__ = ["BRANCH", "FIGURES", "NATS", "Approver", "CpuHog", "Reference", "assert_same_result", "kill", "log_excerpt",
           "reference", "run_to_done"]

BRANCH = "autarch/demo"
NATS = "nats-server"
"""The victim name of the embedded nats-server (its pid is ``nats_pid`` in ``run.json``, not a child's)."""
FIGURES: list[str] = []
"""One line per timed run, printed in the terminal summary (conftest) so that a CI log shows them."""


class Approver(threading.Thread):
    """Approves each card once, as a person watching would (approve is not retried: it is not idempotent), and
    keeps the latest view of every workflow, and the moment each was first seen done, for the tests to read."""

    def __init__(self, client: Client, ids: list[str]) -> None:
        super().__init__(daemon=True)
        self.client, self.ids = client, ids
        self.views: dict[str, dict] = {}
        self.done_at: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        approved: set[tuple[str, str, int]] = set()
        while not self.stop.is_set():
            for wid in self.ids:
                try:
                    view = self.client.get(wid)
                except Exception:
                    continue  # the gateway answers 503 while the orchestrator restarts (or is down itself)
                self.views[wid] = view
                if _done(view):
                    self.done_at.setdefault(wid, time.monotonic())
                key = (wid, view["stage"], len(view.get("artifact_stages", [])))
                if view["awaiting_approval"] and key not in approved:
                    try:
                        if self.client.post(wid, "approve").status_code == 200:
                            approved.add(key)
                    except Exception:
                        pass
            time.sleep(0.05)

    def finished(self) -> bool:
        return all(wid in self.done_at for wid in self.ids)


def _done(view: dict) -> bool:
    return view["status"] == "done" and view["worktree_path"] is None


def run_to_done(client: Client, ids: list[str], *, timeout: float, started: float,
                killer: Callable[[Approver], None] | None = None) -> dict[str, float]:
    """Approve every card of ``ids`` until each is done (worktree removed); the seconds each took from
    ``started`` (a monotonic time taken before its creation). ``killer`` runs in a thread beside the approver
    meanwhile and must return soon after the approver's ``stop`` is set. A run that halts, or is not done by
    ``timeout``, fails the test with the views of the runs concerned."""
    approver = Approver(client, ids)
    approver.start()
    thread = threading.Thread(target=killer, args=(approver,), daemon=True) if killer else None
    if thread is not None:
        thread.start()
    try:
        deadline = time.monotonic() + timeout
        halted: dict[str, dict] = {}
        while not approver.finished() and not halted and time.monotonic() < deadline:
            time.sleep(0.1)
            halted = {wid: v for wid, v in list(approver.views.items()) if v["status"] == "halted"}
        if halted:  # nobody resumes it here: it would only wait out the timeout
            raise AssertionError(f"halted after {time.monotonic() - started:.0f}s: {json.dumps(halted, indent=1)}")
        if not approver.finished():
            late = {wid: approver.views.get(wid) for wid in ids if wid not in approver.done_at}
            raise AssertionError(f"not done within {timeout:.0f}s: {json.dumps(late, indent=1)}")
        return {wid: approver.done_at[wid] - started for wid in ids}
    finally:
        approver.stop.set()
        approver.join()
        if thread is not None:
            thread.join()


def kill(system: System, victim: str) -> int | None:
    """SIGKILL the service ``victim`` (a child's name, or :data:`NATS`); its pid, or None if it was not running."""
    info = system.run_info()
    pid = info["nats_pid"] if victim == NATS else info["children"].get(victim)
    if not pid:
        return None
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return int(pid)


class Reference:
    """What an undisturbed run produced: its branch's commit subjects and tree, and how long it took."""

    def __init__(self, log: list[str], tree: str, seconds: float) -> None:
        self.log, self.tree, self.seconds = log, tree, seconds


def reference(repo: Path, seconds: float) -> Reference:
    return Reference(git(repo, "log", "--format=%s", f"main..{BRANCH}").splitlines(),
                     git(repo, "rev-parse", f"{BRANCH}^{{tree}}").strip(), seconds)


def assert_same_result(client: Client, repo: Path, wid: str, ref: Reference) -> None:
    """The run ended as the reference did: the same commits (subjects, tree) on a clean checkout with its
    worktree gone; both pulses succeeded at their first attempt; nothing doubled in the event stream; and the
    log replays to the live state."""
    assert git(repo, "log", "--format=%s", f"main..{BRANCH}").splitlines() == ref.log
    assert git(repo, "rev-parse", f"{BRANCH}^{{tree}}").strip() == ref.tree
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "worktree", "list").count("\n") == 1  # the workflow's worktree is gone
    runs = client.artifacts(wid)["pulse_runs"]
    assert [(r["id"], r["status"]) for r in runs] == [("pulse-1", "succeeded"), ("pulse-2", "succeeded")]
    events = client.events(wid)
    # Nothing doubled: no event twice in the stream (a relay that re-published after a crash would repeat one
    # to the letter, occurred_at included), each pulse completed once, one end.
    assert len({json.dumps(e, sort_keys=True) for e in events}) == len(events)
    names = Counter(e["type"] for e in events)
    assert names["pulse:completed"] == 2 and names["workflow:completed"] == 1
    assert names["preflight:completed"] == 1 and names["workflow:created"] == 1
    completed_turns = [e["turn_id"] for e in events if e["type"] == "turn:completed"]
    assert len(completed_turns) == len(set(completed_turns))
    assert_replay_equals_live(client, wid)


def log_excerpt(system: System, offset: int, *, needles: tuple[str, ...] = (), limit: int = 60) -> str:
    """The System log's lines from byte ``offset`` on that warn, fail or mention one of ``needles``: what the
    services said about a run, for a failure's message."""
    if system.log is None:
        return ""
    with open(system.log, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    marks = (" WARNING ", " ERROR ", "Traceback", "exited with", "restart", *needles)
    lines = [line for line in text.splitlines() if any(m in line for m in marks)]
    return "\n".join(lines[-limit:])


class CpuHog:
    """Busy loops at normal priority, one per core, for as long as the block runs: a loaded machine."""

    def __init__(self, processes: int | None = None) -> None:
        self.count = processes or len(os.sched_getaffinity(0))
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> CpuHog:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        return self

    def __exit__(self, *exc_info: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
