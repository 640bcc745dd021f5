"""A turn whose ``turn:completed`` a dying orchestrator took but never acknowledged is handled as soon as the
next orchestrator starts, not after the event stream's redelivery delay (``ack_wait``, 30 s).

The real runner, tools service and orchestrator run here; the test itself plays the orchestrator that died:
it takes the turn's event from the orchestrator's durable consumer and never acknowledges it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats.errors
import pytest

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.contracts import subjects
from autarch.contracts.agents import GetSession, SessionView
from autarch.contracts.workflows import CreateWorkflow, GetWorkflow, WorkflowView
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.service import start as start_orchestrator

from .conftest import RUNNER, serve_tools

CONSUMER = "orchestrator-turns"


# This module's own nats-server (and tools service on it), not the session's: the orchestrator's durable consumer
# of every workflow's turn:completed must start empty here, and on the shared server it holds the turns every
# earlier runner test completed (hundreds, whatever ran before). A server starts in a fraction of a second.
@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path_factory.mktemp("nats-catch-up")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def tools(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Path]:
    async for data_dir in serve_tools(nats_server.url, tmp_path_factory.mktemp("tools-data-catch-up")):
        yield data_dir


async def _view(nc, workflow_id: str) -> WorkflowView:
    return await request(nc, subjects.request("orchestrator", "get_workflow"), GetWorkflow(workflow_id=workflow_id),
                         WorkflowView)


async def _session_running(nc, workflow_id: str) -> str:
    """The scoping session's id, once the runner has it."""
    async with asyncio.timeout(20):
        while True:
            session_id = (await _view(nc, workflow_id)).sessions.get("scoping")
            if session_id is not None:
                try:
                    await request(nc, subjects.request(RUNNER, "get_session"), GetSession(session_id=session_id),
                                  SessionView)
                    return session_id
                except RemoteError:
                    pass
            await asyncio.sleep(0.05)


async def _turn_completed(nc, session_id: str) -> None:
    async with asyncio.timeout(30):
        while (await request(nc, subjects.request(RUNNER, "get_session"), GetSession(session_id=session_id),
                             SessionView)).turns[0].outcome is None:
            await asyncio.sleep(0.1)


async def _left_unacknowledged(nc, session_id: str) -> None:
    """Make sure the session's turn:completed is out for delivery on the orchestrator's consumer and unacked.

    A stopped orchestrator's last pull request can outlive it by a few seconds and take the event itself;
    otherwise the test takes it here, as an orchestrator that dies mid-handling would.
    """
    js = nc.jetstream()
    sub = await js.pull_subscribe(subjects.event("*", "turn", "*", "completed"), durable=CONSUMER,
                                  stream=subjects.EVENTS_STREAM)
    try:
        for msg in await sub.fetch(batch=64, timeout=3):
            if msg.subject.split(".")[4] == session_id:  # autarch.events.<wf>.turn.<session>.completed
                return  # never acked: JetStream would hand it out again only after ack_wait
            await msg.ack()
    except nats.errors.TimeoutError:
        pass
    finally:
        await sub.unsubscribe()
    info = await js.consumer_info(subjects.EVENTS_STREAM, CONSUMER)
    assert info.num_ack_pending >= 1 and info.num_pending == 0, info


async def test_a_turn_left_unacknowledged_by_a_dead_orchestrator_is_handled_at_the_next_start(nc, runner, repo,
                                                                                             tmp_path: Path):
    settings = Settings(data_dir=str(tmp_path / "orchestrator"), request_timeout=5.0)
    stop = await start_orchestrator(nc, settings)
    workflow_id = str(uuid.uuid4())
    try:
        await request(nc, subjects.request("orchestrator", "create_workflow"),
                      CreateWorkflow(workflow_id=workflow_id, title="Greet", request="Greet the world", repo=str(repo),
                                     script="slow-scope"), WorkflowView)
        session_id = await _session_running(nc, workflow_id)
    finally:
        await stop()  # the scoping turn (slow on purpose) ends while no orchestrator runs
    try:
        await _turn_completed(nc, session_id)
        await _left_unacknowledged(nc, session_id)
        stop = await start_orchestrator(nc, settings)
        try:
            async with asyncio.timeout(15):  # well inside the consumer's 30 s ack_wait
                while not (view := await _view(nc, workflow_id)).awaiting_approval:
                    await asyncio.sleep(0.1)
            assert view.stage == "scoping" and view.version > 0
        finally:
            await stop()
    finally:
        await nc.jetstream().delete_consumer(subjects.EVENTS_STREAM, CONSUMER)
