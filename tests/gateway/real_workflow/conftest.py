"""The real orchestrator and git service in-process, behind the package's gateway, agent runner and tools.

A package of its own: the workflow-control tests next door register a stand-in orchestrator, and two
orchestrators on one NATS would share its requests. These fixtures end when this package's tests do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from autarch.runtime.bus import connect
from autarch.runtime.settings import Settings
from autarch.services.git.service import start as start_git
from autarch.services.orchestrator.service import start as start_orchestrator


@pytest.fixture(scope="package")
async def git_service(nats_server, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[None]:
    client = await connect(nats_server.url, name="git")
    stop = await start_git(client, Settings(data_dir=str(tmp_path_factory.mktemp("git-data"))))
    yield
    await stop()
    await client.drain()


@pytest.fixture(scope="package")
async def orchestrator_service(nats_server, runner, git_service,
                               tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[None]:
    """The orchestrator driving workflows with the real agent runner (the scripted demo) and git service."""
    client = await connect(nats_server.url, name="orchestrator")
    settings = Settings(data_dir=str(tmp_path_factory.mktemp("orchestrator-data")), request_timeout=30.0,
                        pulse_max_turns=4, agent_max_steps=10, preflight_timeout=30.0)
    stop = await start_orchestrator(client, settings)
    yield
    await stop()
    await client.drain()
