"""Fixtures: scripted model servers on free loopback ports, stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autarch.services.scripted_model import ScriptedModelServer


@pytest.fixture
def start_server() -> Iterator[Callable[..., ScriptedModelServer]]:
    """Start a scripted model server for a scenario; every one started is stopped after the test."""
    servers: list[ScriptedModelServer] = []

    def start(scenario: Any, **options: Any) -> ScriptedModelServer:
        server = ScriptedModelServer(scenario, **options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
