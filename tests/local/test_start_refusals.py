"""What ``autarch up`` refuses before it starts anything: a data dir another live system holds, a taken port.

Each refusal is said once, names what is in the way (the holding system's pid, gateway and NATS; the port),
exits non-zero, and leaves nothing running; the live system it refused to join goes on working. Every service
runs as its own process, with the scripted model behind the agent runner.
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
from autarch.cli.local.natsserver import EmbeddedNats, free_port
from autarch.cli.local.supervisor import AVAILABLE_SERVICES
from autarch.cli.local_system import LocalSystem, pid_alive, scrubbed_env
from autarch.services.scripted_model import ScriptedModelServer

GATEWAY_SETTING = "--port or AUTARCH_PORT"
NATS_SETTING = "AUTARCH_NATS_PORT (nats_port in config.toml)"


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


def test_a_taken_gateway_port_fails_fast_with_one_message(tmp_path: Path):
    with socket.create_server(("127.0.0.1", 0)) as taken:  # another program's server on the port
        port = taken.getsockname()[1]
        nats_port = free_port()
        done = up(tmp_path / "data", port=port, nats_port=nats_port)
    assert done.returncode == 1
    assert (done.stdout, done.stderr) == ("", (
        f"autarch up: port {port} on 127.0.0.1 (the gateway's) is already in use by another program; stop it, "
        f"or choose another port with {GATEWAY_SETTING}.\n"))
    assert not listening(nats_port)
    assert not (tmp_path / "data" / "run.json").exists()


def test_a_taken_nats_port_fails_fast_with_one_message(tmp_path: Path):
    # Another system's nats-server: it would greet our services as if it were ours.
    other = EmbeddedNats(tmp_path / "other-nats").start()
    try:
        port = free_port()
        done = up(tmp_path / "data", port=port, nats_port=other.port)
        assert other.process is not None and other.process.poll() is None
    finally:
        other.stop()
    assert done.returncode == 1
    assert (done.stdout, done.stderr) == ("", (
        f"autarch up: port {other.port} on 127.0.0.1 (the embedded NATS server's) is already in use by another "
        f"program; stop it, or choose another port with {NATS_SETTING}.\n"))
    assert not listening(port)
    assert not (tmp_path / "data" / "run.json").exists()


def test_a_gateway_whose_port_is_taken_says_so_once_and_exits_78(tmp_path: Path):
    # What ``autarch up`` relies on when the port is taken after its own check (a restart, a race).
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        env = {**scrubbed_env(), "AUTARCH_DATA_DIR": str(tmp_path / "data"), "AUTARCH_PORT": str(port),
               "AUTARCH_NATS_URL": f"nats://127.0.0.1:{free_port()}"}
        done = subprocess.run([sys.executable, "-m", "autarch.gateway"], env=env, capture_output=True, text=True,
                              timeout=60)
    assert (done.returncode, done.stdout) == (78, "")
    assert done.stderr == (f"gateway: cannot start: port {port} on 127.0.0.1 is already in use by another "
                           f"program; stop it, or choose another port with {GATEWAY_SETTING}.\n")
