"""Bodies of the gateway's HTTP API (the replies are the orchestrator's Structs)."""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["CreateWorkflowBody", "Health", "ServiceHealth"]


class CreateWorkflowBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/workflows``. Unknown fields are refused so a typo never goes unnoticed."""

    title: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    request: Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
    repo: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    """Path of a local git repository (absolute, or relative to the gateway's working directory)."""
    base_branch: Annotated[str, msgspec.Meta(min_length=1, max_length=250)] = "main"


class ServiceHealth(msgspec.Struct, kw_only=True):
    ok: bool
    instances: int
    """How many instances answered ``$SRV.PING``."""


class Health(msgspec.Struct, kw_only=True):
    status: str
    """``ok`` when NATS and every expected service answer, else ``degraded``."""
    nats: bool
    services: dict[str, ServiceHealth]
