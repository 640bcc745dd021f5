"""Where each service's eventsourcing application keeps its events.

Embedded default: SQLite at ``<data dir>/<service>/events.sqlite`` (WAL). Scale-out: PostgreSQL
from ``AUTARCH_POSTGRES_URL`` (``?schema=NAME`` selects an existing schema), one table set
per application name. eventsourcing's
own variables (``PERSISTENCE_MODULE``, ``POSTGRES_*``, ``SQLITE_*``) still win when set, so an
operator can configure the store exactly as eventsourcing documents.

Both stores chain every event they record (``runtime/chain.py``, ``docs/audit.md``): SQLite through
:mod:`.sqlite_store`'s recorder, PostgreSQL through :mod:`.postgres_store`'s, named here by
``APPLICATION_RECORDER_TOPIC`` (set for eventsourcing's PostgreSQL module unless the operator names a recorder).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from . import sqlite_store
from .settings import CommonSettings, SettingsError

__all__ = ["describe_store", "event_store_env", "store_path"]

RECORDER_TOPIC_ENV = "APPLICATION_RECORDER_TOPIC"
POSTGRES_RECORDER = "autarch.runtime.postgres_store:ChainedPostgresRecorder"
"""The chaining PostgreSQL recorder (named by topic: psycopg is imported only when PostgreSQL is used)."""


def _postgres_env(url: str) -> dict[str, str]:
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql") or not parsed.path.strip("/"):
        raise SettingsError(f"postgres_url must look like postgresql://user:pass@host:5432/dbname, got {url!r}")
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": parsed.path.strip("/"),
        "POSTGRES_HOST": parsed.hostname or "127.0.0.1",
        "POSTGRES_PORT": str(parsed.port or 5432),
        "POSTGRES_USER": unquote(parsed.username or "postgres"),
        "POSTGRES_PASSWORD": unquote(parsed.password or ""),
        "POSTGRES_CONNECT_TIMEOUT": "5",
        RECORDER_TOPIC_ENV: POSTGRES_RECORDER,
    }
    schema = parse_qs(parsed.query).get("schema")
    if schema:
        # ?schema=NAME keeps several installations (or test runs) apart in one database.
        env["POSTGRES_SCHEMA"] = schema[0]
    return env


def event_store_env(settings: CommonSettings, service: str) -> dict[str, str]:
    """The eventsourcing environment for ``service``'s application."""
    if os.environ.get("PERSISTENCE_MODULE"):
        # The operator configured eventsourcing directly; take it as given.
        env = {k: v for k, v in os.environ.items() if k.startswith(("PERSISTENCE_", "POSTGRES_", "SQLITE_"))}
        if env["PERSISTENCE_MODULE"] == "eventsourcing.postgres" and RECORDER_TOPIC_ENV not in os.environ:
            env[RECORDER_TOPIC_ENV] = POSTGRES_RECORDER  # chained, as the store configured from our settings
        return env
    if settings.postgres_url:
        return _postgres_env(settings.postgres_url)
    path = Path(settings.data_path) / service
    path.mkdir(parents=True, exist_ok=True)
    return {
        # eventsourcing's SQLite at synchronous=NORMAL, its log synced by the relay before it publishes.
        "PERSISTENCE_MODULE": sqlite_store.MODULE,
        "SQLITE_DBNAME": str(path / "events.sqlite"),
        "SQLITE_LOCK_TIMEOUT": "10",
        sqlite_store.SYNCHRONOUS_ENV: settings.sqlite_synchronous,
    }


def describe_store(env: dict[str, str]) -> str:
    """One line naming the store, for logs and ``autarch config`` (never the password)."""
    if env.get("PERSISTENCE_MODULE") == "eventsourcing.postgres":
        return f"postgresql://{env.get('POSTGRES_HOST')}:{env.get('POSTGRES_PORT')}/{env.get('POSTGRES_DBNAME')}"
    return f"sqlite:{env.get('SQLITE_DBNAME')}"


def store_path(env: dict[str, str]) -> str:
    """What a storage problem of the store names: its SQLite file, or the PostgreSQL server and database."""
    if env.get("PERSISTENCE_MODULE") == "eventsourcing.postgres":
        return describe_store(env)
    return env.get("SQLITE_DBNAME") or describe_store(env)
