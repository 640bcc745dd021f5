"""``autarch up``: the embedded NATS server, every service as its own OS process, and the gateway.

A child that exits unexpectedly is restarted with exponential backoff (reset once it has stayed
up for a while); the embedded nats-server too, on the same port and with the same JetStream
store, so the services (which reconnect by themselves) find their stream and its events again.
Every exited child is reaped. Every line a child prints is prefixed with its name. SIGINT/SIGTERM
stop the children (SIGTERM, then SIGKILL after a grace period). Should the supervisor itself die
without that cleanup (SIGKILL, a crash), the kernel SIGKILLs every child (PR_SET_PDEATHSIG), so
no process is orphaned. SIGKILL, not SIGTERM: with nobody left to escalate, a graceful stop that
waits on something (a client's open SSE stream held the gateway) would never end; and a SIGKILL
loses nothing (event stores are transactional, relays publish again, JetStream recovers its store).

Before it starts anything it claims the data dir (``system.lock``: one system per data dir, see
:mod:`.system_lock`) and checks that the gateway's and NATS ports are free (:mod:`.ports`); either refusal is
:class:`CannotStart`, and nothing is left running. A child that exits with ``CANNOT_START`` (a dependency not
installed, its port taken: it said why) is not restarted, since it would fail the same way again: the system
stops and :meth:`Supervisor.run` returns 1.

``cluster`` > 0 runs the local scale-out shape instead (``autarch up --cluster N``): N nats-servers forming one
JetStream cluster on loopback (client ports ``nats_port`` … ``nats_port + N - 1``, the event stream with
min(N, 3) replicas, every write fsynced), event stores in PostgreSQL (``postgres_url``; a ``?schema=`` that does
not exist yet is created), and ``instances`` processes of every service and of the gateway (gateway ``i`` on
``port + i - 1``). Each service process is named ``<service>-<i>`` (its ``instance`` setting): stateless
services share their queue groups, stateful ones run as hot standbys (``runtime/standby.py``).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from autarch.runtime.cancel import cancel_and_wait
from autarch.runtime.retry import SUPERVISOR_RESTART, Backoff
from autarch.runtime.settings import Settings
from autarch.runtime.startup import CANNOT_START

from .nats_space import restart_after_full_disk
from .natsserver import EmbeddedNats, die_with_parent, local_cluster
from .ports import ensure_free
from .system_lock import SystemLock

__all__ = ["AVAILABLE_SERVICES", "CannotStart", "Child", "Supervisor"]

log = logging.getLogger("supervisor")

SERVICE_ORDER = ("orchestrator", "tools", "git", "indexer", "agent_runner", "notifier")


def _available() -> tuple[str, ...]:
    found = []
    for name in SERVICE_ORDER:
        try:
            if importlib.util.find_spec(f"autarch.services.{name}.__main__") is not None:
                found.append(name)
        except ModuleNotFoundError:
            continue
    return tuple(found)


AVAILABLE_SERVICES = _available()
"""Services installed in this environment, in start order."""


class CannotStart(RuntimeError):
    """The system cannot start here as asked (the data dir in use, a port taken, NATS not starting); the
    message says why."""


@dataclass
class Child:
    """One supervised process."""

    name: str
    argv: list[str]
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started_at: float = 0.0
    stopping: bool = False
    _pump: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    async def spawn(self, out: asyncio.StreamWriter | None = None) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # Its own session: a terminal's Ctrl-C (sent to the whole foreground group) reaches only the
            # supervisor, which then stops the children in order (gateway, services, NATS last).
            start_new_session=True,
            # Read the parent's pid here, before the fork, so a supervisor dying during the fork is noticed.
            preexec_fn=functools.partial(die_with_parent, signal.SIGKILL, os.getpid()),
        )
        self.started_at = time.monotonic()
        self._pump = asyncio.create_task(self._prefix_lines())

    async def _prefix_lines(self) -> None:
        assert self.process and self.process.stdout
        width = 13
        while line := await self.process.stdout.readline():
            sys.stdout.write(f"{self.name:<{width}}| {line.decode(errors='replace')}")
            sys.stdout.flush()

    async def terminate(self, grace: float) -> None:
        self.stopping = True
        proc = self.process
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        if self._pump:
            await asyncio.gather(self._pump, return_exceptions=True)


@dataclass
class Supervisor:
    """Runs the whole system on one machine."""

    settings: Settings
    services: tuple[str, ...] = AVAILABLE_SERVICES
    """Services to run (each ``python -m autarch.services.<name>``)."""
    gateway: bool = True
    grace: float = 10.0
    """Seconds a child gets to stop after SIGTERM before SIGKILL."""
    backoff: Backoff = SUPERVISOR_RESTART
    """Waits before restarting a child (or nats-server) that exited, growing while it keeps exiting."""
    stable_after: float = 30.0
    """Seconds up after which a child's next exit is a new failure: its backoff starts again from the first."""
    cluster: int = 0
    """nats-servers of a local JetStream cluster to run (0: one embedded server, or ``nats_url``'s)."""
    instances: int = 1
    """Processes of every service and of the gateway (more than 1 names them ``<service>-<i>``)."""
    children: dict[str, Child] = field(default_factory=dict)
    nats: EmbeddedNats | None = None
    nodes: list[EmbeddedNats] = field(default_factory=list)
    """The local cluster's servers (``cluster`` > 0)."""
    cannot_start: str | None = None
    """The child that exited with ``CANNOT_START`` and so stopped the system, if one did."""
    _lock: SystemLock | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def run_file(self) -> Path:
        """``<data dir>/run.json``: the supervisor's and children's pids (read by ``autarch status``)."""
        return self.settings.data_path / "run.json"

    @property
    def nats_url(self) -> str:
        if self.nodes:
            return ",".join(node.url for node in self.nodes)
        return self.settings.effective_nats_url

    def _gateway_ports(self) -> list[int]:
        return [self.settings.port + i for i in range(self.instances)] if self.gateway else []

    def _nats_ports(self) -> list[int]:
        if self.cluster > 0:
            return [self.settings.nats_port + i for i in range(self.cluster)]
        return [] if self.settings.nats_url is not None else [self.settings.nats_port]

    def claim(self) -> None:
        """Take the data dir's lock and check the ports, before anything starts (``run`` does it when not done).

        :class:`CannotStart` when another system holds the data dir (naming its pid, gateway and NATS) or a port
        is taken (naming it); the lock is then not kept.
        """
        if self._lock is not None:
            return
        host = self.settings.host
        gateways = [f"http://{host}:{port}" for port in self._gateway_ports()]
        nats = ",".join(f"nats://127.0.0.1:{port}" for port in self._nats_ports()) or self.settings.effective_nats_url
        lock = SystemLock(self.settings.data_path)
        try:
            lock.acquire({"gateway": ",".join(gateways), "nats": nats, "data_dir": str(self.settings.data_path)})
        except RuntimeError as exc:
            raise CannotStart(str(exc)) from None
        try:
            for port in self._gateway_ports():
                ensure_free(host, port, what="the gateway's", setting="--port or AUTARCH_PORT")
            for port in self._nats_ports():
                what = "a NATS node's client port" if self.cluster else "the embedded NATS server's"
                ensure_free("127.0.0.1", port, what=what, setting="AUTARCH_NATS_PORT (nats_port in config.toml)")
        except (RuntimeError, OSError) as exc:
            lock.release()
            raise CannotStart(str(exc)) from None
        self._lock = lock

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.settings.to_env())
        env["AUTARCH_NATS_URL"] = self.nats_url
        if self.nodes:
            env["AUTARCH_STREAM_REPLICAS"] = str(min(3, len(self.nodes)))
        env["AUTARCH_EXPECTED_SERVICES"] = ",".join(self.services)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _write_run_file(self) -> None:
        info = {
            "pid": os.getpid(),
            "nats_url": self.nats_url,
            "nats_pid": self.nats.process.pid if self.nats and self.nats.process else None,
            "nats_pids": [node.process.pid if node.process else None for node in self.nodes],
            "gateway_url": f"http://{self.settings.host}:{self.settings.port}",
            "children": {name: child.pid for name, child in self.children.items()},
        }
        tmp = self.run_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(info, indent=2))
        tmp.replace(self.run_file)

    async def run(self) -> int:
        """Run the system until SIGINT/SIGTERM (0) or a child that cannot start (1); :class:`CannotStart` when
        it cannot start at all (nothing is left running then)."""
        self.claim()
        try:
            return await self._run()
        finally:
            assert self._lock is not None
            self._lock.release()  # last: everything this system started has stopped
            self._lock = None

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        if self.cluster > 0:
            await self._start_cluster()
        elif self.settings.nats_url is None:
            self.nats = EmbeddedNats(self.settings.data_path / "nats", port=self.settings.nats_port,
                                     parent_death_signal=signal.SIGKILL)
            # In this (main) thread: the server's parent-death signal is tied to the thread that forks it.
            try:
                self.nats.start()
            except (RuntimeError, OSError) as exc:
                raise CannotStart(f"the embedded nats-server did not start: {exc}") from None
            log.info("embedded nats-server on %s (JetStream in %s)", self.nats.url, self.nats.data_dir)
        env = self._child_env()
        py = sys.executable
        many = self.instances > 1
        for name in self.services:
            for i in range(1, self.instances + 1):
                label = f"{name}-{i}" if many else name
                child_env = {**env, "AUTARCH_INSTANCE": label} if many else env
                self.children[label] = Child(label, [py, "-m", f"autarch.services.{name}"], child_env)
        if self.gateway:
            for i in range(1, self.instances + 1):
                label = f"gateway-{i}" if many else "gateway"
                child_env = {**env, "AUTARCH_PORT": str(self.settings.port + i - 1)} if many else env
                self.children[label] = Child(label, [py, "-m", "autarch.gateway"], child_env)
        try:
            for child in self.children.values():
                await child.spawn()
            self._write_run_file()
            watchers = [asyncio.create_task(self._watch(child)) for child in self.children.values()]
            if self.nats is not None:
                watchers.append(asyncio.create_task(self._watch_nats(self.nats)))
            watchers += [asyncio.create_task(self._watch_nats(node)) for node in self.nodes]
            # A stream that failed a write for lack of space is writable again only after its server restarts.
            for server in ([self.nats] if self.nats is not None else []) + list(self.nodes):
                watchers.append(asyncio.create_task(restart_after_full_disk(
                    server.data_dir / "jetstream", server.data_dir / "nats-server.log",
                    restart=self._nats_restarter(server))))
            await self._stop.wait()
            log.info("stopping")
            await cancel_and_wait(watchers)
        finally:
            # Gateway first (no new requests), then services in reverse start order, then NATS.
            for child in reversed(list(self.children.values())):
                await child.terminate(self.grace)
            if self.nats is not None:
                self.nats.stop()
            for node in self.nodes:
                node.stop()
            self.run_file.unlink(missing_ok=True)
        return 0 if self.cannot_start is None else 1

    async def _start_cluster(self) -> None:
        """Start the cluster's nodes, create the PostgreSQL schema, and wait until the replicated stream exists."""
        from .cluster import ensure_postgres_schema, wait_for_stream

        if not self.settings.postgres_url:
            raise ValueError("a local cluster keeps its event stores in PostgreSQL: set postgres_url")
        ports = [self.settings.nats_port + i for i in range(self.cluster)]
        self.nodes = local_cluster(self.settings.data_path / "nats-cluster", nodes=self.cluster, ports=ports,
                                   parent_death_signal=signal.SIGKILL)
        try:
            for node in self.nodes:
                node.start()  # in this (main) thread, as for the single server
            log.info("local NATS cluster on %s (JetStream in %s)", self.nats_url, self.nodes[0].data_dir.parent)
            try:
                await asyncio.to_thread(ensure_postgres_schema, self.settings.postgres_url)
            except Exception as exc:
                raise RuntimeError(f"PostgreSQL at postgres_url is not usable: {exc}") from exc
            await wait_for_stream(self.nats_url, replicas=min(3, self.cluster),
                                  duplicate_window=self.settings.duplicate_window)
        except BaseException:
            for node in self.nodes:  # nothing left running when the cluster cannot start
                node.stop()
            raise

    async def _watch(self, child: Child) -> None:
        delays = self.backoff.delays()
        while True:
            assert child.process is not None
            code = await child.process.wait()
            if child.stopping or self._stop.is_set():
                return
            up_for = time.monotonic() - child.started_at
            if code == CANNOT_START:
                log.error("%s cannot start (it said why above); stopping the system instead of restarting it, "
                          "which would fail the same way", child.name)
                self.cannot_start = child.name
                self._stop.set()
                return
            if up_for > self.stable_after:
                delays = self.backoff.delays()  # it ran fine for a while: this is a new failure, not a crash loop
            backoff = next(delays)
            log.warning("%s exited with %s after %.1fs; restarting in %.2fs", child.name, code, up_for, backoff)
            await asyncio.sleep(backoff)
            child.restarts += 1
            await child.spawn()
            self._write_run_file()

    @staticmethod
    def _nats_restarter(nats: EmbeddedNats) -> Callable[[], Awaitable[None]]:
        async def restart() -> None:
            # Stopped here, started again by _watch_nats as after any exit (same port, same store).
            if nats.process is not None and nats.process.poll() is None:
                nats.process.terminate()
        return restart

    async def _watch_nats(self, nats: EmbeddedNats) -> None:
        """Restart the embedded nats-server when it dies: same port and store, so no client is reconfigured."""
        delays = self.backoff.delays()
        while True:
            code = await nats.wait()  # reaps it: a dead server is never left a zombie
            if self._stop.is_set():
                return
            up_for = time.monotonic() - nats.started_at
            if up_for > self.stable_after:
                delays = self.backoff.delays()
            backoff = next(delays)
            log.warning("nats-server exited with %s after %.1fs; restarting in %.2fs on port %d (JetStream kept)",
                        code, up_for, backoff, nats.port)
            await asyncio.sleep(backoff)
            try:
                await nats.start_async()
            except (RuntimeError, OSError) as exc:
                # Its port not free yet, say. The failed server has exited (or was killed), so the wait
                # above returns at once and the next try comes after a longer backoff.
                log.error("nats-server did not come back: %s", exc)
                continue
            log.info("nats-server restarted on %s (pid %d)", nats.url, nats.process.pid if nats.process else 0)
            self._write_run_file()
