"""The whole system as processes (``autarch up``, every service, the scripted model) for the API tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autarch.services.scripted_model import ScriptedModelServer, load_scenario
from tests.system import System
from tests.workflows.conftest import scripted_system


@pytest.fixture(scope="package")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(load_scenario("demo")) as server:
        yield server


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    # Every service, as the issue asks: a route whose work needs the indexer (a loop anchor) must meet it.
    yield from scripted_system(tmp_path_factory, model, "api", AUTARCH_REQUEST_TIMEOUT="5",
                               services="orchestrator,tools,git,indexer,agent_runner,notifier")
