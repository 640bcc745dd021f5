"""The local cluster shape (``autarch up --cluster 3 --instances 2``) with the scripted model, on its own
PostgreSQL schema. Runs when a PostgreSQL server answers (``tests/conftest.py``); skipped, saying so, otherwise."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import nats
import pytest

from autarch.cli.local.natsserver import die_with_parent, free_port_run
from autarch.contracts import subjects
from autarch.services.scripted_model import ScriptedModelServer
from tests.conftest import postgres_dsn
from tests.system import System

__all__ = ["TTL", "ClusterSystem", "drop_postgres_connections", "leader_of", "stream_leader", "wait_replicas_current"]

NODES, INSTANCES = 3, 2
TTL = 12
"""The cluster's ``leader_ttl``: long enough to ride out a JetStream election when a node dies."""
T = TypeVar("T")


@dataclass
class ClusterSystem(System):
    """``autarch up --cluster 3 --instances 2`` as a process tree, its stores in ``postgres_url``."""

    postgres_url: str = ""

    def env(self) -> dict[str, str]:
        return {**super().env(), "AUTARCH_POSTGRES_URL": self.postgres_url}

    def start(self, timeout: float = 120) -> ClusterSystem:
        self.log = self.data_dir.parent / f"up-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autarch.cli.main", "up", "--services", self.services, "--cluster", str(NODES),
                 "--instances", str(INSTANCES)],
                env=self.env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                # Stopped by the kernel too, with everything it started, should the test process die first.
                start_new_session=True, preexec_fn=die_with_parent,
            )
        try:
            return self._wait_ready(timeout)
        except BaseException:
            self.stop()  # a cluster that never got ready must not outlive the test
            raise

    def _wait_ready(self, timeout: float) -> ClusterSystem:
        import httpx

        assert self.proc is not None and self.log is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"autarch up --cluster exited early:\n{self.log.read_text()[-5000:]}")
            try:
                ready = all(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1, trust_env=False).status_code == 200
                            for port in (self.port, self.port + INSTANCES - 1))
            except httpx.HTTPError:
                ready = False
            if ready:
                return self
            time.sleep(0.2)
        raise RuntimeError(f"cluster not ready within {timeout}s:\n{self.log.read_text()[-5000:]}")

    def stop(self) -> None:  # type: ignore[override]  # a cluster has no one exit status
        if self.proc is None:
            return
        try:
            info = self.run_info()
        except (OSError, ValueError):
            info = {}
        pids = [*(info.get("nats_pids") or []), *(info.get("children") or {}).values()]
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        for pid in pids:  # nothing may outlive the run
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    @property
    def nats_url(self) -> str:
        return str(self.run_info()["nats_url"])

    def freeze(self, child: str, seconds: float) -> int:
        """SIGSTOP the child ``child`` for ``seconds``, then SIGCONT it (a process paused, not dead); its pid."""
        pid = int(self.run_info()["children"][child])
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        return pid

    def kill(self, child: str) -> int:
        """SIGKILL the child ``child`` (``orchestrator-2``, …, or ``nats-<i>`` for node i); its pid."""
        info = self.run_info()
        pid = info["nats_pids"][int(child.split("-")[1]) - 1] if child.startswith("nats-") else info["children"][child]
        os.kill(pid, signal.SIGKILL)
        return int(pid)


