"""Supervision of everything ``autarch up`` starts, tried as an operator would: ``kill -9``.

A killed nats-server comes back on its port with its JetStream data; a killed ``autarch up`` leaves nothing
running even with SSE clients connected; ``autarch watch`` rides out a restarting gateway and gives up,
clearly and on time, on a system that is gone. All on real processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from autarch.cli.gateway_client import CliError, Connection, GatewayClient
from autarch.cli.watch_cmd import follow
from tests.orchestrator.test_approvals_http import submit_scope
from tests.system import System, pid_alive, work_tree

pytestmark = pytest.mark.slow

RECONNECT_FOR = 6
"""Seconds ``autarch watch`` keeps reconnecting here: more than a restarting gateway takes on a busy machine."""


def _body(repo: Path, title: str) -> dict[str, str]:
    return {"title": title, "request": "add JWT validation to the API", "repo": str(work_tree(repo))}


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)


def children_of(parent: int) -> dict[int, str]:
    """Live (not zombie) processes whose parent is ``parent``: pid → command name."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
        if int(ppid) == parent:
            found[int(entry.name)] = f"{name} (zombie)" if state == "Z" else name
    return found


class SseReader:
    """An SSE client on ``/api/events`` in a thread: its lines, and how its connection ended."""

    def __init__(self, system: System, query: str = "") -> None:
        self.lines: list[str] = []
        self.ended: str | None = None
        self._thread = threading.Thread(target=self._read, args=(system, query), daemon=True)
        self._thread.start()
        wait_for(lambda: ": connected" in self.lines, 10, "the SSE stream to connect")

    def _read(self, system: System, query: str) -> None:
        try:
            with httpx.stream("GET", f"{system.url}/api/events{query}", headers=system.headers,
                              timeout=httpx.Timeout(5, read=None)) as response:
                for line in response.iter_lines():
                    self.lines.append(line)
            self.ended = "closed"
        except httpx.HTTPError as exc:
            self.ended = type(exc).__name__

    def created(self) -> list[str]:
        """The workflow ids of the ``workflow:created`` events seen so far."""
        return [json.loads(line[6:])["workflow_id"] for line in self.lines
                if line.startswith("data: ") and '"workflow:created"' in line]

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


