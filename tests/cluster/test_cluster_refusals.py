"""``autarch up --cluster`` refuses what it cannot run, says why, and leaves nothing running."""

from __future__ import annotations

import socket
import subprocess
import sys

from autarch.cli.local.natsserver import free_port_run
from autarch.cli.local_system import scrubbed_env


def _up(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    nats_port = free_port_run(3)
    env = {**scrubbed_env(), "AUTARCH_DATA_DIR": str(tmp_path / "data"), "AUTARCH_NATS_PORT": str(nats_port),
           "AUTARCH_PORT": str(free_port_run(2))}
    done = subprocess.run([sys.executable, "-m", "autarch.cli.main", "up", *args], env=env, capture_output=True,
                          text=True, timeout=60)
    return done, nats_port


def _nothing_listens(first: int, count: int = 3) -> bool:
    for port in range(first, first + count):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return False
    return True


def test_a_cluster_without_postgresql_is_refused(tmp_path):
    done, nats_port = _up(tmp_path, "--cluster", "3")
    assert done.returncode == 2
    assert "needs PostgreSQL event stores" in done.stderr and "--postgres-url" in done.stderr
    assert _nothing_listens(nats_port)
    assert not (tmp_path / "data" / "run.json").exists()


def test_a_negative_cluster_or_zero_instances_is_refused(tmp_path):
    for args in (("--cluster", "-1"), ("--cluster", "3", "--instances", "0")):
        done, _ = _up(tmp_path, *args, "--postgres-url", "postgresql://postgres@127.0.0.1:5432/test")
        assert done.returncode == 2, done.stderr
        assert "--cluster must be 1 or more nodes and --instances 1 or more" in done.stderr


def test_an_unreachable_postgresql_stops_the_nodes_it_started(tmp_path):
    done, nats_port = _up(tmp_path, "--cluster", "3", "--postgres-url", "postgresql://nobody@127.0.0.1:1/none?schema=x")
    assert done.returncode == 1, done.stderr
    assert "the local cluster did not start: PostgreSQL at postgres_url is not usable" in done.stderr
    assert _nothing_listens(nats_port)


def test_partitions_out_of_range_are_refused(tmp_path):
    for count in ("0", "65"):
        done, nats_port = _up(tmp_path, "--partitions", count)
        assert done.returncode == 2, done.stderr
        assert "--partitions must be between 1 and 64" in done.stderr
        assert _nothing_listens(nats_port, 1)
