"""What the local cluster shape needs before its services start: the PostgreSQL schema and the replicated stream."""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import parse_qs, urlparse, urlunparse

from autarch.runtime.bus import close_quietly, connect, ensure_event_stream

__all__ = ["ensure_postgres_schema", "wait_for_stream"]

log = logging.getLogger(__name__)


def ensure_postgres_schema(url: str) -> None:
    """Create the ``?schema=`` of ``url`` if it does not exist (eventsourcing creates tables, not schemas)."""
    parsed = urlparse(url)
    schema = (parse_qs(parsed.query).get("schema") or [""])[0]
    if not schema:
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(urlunparse(parsed._replace(query="")), autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


async def wait_for_stream(url: str, *, replicas: int, duplicate_window: float, timeout: float = 60.0) -> None:
    """Return once ``AUTARCH_EVENTS`` exists with ``replicas`` (a new cluster elects its JetStream leader first)."""
    deadline = time.monotonic() + timeout
    nc = await connect(url, name="autarch-supervisor")
    try:
        while True:
            try:
                await ensure_event_stream(nc, duplicate_window=duplicate_window, replicas=replicas)
                return
            except Exception as exc:  # no meta leader yet: "JetStream not enabled", timeouts
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the NATS cluster had no JetStream within {timeout:g}s: {exc}") from exc
                log.info("waiting for the cluster's JetStream (%s)", exc)
                await asyncio.sleep(0.5)
    finally:
        await close_quietly(nc)
