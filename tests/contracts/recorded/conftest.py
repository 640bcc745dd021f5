"""Every service as its own process with the scripted model, for checking recorded events against their schemas.

One system per package; the demo workflow and the swarm run on it one after the other, so the stream holds
what both record (workflow, preflight, pulse, session, turn, swarm, bead, lease, worker and mail events).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System
from tests.workflows.conftest import Client, scripted_system


@pytest.fixture(scope="package")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer("demo") as server:
        yield server


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    # The workflow tests' limits plus the swarm tests' three workers and short leases.
    yield from scripted_system(tmp_path_factory, model, "schemas", AUTARCH_PULSE_MAX_TURNS="4",
                               AUTARCH_AGENT_MAX_STEPS="10", AUTARCH_SWARM_WORKERS="3", AUTARCH_LEASE_TTL="5",
                               AUTARCH_REQUEST_TIMEOUT="30")


@pytest.fixture
def client(system: System) -> Iterator[Client]:
    c = Client(system)
    yield c
    c.http.close()
