"""The shipped NATS configs are valid for the packaged nats-server, and the embedded one is what `autarch up` writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from autarch.cli.local.natsserver import find_nats_server, render_config

INFRA = Path(__file__).resolve().parents[2] / "infra" / "nats"


@pytest.mark.parametrize("conf", sorted(INFRA.glob("*.conf")), ids=lambda p: p.name)
def test_config_is_valid(conf: Path):
    result = subprocess.run([find_nats_server(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_embedded_config_matches_what_autarch_up_writes():
    rendered = render_config(port=4333, store_dir=Path("/var/lib/autarch/nats/jetstream"))
    assert (INFRA / "embedded.conf").read_text() == rendered


def test_cluster_configs_form_one_three_node_cluster():
    names = set()
    for i in (1, 2, 3):
        text = (INFRA / f"cluster-{i}.conf").read_text()
        assert "sync_interval: always" in text
        assert all(f"nats-route://autarch-nats-{j}:6222" in text for j in (1, 2, 3))
        names.add(text.split("server_name:")[1].split()[0])
    assert names == {"autarch-nats-1", "autarch-nats-2", "autarch-nats-3"}
