"""A local Autarch system run as a subprocess: ``autarch up`` on free ports with its own data directory.

Started, waited on until healthy, and stopped with everything it started (supervisor, services, gateway,
nats-server) — by ``autarch demo`` and by ``tests/benchmarks/workflows.py``. A user's ``AUTARCH_*`` and
``ANTHROPIC_*`` settings and their proxy never reach it (:func:`scrubbed_env`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .gateway_client import CliError, Connection, GatewayClient

__all__ = ["SSE_KEEPALIVE", "LocalSystem", "LocalSystemError", "pid_alive", "scrubbed_env"]

SSE_KEEPALIVE = 2.0
"""Seconds between the system's SSE keep-alive comments (its ``AUTARCH_SSE_KEEPALIVE``)."""


class LocalSystemError(CliError):
    """The local system did not start (its log's last lines are in the message)."""


def scrubbed_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) without ``AUTARCH_*``/``ANTHROPIC_*`` and with loopback
    exempt from proxies: a user's settings, keys or proxy must not reach the local system."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith(("AUTARCH_", "ANTHROPIC_"))}
    for key in ("NO_PROXY", "no_proxy"):
        given = [p for p in env.get(key, "").split(",") if p]
        env[key] = ",".join([*given, *(h for h in ("127.0.0.1", "localhost") if h not in given)])
    return env


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return not Path("/proc").is_dir()


@dataclass
class LocalSystem:
    """``autarch up --services …`` as a subprocess on free ports, with its own data directory."""

    data_dir: Path
    model_url: str
    """The Anthropic-compatible endpoint the agent runner calls (the scripted model's URL)."""
    services: tuple[str, ...] = ()
    """The services to run; empty: every service ``autarch up`` knows."""
    extra_env: dict[str, str] = field(default_factory=dict)
    cluster: int = 0
    """NATS nodes of a local cluster (``autarch up --cluster``); 0: the embedded single server."""
    instances: int = 0
    """Processes of every service and gateway (``--instances``); 0: ``autarch up``'s default."""
    postgres_url: str | None = None
    """PostgreSQL event stores (required with ``cluster``)."""
    port: int = 0
    nats_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)
    """The supervisor's children and nats-server, as ``run.json`` listed them once healthy."""

    def __post_init__(self) -> None:
        from autarch.cli.local.natsserver import free_port_run  # loaded here: the CLI's other commands skip it

        gateways, nodes = max(1, self.instances or (2 if self.cluster else 1)), max(1, self.cluster)
        self.port = self.port or free_port_run(gateways)
        while not self.nats_port or (self.nats_port < self.port + gateways and self.port < self.nats_port + nodes):
            self.nats_port = free_port_run(nodes)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "up.log"

    @property
    def token(self) -> str:
        return (self.data_dir / "token").read_text().strip()

    def connection(self) -> Connection:
        """Where the system's gateway is and its token (written by ``autarch up`` on start)."""
        return Connection(url=self.url, token=self.token, sse_keepalive=SSE_KEEPALIVE)

    def client(self, *, timeout: float = 30) -> GatewayClient:
        """A gateway client for this system; no proxy from the environment (the system is on loopback)."""
        return GatewayClient(self.connection(), timeout=timeout, trust_env=False)

    def env(self) -> dict[str, str]:
        env = scrubbed_env()
        env.update(
            AUTARCH_DATA_DIR=str(self.data_dir), AUTARCH_PORT=str(self.port), AUTARCH_NATS_PORT=str(self.nats_port),
            AUTARCH_ANTHROPIC_BASE_URL=self.model_url, AUTARCH_ANTHROPIC_API_KEY="scripted",
            AUTARCH_REQUEST_TIMEOUT="30", AUTARCH_SSE_KEEPALIVE=f"{SSE_KEEPALIVE:g}", PYTHONUNBUFFERED="1",
        )
        if self.postgres_url:
            env["AUTARCH_POSTGRES_URL"] = self.postgres_url
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 60) -> LocalSystem:
        """Start ``autarch up`` and return once ``/healthz`` answers 200."""
        from autarch.cli.local.natsserver import die_with_parent

        self.data_dir.mkdir(parents=True, exist_ok=True)
        services = ["--services", ",".join(self.services)] if self.services else []
        if self.cluster:
            services += ["--cluster", str(self.cluster)]
        if self.instances:
            services += ["--instances", str(self.instances)]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autarch.cli.main", "up", *services],
                env=self.env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                # Its own session: Ctrl-C reaches the caller, which stops the system in order; and the kernel
                # stops it should the caller die without its cleanup.
                start_new_session=True, preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + timeout
        # /healthz needs no token (none exists before the first start).
        with GatewayClient(Connection(url=self.url, token=""), timeout=2, trust_env=False) as health:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise LocalSystemError(
                        f"autarch up exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
                try:
                    health.get("/healthz")
                except CliError:
                    time.sleep(0.1)
                    continue
                self.pids = self._run_pids()
                return self
        raise LocalSystemError(f"the system was not healthy within {timeout:g}s:\n{self.log_tail()}")

    def run_info(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.data_dir / "run.json").read_text())
        except (OSError, ValueError):
            return None

    def _run_pids(self) -> list[int]:
        info = self.run_info() or {}
        pids = [info.get("nats_pid"), *(info.get("nats_pids") or []), *(info.get("children") or {}).values()]
        return [p for p in pids if p]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join("    " + line for line in text[-lines:])

    def stop(self, grace: float = 30) -> int | None:
        """SIGTERM ``autarch up`` and wait for it (SIGKILL after ``grace``); then make sure nothing it started
        is left (its children stop with it; any that did not get SIGKILL)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        pids = sorted(set(self.pids) | set(self._run_pids()))
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        deadline = time.monotonic() + 5
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in pids:
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        return proc.returncode