def drop_postgres_connections(system: ClusterSystem, child: str) -> int:
    """Terminate, on the server's side, every PostgreSQL connection the child ``child`` holds; how many."""
    import re

    import psycopg

    pid = system.run_info()["children"][child]
    sockets = subprocess.run(["ss", "-Htnp", "dport = :5432"], capture_output=True, text=True).stdout
    ports = [int(m.group(1)) for line in sockets.splitlines() if f"pid={pid}," in line
             for m in [re.search(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:5432", line)] if m]
    if not ports:
        return 0
    with psycopg.connect(DSN, autocommit=True) as conn:  # type: ignore[arg-type]  # set: the postgres tests skip without it
        rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY(%s) "
                            "AND client_addr = '127.0.0.1'", (ports,)).fetchall()
    return sum(1 for (done,) in rows if done)


async def _leader_of(url: str, service: str) -> str | None:
    nc = await nats.connect(url.split(","), connect_timeout=2)
    try:
        kv = await nc.jetstream().key_value("AUTARCH_LEADERS")
        entry = await kv.get(f"service.{service}")
        return json.loads(entry.value)["holder"] if entry.value else None
    finally:
        await nc.close()


def _patiently(ask: Callable[[], Awaitable[T]], what: str, timeout: float = 30) -> T:
    """``ask()`` retried while the cluster recovers from a killed node (its stream leaders being elected)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return asyncio.run(ask())  # type: ignore[arg-type]  # ask() makes a coroutine
        except Exception as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: no answer within {timeout:g}s ({exc!r})") from exc
            time.sleep(0.5)


def leader_of(system: ClusterSystem, service: str) -> str | None:
    """The instance (``orchestrator-1``, …) holding ``service``'s lease."""
    return _patiently(lambda: _leader_of(system.nats_url, service), f"the {service} lease")


async def _stream_leader(url: str) -> tuple[str, int]:
    nc = await nats.connect(url.split(","), connect_timeout=2)
    try:
        info = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
        assert info.cluster is not None and info.cluster.leader is not None
        return info.cluster.leader, info.config.num_replicas or 1
    finally:
        await nc.close()


async def _replicas_current(url: str) -> bool:
    nc = await nats.connect(url.split(","), connect_timeout=2)
    try:
        info = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
        peers = (info.cluster.replicas or []) if info.cluster else []
        return info.cluster is not None and info.cluster.leader is not None and len(peers) == 2 and all(
            peer.current and not peer.offline for peer in peers)
    finally:
        await nc.close()


def wait_replicas_current(system: ClusterSystem, timeout: float = 30) -> None:
    """Wait until the event stream has a leader and both other replicas are online and caught up."""
    deadline = time.monotonic() + timeout
    while not _patiently(lambda: _replicas_current(system.nats_url), "the stream's replicas"):
        if time.monotonic() > deadline:
            raise AssertionError(f"the stream's replicas did not catch up within {timeout:g}s")
        time.sleep(0.5)


def stream_leader(system: ClusterSystem) -> tuple[str, int]:
    """The event stream's leader node (``autarch-nats-2``) and its replica count."""
    return _patiently(lambda: _stream_leader(system.nats_url), "the stream's leader")


DSN = postgres_dsn()


@pytest.fixture(scope="package")
def postgres_url() -> Iterator[str]:
    if DSN is None:
        pytest.skip("no PostgreSQL server answers (set AUTARCH_TEST_POSTGRES_URL); the cluster tests need one")
    import psycopg

    schema = f"autarch_cluster_{uuid.uuid4().hex[:10]}"
    yield f"{DSN}?schema={schema}"  # autarch up --cluster creates it
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="package")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer("demo") as server:
        yield server


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer,
            postgres_url: str) -> Iterator[ClusterSystem]:
    data = tmp_path_factory.mktemp("cluster") / "data"
    data.mkdir()
    env = {"AUTARCH_ANTHROPIC_BASE_URL": model.base_url, "AUTARCH_ANTHROPIC_API_KEY": "scripted",
           "AUTARCH_REQUEST_TIMEOUT": "5", "AUTARCH_GIT_REQUEST_TIMEOUT": "10", "AUTARCH_LEADER_TTL": str(TTL)}
    system = ClusterSystem(data_dir=data, port=free_port_run(INSTANCES), nats_port=free_port_run(NODES),
                           services="orchestrator,tools,git,agent_runner,indexer,notifier", extra_env=env,
                           postgres_url=postgres_url)
    system.start()
    yield system
    system.stop()
