"""The audit tests' store: the orchestrator's, on SQLite and (when a server answers) on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.runtime.settings import Settings

from .stores import DSN, Store


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.delenv("PERSISTENCE_MODULE", raising=False)
    data = tmp_path / "data"
    data.mkdir()
    if request.param == "sqlite":
        yield Store(Settings(data_dir=str(data)), "sqlite")
        return
    if DSN is None:
        pytest.skip("no PostgreSQL server answers (set AUTARCH_TEST_POSTGRES_URL); skipped")
    import psycopg

    schema = f"autarch_audit_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield Store(Settings(data_dir=str(data), postgres_url=f"{DSN}?schema={schema}"), "postgres", schema)
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
