"""Connecting to NATS with reconnects, and the JetStream stream every event goes to."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from autarch.contracts import subjects

__all__ = ["close_quietly", "connect", "ensure_event_stream", "open_key_value"]

log = logging.getLogger(__name__)


async def connect(url: str, *, name: str, connect_timeout: float = 5.0, reconnect: bool = True) -> Client:
    """Connect to ``url`` and keep reconnecting forever if the server goes away.

    With ``reconnect=False`` (one-shot CLI commands) a server that is down fails at once instead.
    """

    client: Client | None = None

    async def on_disconnect() -> None:
        if client is not None and (client.is_closed or client.is_draining):
            return  # our own close, not an outage
        log.warning("%s: disconnected from NATS", name)

    async def on_reconnect() -> None:
        log.info("%s: reconnected to NATS", name)

    async def on_error(exc: Exception) -> None:
        if reconnect:  # a one-shot command reports the failure itself, once
            log.warning("%s: NATS error: %s", name, exc)

    client = await nats.connect(
        # A comma-separated list names the servers of a cluster.
        [server.strip() for server in url.split(",") if server.strip()],
        name=name,
        connect_timeout=connect_timeout,
        # nats.py treats 0 as "forever" on the first connect; 1 means: try each server, then give up.
        max_reconnect_attempts=-1 if reconnect else 1,
        allow_reconnect=reconnect,
        reconnect_time_wait=0.5,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
        error_cb=on_error,
    )
    return client


async def ensure_event_stream(nc: Client, *, duplicate_window: float = 3600.0, replicas: int = 1) -> None:
    """Create ``AUTARCH_EVENTS`` if it is missing (idempotent; safe from every service at once)."""
    js = nc.jetstream()
    config = StreamConfig(
        name=subjects.EVENTS_STREAM,
        subjects=[subjects.EVENTS_ALL],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        duplicate_window=duplicate_window,
        num_replicas=replicas,
    )
    try:
        await js.stream_info(subjects.EVENTS_STREAM)
    except NotFoundError:
        await js.add_stream(config)
        log.info("created stream %s", subjects.EVENTS_STREAM)


async def open_key_value(nc: Client, bucket: str, *, replicas: int = 1, timeout: float | None = None,
                         **config: Any) -> KeyValue:
    """Bind to the key-value ``bucket``, creating it (file storage, one value per key, ``config``) if it is
    missing; safe from every process at once: the loser of a creation race binds to the winner's bucket."""
    js = nc.jetstream() if timeout is None else nc.jetstream(timeout=timeout)
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        try:
            return await js.create_key_value(bucket=bucket, history=1, replicas=replicas, storage=StorageType.FILE,
                                             **config)
        except APIError:
            return await js.key_value(bucket)  # another process created it first


async def close_quietly(nc: Client, *, timeout: float = 5.0) -> None:
    """Drain ``nc`` (deliver what is in flight), or just close it when the server is already gone."""
    if nc.is_closed:
        return
    try:
        await asyncio.wait_for(nc.drain(), timeout)
    except Exception:  # reconnecting, server gone, drain timeout: nothing more to deliver
        if not nc.is_closed:
            await nc.close()