def healthy(system: System) -> bool:
    try:
        return httpx.get(f"{system.url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:  # not listening yet
        return False


def create(system: System, repo: Path, title: str, timeout: float = 15) -> str:
    """Create a workflow, riding out the 503s of a system still reconnecting to NATS."""
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.post(f"{system.url}/api/workflows", json=_body(repo, title), headers=system.headers, timeout=10)
        if r.status_code == 201 or time.monotonic() > deadline:
            assert r.status_code == 201, r.text
            return str(r.json()["id"])
        time.sleep(0.1)


def test_a_killed_nats_server_comes_back_on_its_port_with_its_jetstream_data(system: System, tmp_path: Path):
    before = create(system, tmp_path, "before")
    live = SseReader(system, "?since=0")  # connected across the outage
    new_only = SseReader(system)  # likewise, but it has seen nothing yet when NATS dies
    wait_for(lambda: live.created() == [before], 10, "the first event on the stream")
    info = system.run_info()
    old = info["nats_pid"]
    assert children_of(info["pid"])[old] == "nats-server"

    os.kill(old, signal.SIGKILL)
    wait_for(lambda: system.run_info()["nats_pid"] != old, 10, "a new nats-server in run.json")
    new = system.run_info()["nats_pid"]
    # Reaped (no zombie left under the supervisor), replaced by exactly one server, on the same port.
    wait_for(lambda: old not in children_of(info["pid"]), 5, "the dead nats-server to be reaped")
    assert [name for name in children_of(info["pid"]).values() if "nats" in name] == ["nats-server"]
    assert pid_alive(new) and system.run_info()["nats_url"] == info["nats_url"]
    with socket.create_connection(("127.0.0.1", system.nats_port), timeout=2):
        pass

    # The services reconnected by themselves: the workflow made before is there, new ones can be made...
    after = create(system, tmp_path, "after")
    listed = httpx.get(f"{system.url}/api/workflows", headers=system.headers).json()
    assert [w["id"] for w in listed["items"]] == [before, after]
    # ...and AUTARCH_EVENTS kept its events: a new client reads both from the start, in order,
    # and the client that stayed connected through the outage got the new one too.
    fresh = SseReader(system, "?since=0")
    wait_for(lambda: fresh.created() == [before, after], 10, "both events on a new stream")
    assert [line for line in fresh.lines if line.startswith("id: ")] == ["id: 1", "id: 2"]
    wait_for(lambda: live.created() == [before, after], 10, "the new event on the stream opened before the kill")
    # Resumed where it stood, not from the stream's first event.
    wait_for(lambda: new_only.created(), 10, "the new event on the new-events-only stream")
    assert new_only.created() == [after]
    log = system.log.read_text()
    assert "nats-server exited with -9" in log and f"restarting in 0.25s on port {system.nats_port}" in log


def test_a_killed_autarch_up_leaves_nothing_running_even_with_sse_clients(system: System):
    info = system.run_info()
    pids = system.all_pids()
    assert len(pids) == 3 and set(info["children"].values()) | {info["nats_pid"]} == set(pids)
    readers = [SseReader(system), SseReader(system, "?deltas=false")]
    assert system.proc is not None
    system.proc.kill()  # SIGKILL: no cleanup by the supervisor; the kernel's parent-death signal does it
    system.proc.wait()
    system.proc = None
    wait_for(lambda: not any(pid_alive(p) for p in pids), 5,
             f"every child of autarch up to die; alive: {[p for p in pids if pid_alive(p)]}")
    # The clients saw their connections end (the kernel closed the dead gateway's sockets).
    for reader in readers:
        assert reader.join(5) and reader.ended is not None


def test_sigterm_ends_open_sse_streams_so_autarch_up_stops_at_once(system: System):
    reader = SseReader(system)
    pids = system.all_pids()
    started = time.monotonic()
    assert system.stop(timeout=10) == 0
    # Not the 10 s grace the gateway used to take, waiting on the client, before its SIGKILL.
    assert time.monotonic() - started < 5
    assert reader.join(5) and reader.ended == "closed" and ": gateway stopping" in reader.lines
    assert [p for p in pids if pid_alive(p)] == []


@pytest.fixture
def watcher(system: System, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A workflow and ``autarch watch`` following it, giving up after ``RECONNECT_FOR`` s without a gateway."""
    wf = create(system, tmp_path, "watched")
    proc = subprocess.Popen(
        [sys.executable, "-m", "autarch.cli.main", "watch", wf, "--from-start", "--reconnect-for", str(RECONNECT_FOR)],
        env=system.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    yield wf, proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def test_watch_reconnects_to_a_restarted_gateway_and_gives_up_on_a_dead_system(
    system: System, watcher: tuple[str, subprocess.Popen[str]]
):
    wf, proc = watcher
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    wait_for(lambda: any("created “watched”" in line for line in out), 15, "watch to show the workflow")

    gateway = system.run_info()["children"]["gateway"]
    os.kill(gateway, signal.SIGKILL)
    wait_for(lambda: system.run_info()["children"]["gateway"] != gateway, 10, "the gateway to be restarted")
    wait_for(lambda: healthy(system), 15, "a healthy gateway")
    # An event recorded after the restart reaches the watch: it reconnected after its last event.
    asyncio.run(submit_scope(system, wf))
    wait_for(lambda: any("APPROVAL NEEDED — scope" in line for line in out), 15, "the scope card on the watch")
    assert proc.poll() is None
    assert sum("created “watched”" in line for line in out) == 1  # resumed, not replayed

    assert system.proc is not None
    system.proc.kill()
    system.proc.wait()
    system.proc = None
    killed = time.monotonic()
    try:
        code = proc.wait(RECONNECT_FOR + 5)
    except subprocess.TimeoutExpired:
        raise AssertionError("watch did not give up on a dead system") from None
    took = time.monotonic() - killed
    reader.join(2)
    err = proc.stderr.read()
    assert code == 1, err
    assert RECONNECT_FOR - 0.5 < took < RECONNECT_FOR + 5
    assert f"reconnecting (for up to {RECONNECT_FOR}s)" in err
    assert err.rstrip().splitlines()[-1].startswith(f"autarch: cannot reach the gateway at {system.url}")
    assert err.rstrip().endswith(f"is `autarch up` running?; gave up after {RECONNECT_FOR}s of reconnecting")


def test_a_silent_connection_is_noticed_by_its_read_timeout(tmp_path: Path):
    """A gateway whose host vanished sends nothing more, not even a FIN: the keep-alive's absence is the sign."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    held: list[socket.socket] = []

    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"d\r\n: connected\n\n\r\n")  # one chunk of 0xd bytes
        held.append(conn)  # then silence, the socket left open
        server.close()  # and nothing answers any more

    threading.Thread(target=serve, daemon=True).start()
    client = GatewayClient(Connection(f"http://127.0.0.1:{port}", "tok", sse_keepalive=0.2))
    assert client.sse_read_timeout == pytest.approx(2.3)
    started = time.monotonic()
    with pytest.raises(CliError) as err:
        follow(client, "00000000-0000-4000-8000-000000000000", from_start=True, out=lambda _: None,
               reconnect_for=1)
    assert 2.3 + 1 <= time.monotonic() - started < 2.3 + 1 + 3
    assert err.value.message.endswith("gave up after 1s of reconnecting")
    for conn in held:
        conn.close()
