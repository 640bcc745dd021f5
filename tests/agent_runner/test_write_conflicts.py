"""Two writers of one session: a runner's save that another writer of the shared store beat to the session's next
version is decided again on what was recorded, and the turn ends as it should, never as an error.

In a cluster this is a standby runner that took over while its paused predecessor still had a turn in flight (or
the other way round). Here the real runner runs the turn, and the test plays the other writer: with an application
of its own on the same store (SQLite, and PostgreSQL when a server answers) it records the result of the tool call
the runner is running, before the runner records its own.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import OperationalError

from autarch.contracts import subjects
from autarch.contracts.agents import SendMessage, TurnAccepted
from autarch.runtime.errors import RemoteError
from autarch.runtime.eventstore import event_store_env
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.agent_runner.application import SessionApplication
from autarch.services.agent_runner.domainmodel import Session
from autarch.services.agent_runner.service import AgentRunner, open_runner
from autarch.services.scripted_model import ScriptedModelServer

from ..conftest import postgres_dsn
from .conftest import RUNNER, runner_settings, start_session, wait_turn
from .scenarios import step, text, tool

# The command tells the test it runs, then waits for the test's word: the other writer records first, meanwhile.
COMMAND = "touch started; while [ ! -f go ]; do sleep 0.02; done; echo ran here"
ELSEWHERE = "ran elsewhere"

SCENARIO = {
    "description": "A pulse whose one tool call another writer records too.",
    "check_tools": False,
    "scripts": {
        "pulsing:two-writers": [
            step(tool("shell", reason="Run the check", command=COMMAND, timeoutSeconds=60)),
            step(text("The check ran.")),
        ],
        "discussion:two-writers": [step(text("First answer.")), step(text("Never asked for."))],
    },
}

DSN = postgres_dsn()


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedModelServer]:
    """This module's own scripted model."""
    with ScriptedModelServer(SCENARIO) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, data_dir: Path, scripted: ScriptedModelServer,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The runner's settings on each store the runner can use (PostgreSQL in a schema of its own)."""
    if request.param == "sqlite":
        yield runner_settings(data_dir, scripted)
        return
    if DSN is None:
        pytest.skip("no PostgreSQL server answers (set AUTARCH_TEST_POSTGRES_URL); skipped")
    import psycopg

    monkeypatch.delenv("PERSISTENCE_MODULE", raising=False)
    schema = f"autarch_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield runner_settings(data_dir, scripted, postgres_url=f"{DSN}?schema={schema}")
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
async def runner_on(nc: Any, store: Settings, tools: Path) -> AsyncIterator[AgentRunner]:
    runner, stop = await open_runner(nc, store)
    yield runner
    await stop()


async def _until(path: Path) -> None:
    while not path.exists():
        await asyncio.sleep(0.01)


def _record(app: SessionApplication, session: Session) -> None:
    """Save ``session`` as the other writer. On SQLite a save whose transaction read first can be refused at once
    ("database is locked") when the runner's connection committed meanwhile: tried again, as nothing was recorded."""
    events = list(session.collect_events())
    for _ in range(100):
        try:
            app.save(*events)
            return
        except OperationalError:
            time.sleep(0.02)
    app.save(*events)


def _topics(app: SessionApplication, session_id: str) -> list[str]:
    return [e.topic.rsplit(".", 1)[-1] for e in app.recorder.select_events(uuid.UUID(session_id))]


async def test_a_save_beaten_by_another_writer_runs_on_from_what_it_recorded(nc, runner_on: AgentRunner, repo: Path,
                                                                             scripted: ScriptedModelServer,
                                                                             store: Settings) -> None:
    scripted.reset()  # the requests of this test alone
    other = SessionApplication(env=event_store_env(store, "agent_runner"))
    try:
        accepted = await start_session(nc, role="pulsing", script="two-writers", root=repo)
        await asyncio.wait_for(_until(repo / "started"), 20)

        # The other writer records the running call's result first, on the session as stored.
        stored: Session = other.get_session(accepted.session_id)
        turn = stored.current_turn
        assert turn is not None
        [call] = turn.calls.values()
        assert call.started and not call.done
        stored.complete_tool(turn_id=turn.turn_id, tool_use_id=call.tool_use_id, name=call.name, output=ELSEWHERE,
                             is_error=False, duration_ms=1.0, replayed=False)
        _record(other, stored)
        (repo / "go").touch()  # now the runner's own result comes, for a version the store already holds

        view = await wait_turn(nc, accepted.session_id, accepted.turn_id, timeout=30)
        [done] = view.turns
        assert done.outcome is not None and done.outcome.kind == "end_turn", done.outcome
        assert done.messages == ["The check ran."] and done.model_calls == 2
        # The result is the one recorded first; the runner's was not recorded on top of it, nor an error.
        [result] = done.tool_calls
        assert result.output == ELSEWHERE and not result.is_error
        # The model was asked for its next step once, after the recorded result.
        assert len([r for r in scripted.requests if r.key == "pulsing:two-writers"]) == 2
        # What the runner holds is what the store holds (once its last save, maybe in a worker thread, is done).
        async with asyncio.timeout(10):
            while runner_on.sessions[accepted.session_id].version != other.get_session(accepted.session_id).version:
                await asyncio.sleep(0.02)
        topics = _topics(other, accepted.session_id)
        assert topics.count("ToolCompleted") == 1 and "ErrorRecorded" not in topics, topics
        assert topics[-1] == "TurnCompleted", topics
    finally:
        other.close()


async def test_a_command_beaten_by_another_writer_is_decided_again_on_what_it_recorded(
        nc, runner_on: AgentRunner, repo: Path, store: Settings) -> None:
    other = SessionApplication(env=event_store_env(store, "agent_runner"))
    try:
        accepted = await start_session(nc, role="discussion", script="two-writers", root=repo)
        await wait_turn(nc, accepted.session_id, accepted.turn_id)
        async with asyncio.timeout(10):  # the turn's completion is in the store (saved in a worker thread maybe)
            while other.get_session(accepted.session_id).current_turn is not None:
                await asyncio.sleep(0.02)
        # The other writer closes the session; this runner has not heard of it.
        stored: Session = other.get_session(accepted.session_id)
        stored.close(reason="closed elsewhere")
        _record(other, stored)

        # The message is decided again on the session as recorded: closed, so a conflict saying so, not a failure.
        with pytest.raises(RemoteError) as refused:
            await request(nc, subjects.request(RUNNER, "send_message"),
                          SendMessage(session_id=accepted.session_id, text="One more thing."), TurnAccepted)
        assert refused.value.code == "conflict" and "closed elsewhere" in refused.value.reply.message
        assert runner_on.sessions[accepted.session_id].closed
        assert [e.topic.rsplit(".", 1)[-1] for e in other.recorder.select_events(uuid.UUID(accepted.session_id))
                ][-1] == "Closed"
    finally:
        other.close()
