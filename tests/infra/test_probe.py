"""The readiness probe: ready only when an instance of the service on this host answers ``$SRV.PING``."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

from autarch.runtime.micro import TypedService
from autarch.runtime.probe import probe


def _run_probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AUTARCH_")}
    return subprocess.run([sys.executable, "-m", "autarch.runtime.probe", *args],
                          capture_output=True, text=True, timeout=60, env={**environ, **(env or {})})


async def test_probe_is_ready_only_while_a_local_instance_answers(nats_server, nc):
    # No notifier yet: not ready, and it says so.
    silent = _run_probe("notifier", "--nats-url", nats_server.url, "--timeout", "0.5")
    assert silent.returncode == 1, silent.stderr
    assert "no instance of notifier" in silent.stderr

    service = TypedService(nc, name="notifier")
    await service.start()
    try:
        # In a thread: the service answers from this test's event loop, which must keep running.
        ready = await asyncio.to_thread(_run_probe, "notifier", "--nats-url", nats_server.url)
        assert ready.returncode == 0, ready.stderr
        # Another service's instance does not make this one ready.
        other = await asyncio.to_thread(_run_probe, "indexer", "--nats-url", nats_server.url, "--timeout", "0.5")
        assert other.returncode == 1
    finally:
        await service.stop()


async def test_an_instance_on_another_host_counts_only_with_any(nats_server, nc):
    service = TypedService(nc, name="indexer")
    await service.start()
    try:
        elsewhere = await probe(nats_server.url, "indexer", host="some-other-pod", timeout=0.5)
        assert (elsewhere.instances, elsewhere.local) == (1, 0)
        anywhere = await probe(nats_server.url, "indexer", host="some-other-pod", timeout=0.5, accept_any=True)
        assert anywhere.instances == 1
        here = await probe(nats_server.url, "indexer", host=socket.gethostname(), timeout=2)
        assert here.local == 1
    finally:
        await service.stop()


def test_unreachable_nats_and_unknown_services_are_status_2():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = _run_probe("tools", "--nats-url", f"nats://127.0.0.1:{port}", "--timeout", "0.5")
    assert down.returncode == 2
    assert "unreachable" in down.stderr
    unknown = _run_probe("toolz", "--nats-url", f"nats://127.0.0.1:{port}")
    assert unknown.returncode == 2
    assert "unknown service 'toolz'" in unknown.stderr


async def test_a_named_instance_is_ready_while_another_instance_serves(nats_server, nc, monkeypatch):
    # The serving instance runs on "another pod"; this host's process is a hot standby (runtime/standby.py).
    monkeypatch.setattr(socket, "gethostname", lambda: "leader-pod")
    service = TypedService(nc, name="orchestrator")
    await service.start()
    monkeypatch.undo()
    try:
        unnamed = await asyncio.to_thread(_run_probe, "orchestrator", "--nats-url", nats_server.url, "--timeout", "0.5")
        assert unnamed.returncode == 1  # an unnamed instance must answer itself
        standby = await asyncio.to_thread(_run_probe, "orchestrator", "--nats-url", nats_server.url,
                                          env={"AUTARCH_INSTANCE": "orchestrator-2"})
        assert standby.returncode == 0, standby.stderr
    finally:
        await service.stop()
