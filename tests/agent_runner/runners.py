"""A runner of a test's own, for tests that need other settings than the ``runner`` fixture's."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg

from autarch.contracts import subjects
from autarch.contracts.agents import TurnView
from autarch.services.agent_runner.service import open_runner
from autarch.services.scripted_model import ScriptedModelServer

from .conftest import runner_settings, start_session, wait_turn

__all__ = ["own_runner", "run_turn", "run_turn_collecting_deltas"]


@asynccontextmanager
async def own_runner(nc, data_dir: Path, model: ScriptedModelServer, **settings: Any) -> AsyncIterator[None]:
    """A runner with ``settings``, stopped on leaving. Never beside the ``runner`` fixture: one runner at a
    time serves the agent_runner subjects (two would share the queue group and split the requests)."""
    _, stop = await open_runner(nc, runner_settings(data_dir, model, **settings))
    try:
        yield
    finally:
        await stop()


async def run_turn(nc, *, timeout: float = 20.0, **start: Any) -> tuple[str, TurnView]:
    """Start a session (``start_session``'s fields) and wait for its first turn: (session id, that turn)."""
    accepted = await start_session(nc, **start)
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id, timeout=timeout)
    return accepted.session_id, view.turns[0]


async def run_turn_collecting_deltas(nc, **start: Any) -> tuple[TurnView, list[dict[str, Any]]]:
    """:func:`run_turn` in a workflow of its own, with every delta published for it (decoded), in order."""
    workflow_id = str(uuid.uuid4())
    got: list[dict[str, Any]] = []

    async def collect(msg: Msg) -> None:
        got.append(json.loads(msg.data))

    sub = await nc.subscribe(subjects.deltas(workflow_id, "*"), cb=collect)
    try:
        _, turn = await run_turn(nc, workflow_id=workflow_id, **start)
        await nc.flush()  # every delta published before the turn's end has reached this connection
    finally:
        await sub.drain()  # and went through collect: drain waits for the subscription's queue to empty
    return turn, got
