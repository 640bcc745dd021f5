"""A full disk while research runs, end to end: every service on a data dir on a 64 MiB tmpfs, filled to the last
page while the research agent waits for the model, then emptied. Health turns degraded, the workflow halts
``disk_full`` naming the path, and once the filler is gone the workflow goes on by itself with nothing recorded
twice."""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from autarch.cli.local.natsserver import free_port
from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System

from .conftest import SERVICES, Client, approve_stages, demo_scenario, start

LATE_STEP = 2
"""The research step whose model reply comes late: the disk is filled while the turn waits for it."""


def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (run as root, or in a user and mount namespace)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs, unmounted after the test (the system's log is written beside it, not on it)."""
    data = tmp_path / "data"
    _mount_tmpfs(data, "64m")
    yield data
    subprocess.run(["umount", "-l", str(data)], check=False)


@pytest.fixture
def disk_system(small_disk: Path, model: ScriptedModelServer) -> Iterator[System]:
    env = {"AUTARCH_ANTHROPIC_BASE_URL": model.base_url, "AUTARCH_ANTHROPIC_API_KEY": "scripted",
           "AUTARCH_REQUEST_TIMEOUT": "30"}
    system = System(data_dir=small_disk, port=free_port(), nats_port=free_port(), services=SERVICES, extra_env=env)
    system.start(timeout=60)
    yield system
    if system.proc is not None:
        system.stop()


def fill(disk: Path) -> Path:
    """Write a file until the file system has not one page left."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:  # unbuffered: nothing left to write at close
        for size in (1 << 20, 4096):  # megabytes, then the last pages one at a time
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * size)
    return filler


def poll(what: str, check: Callable[[], Any], timeout: float, log: Path | None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    tail = log.read_text()[-8000:] if log is not None else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


def test_a_full_disk_halts_research_and_it_goes_on_once_space_is_back(
        disk_system: System, model: ScriptedModelServer, tmp_path: Path) -> None:
    scenario = demo_scenario()
    research = copy.deepcopy(scenario["scripts"]["research"])
    research[LATE_STEP]["latency_ms"] = 6000
    scenario["scripts"]["research"] = research
    client = Client(disk_system)
    wid, _ = start(client, model, tmp_path, scenario)
    approve_stages(client, wid, "scoping")

    def research_session() -> dict[str, Any] | None:
        session_id = client.get(wid)["sessions"].get("research")
        if session_id is None:
            return None
        view = client.http.get(f"/api/sessions/{session_id}").json()
        turn = view["turns"][0] if view.get("turns") else None
        waiting = (turn is not None and turn["model_calls"] == LATE_STEP
                   and all(c.get("output") is not None for c in turn["tool_calls"]))
        return view if waiting else None

    # The research agent waits for its late reply: fill the disk now.
    session = poll("research waiting for its late reply", research_session, 60, disk_system.log)
    filler = fill(disk_system.data_dir)
    assert os.statvfs(disk_system.data_dir).f_bavail == 0

    # The reply comes, its record does not fit: health degraded, the workflow halted naming the path.
    runner_store = str(disk_system.data_dir / "agent_runner" / "events.sqlite")

    def degraded() -> dict[str, Any] | None:
        reply = httpx.get(f"{disk_system.url}/healthz", timeout=5)
        body = reply.json()
        problems = body["services"]["agent_runner"].get("problems", [])
        return body if reply.status_code == 503 and body["status"] == "degraded" and problems else None

    health = poll("health degraded", degraded, 60, disk_system.log)
    [problem] = health["services"]["agent_runner"]["problems"]
    assert problem["kind"] == "disk_full" and problem["path"] == runner_store
    assert "no space left on device" in problem["message"]
    view = client.wait(wid, lambda v: v["status"] == "halted", "the disk_full halt", timeout=60)
    assert view["stage"] == "research" and view["halt"]["reason"] == "disk_full", view
    assert view["halt"]["details"]["path"] == runner_store and runner_store in view["halt"]["message"]
    assert view["halt"]["details"]["step"] == "research"
    status = disk_system.cli("status")
    assert "DEGRADED" in status.stdout and runner_store in status.stdout, status.stdout

    # Space comes back 20 s later: the workflow goes on by itself, to research's card.
    time.sleep(20)
    filler.unlink()
    client.wait_awaiting(wid, "research", timeout=120)
    poll("health ok again", lambda: httpx.get(f"{disk_system.url}/healthz", timeout=5).status_code == 200, 60,
         disk_system.log)

    # Nothing recorded twice: one research turn with each scripted reply once, each event of the workflow once.
    session = client.http.get(f"/api/sessions/{session['session_id']}").json()
    [turn] = session["turns"]
    assert turn["model_calls"] == len(research) - 1 and turn["outcome"]["tool"] == "submit_research"
    assert [c["name"] for c in turn["tool_calls"]] == ["list_directory", "read_file", "read_file", "grep",
                                                       "submit_research"]
    events = client.events(wid, until=lambda found: sum(e["type"] == "workflow:approval_needed" for e in found) == 2,
                           timeout=60)
    names = Counter(e["type"] for e in events)
    assert names["workflow:approval_needed"] == 2 and names["workflow:created"] == 1
    assert names["workflow:halted"] == names["workflow:resumed"] >= 1
    completed = [e for e in events if e["type"] == "turn:completed"]
    assert len(completed) == len({e["turn_id"] for e in completed})
    halted = next(e for e in events if e["type"] == "workflow:halted")
    assert halted["reason"] == "disk_full" and halted["details"]["path"] == runner_store

    # And it goes on to the end.
    client.approve(wid)
    client.wait_awaiting(wid, "planning", timeout=90)
