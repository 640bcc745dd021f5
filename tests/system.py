"""``autarch up`` as a real process tree (embedded nats-server, services, gateway) for end-to-end tests.

Shared by every test folder that starts a whole system; the plain ``system`` fixture is in tests/conftest.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx


@dataclass
class System:
    data_dir: Path
    port: int
    nats_port: int
    services: str
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.data_dir / "token").read_text().strip()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTARCH_")}
        env.update(AUTARCH_DATA_DIR=str(self.data_dir), AUTARCH_PORT=str(self.port),
                   AUTARCH_NATS_PORT=str(self.nats_port), AUTARCH_REQUEST_TIMEOUT="5")
        if self.services == "orchestrator":
            # No agents to drive: the orchestrator only records what it is sent.
            env["AUTARCH_DRIVE_WORKFLOWS"] = "false"
        env.update(self.extra_env)
        return env

    def cli(self, *args: str, timeout: float = 30,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``autarch …`` with this system's environment (and ``extra_env`` over it)."""
        return subprocess.run([sys.executable, "-m", "autarch.cli.main", *args],
                              env={**self.env(), **(extra_env or {})}, capture_output=True, text=True, timeout=timeout)

    def start(self, timeout: float = 30) -> System:
        self.log = self.data_dir.parent / f"up-{time.monotonic_ns()}.log"
        out = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autarch.cli.main", "up", "--services", self.services],
            env=self.env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"autarch up exited early:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"system not healthy within {timeout}s:\n{self.log.read_text()}")

    def run_info(self) -> dict:
        return json.loads((self.data_dir / "run.json").read_text())

    def all_pids(self) -> list[int]:
        info = self.run_info()
        return [p for p in [info["nats_pid"], *info["children"].values()] if p]

    def stop(self, timeout: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self.proc = None
        return code


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes (it will be reaped by init).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def work_tree(path: Path) -> Path:
    """``path`` as a git work tree with one (empty) commit on ``main``: what a workflow may be created on."""
    if not (path / ".git").exists():
        git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "init"], check=True)
    return path
