"""A system of every service as its own process for the swarm tests: three workers, short leases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from autarch.services.scripted_model import ScriptedModelServer
from autarch.services.scripted_model.scenario import bundled_scenario_path
from tests.system import System
from tests.workflows.conftest import Client, scripted_system

SERVICES = "orchestrator,tools,git,agent_runner"


def swarm_scenario() -> dict[str, Any]:
    """The bundled swarm scenario (the one ``autarch demo --swarm`` plays) as a dict to copy and change."""
    return json.loads(bundled_scenario_path("swarm").read_text())


@pytest.fixture(scope="package")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer("swarm") as server:
        yield server


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    yield from scripted_system(tmp_path_factory, model, "swarm", AUTARCH_SWARM_WORKERS="3",
                               AUTARCH_LEASE_TTL="5", AUTARCH_AGENT_MAX_STEPS="10", AUTARCH_REQUEST_TIMEOUT="30")


@pytest.fixture
def client(system: System) -> Iterator[Client]:
    c = Client(system)
    yield c
    c.http.close()
