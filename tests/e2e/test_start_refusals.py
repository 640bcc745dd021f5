"""What ``autarch up`` refuses before it starts anything: a data dir another live system holds.

The refusal is said once, names what is in the way (the holding system's pid, gateway and NATS), exits
non-zero, and leaves nothing running; the live system it refused to join goes on working. Every service runs
as its own process, with the scripted model behind the agent runner.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.cli.demo_cmd import create_workflow, demo_scenario, drive, make_sample_repo
from autarch.cli.local.natsserver import free_port
from autarch.cli.local.supervisor import AVAILABLE_SERVICES
from autarch.cli.local_system import LocalSystem, pid_alive, scrubbed_env
from autarch.services.scripted_model import ScriptedModelServer


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer("demo") as server:
        yield server


def up(data: Path, *, port: int, nats_port: int, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``autarch up`` (every service) on ``data`` with these ports; its output with stderr after stdout."""
    env = {**scrubbed_env(), "AUTARCH_DATA_DIR": str(data), "AUTARCH_PORT": str(port),
           "AUTARCH_NATS_PORT": str(nats_port)}
    return subprocess.run([sys.executable, "-m", "autarch.cli.main", "up"], env=env, capture_output=True,
                          text=True, timeout=timeout)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_gone(pids: list[int], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)], "processes of the killed system are still running"


def run_workflow(system: LocalSystem, repo: Path) -> str:
    """The demo's workflow, every card approved, to its end; its id."""
    make_sample_repo(repo, demo_scenario()["files"])
    with system.client() as client:
        workflow_id = create_workflow(client, repo)
        outcome = drive(client, workflow_id, timeout=240, alive=system.alive)
    assert outcome.status == "completed", outcome
    return workflow_id


def test_a_second_system_on_a_live_data_dir_is_refused_naming_the_first_which_keeps_working(
        tmp_path: Path, model: ScriptedModelServer):
    data = tmp_path / "data"
    first = LocalSystem(data, model.base_url).start(timeout=120)  # every service autarch up knows
    try:
        info = first.run_info()
        assert info is not None and set(info["children"]) == {*AVAILABLE_SERVICES, "gateway"}
        token = first.token
        port, nats_port = free_port(), free_port()

        second = up(data, port=port, nats_port=nats_port)

        assert second.returncode == 1, second.stdout + second.stderr
        assert second.stdout == ""  # not even the banner: nothing was started
        assert second.stderr == (
            f"autarch up: the data dir {data} is in use by the Autarch system of pid {first.proc.pid} "
            f"(gateway http://127.0.0.1:{first.port}, NATS nats://127.0.0.1:{first.nats_port}): one system per "
            f"data dir. Stop it first, or start this one with another --data-dir; the other commands (autarch "
            f"status, workflow, watch, …) work against the running one.\n")
        assert not listening(port) and not listening(nats_port)
        # The first system is untouched: the same processes, token and run file, and it does a whole workflow.
        assert first.run_info() == info and first.token == token
        assert all(pid_alive(p) for p in first.pids)
        workflow_id = run_workflow(first, tmp_path / "repo")
        status = subprocess.run([sys.executable, "-m", "autarch.cli.main", "status"], capture_output=True,
                                text=True, timeout=30, env=first.env())
        assert status.returncode == 0, status.stdout + status.stderr

        # A crash frees the data dir too: the kernel drops the lock with the killed supervisor.
        pids = [first.proc.pid, *first.pids]
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        wait_gone(pids)
    finally:
        first.stop()
    again = LocalSystem(data, model.base_url).start(timeout=120)
    try:
        with again.client() as client:
            assert client.get(f"/api/workflows/{workflow_id}")["status"] == "done"
    finally:
        assert again.stop() == 0
