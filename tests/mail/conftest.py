"""Fixtures of the mail tests: the real orchestrator on the real nats-server (recording commands, not driving)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from autarch.contracts import subjects
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.service import start as start_orchestrator

T = TypeVar("T")


@pytest.fixture
async def orchestrator(nc, tmp_path: Path) -> AsyncIterator[Path]:
    """The orchestrator service in-process; yields its data dir (a restart reads the same store)."""
    data = tmp_path / "orchestrator"
    stop = await start_orchestrator(nc, Settings(data_dir=str(data), drive_workflows=False))
    yield data
    await stop()


@pytest.fixture
def epic() -> str:
    return str(uuid.uuid4())


async def ask(nc: Any, verb: str, payload: Any, reply_type: type[T]) -> T:
    return await request(nc, subjects.request("orchestrator", verb), payload, reply_type, timeout=5.0)
