"""Mail to a worker reaches its next model call with no polling, once, and a restarted runner replays it.

Real services throughout: the orchestrator (mail verbs), the tools service, the agent runner, and the
scripted model standing in for the LLM (its recorded request bodies are what the model was sent).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import GetSession, SendMessage, SessionView, StartSession, TurnAccepted
from autarch.contracts.mail import GetMail, MailList, MailMessage, PendingMail, SendMail
from autarch.runtime.bus import connect
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.agent_runner.service import open_runner
from autarch.services.scripted_model import ScriptedModelServer
from autarch.services.tools.service import start as start_tools

from .conftest import ask

SCENARIO = {
    "description": "A worker that gets coordination mail.",
    "check_tools": False,
    "scripts": {
        "pulsing:mail": [
            {"content": [{"type": "tool_use", "name": "shell",
                          "input": {"reason": "A long check", "command": "sleep 1.2"}}]},
            {"content": [{"type": "text", "text": "Done."}]},
            {"content": [{"type": "text", "text": "Noted."}]},
        ],
    },
}
MARK = "<coordination-mail>"


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCENARIO) as server:
        yield server


@pytest.fixture
async def tools(nats_server, tmp_path: Path) -> AsyncIterator[None]:
    client = await connect(nats_server.url, name="tools")
    stop = await start_tools(client, Settings(data_dir=str(tmp_path / "tools"), restart_grace=0.2))
    yield
    await stop()
    await client.drain()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    (path / "README.md").write_text("hi\n")
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    return path


def runner_settings(data_dir: Path, model: ScriptedModelServer) -> Settings:
    return Settings(data_dir=str(data_dir), anthropic_base_url=model.base_url, model_max_retries=3,
                    request_timeout=5.0)


async def post(nc: Any, epic: str, to: str, subject: str, body: str) -> MailMessage:
    return await ask(nc, "send_mail", SendMail(project_key=epic, sender_name="coordinator", to=[to],
                                               subject=subject, body_md=body), MailMessage)


async def session(nc: Any, sid: str) -> SessionView:
    return await request(nc, subjects.request("agent_runner", "get_session"), GetSession(session_id=sid),
                         SessionView)


async def wait_turn(nc: Any, sid: str, turn_id: str, timeout: float = 20.0) -> SessionView:
    deadline = time.monotonic() + timeout
    while True:
        view = await session(nc, sid)
        if any(t.turn_id == turn_id and t.outcome is not None for t in view.turns):
            return view
        assert time.monotonic() < deadline, view
        await asyncio.sleep(0.02)


def mail_texts(body: dict[str, Any]) -> list[str]:
    return [b["text"] for m in body["messages"] if m["role"] == "user" for b in m["content"]
            if b.get("type") == "text" and MARK in b.get("text", "")]


async def request_at(model: ScriptedModelServer, sid: str, step: int, timeout: float = 20.0) -> tuple[Any, float]:
    """The body of the session's request at ``step`` and when it was first seen (``perf_counter``)."""
    deadline = time.monotonic() + timeout
    while True:
        for r in list(model.requests):  # one worker session per test runs this script
            if r.key == "pulsing:mail" and r.step == step and r.outcome == "ok":
                return r.body, time.perf_counter()
        assert time.monotonic() < deadline, f"no request at step {step}"
        await asyncio.sleep(0.002)


async def test_mail_is_pushed_into_the_next_model_call_once_and_survives_a_restart(
        nc, orchestrator, tools, model, repo, tmp_path) -> None:
    epic, holder, sid = str(uuid.uuid4()), "AmberFalcon", str(uuid.uuid4())
    data = tmp_path / "runner"
    model.requests.clear()
    runner, stop = await open_runner(nc, runner_settings(data, model))
    try:
        accepted = await request(nc, subjects.request("agent_runner", "start_session"), StartSession(
            session_id=sid, role="pulsing", root=str(repo), kickoff="Work on b1.", script="mail",
            run_id=epic, lease_holder=holder), TurnAccepted)
        await request_at(model, sid, 0)  # the first call is out: the worker now runs its long shell command
        posted = time.perf_counter()
        m1 = await post(nc, epic, holder, "Startup hint", "Check b3 first; CopperHeron holds shapes/.")
        body, seen = await request_at(model, sid, 1)
        noticed = runner.mail.noticed_at[(epic, holder)]
        print(f"\nmail push: post → the worker's next model call carrying it: {(seen - posted) * 1000:.1f} ms "
              f"(post → notice at the runner: {(noticed - posted) * 1000:.1f} ms; the rest is the running tool "
              "call the model call waits for)")
        [text] = mail_texts(body)
        assert "From: coordinator" in text and "Subject: Startup hint" in text and "CopperHeron holds" in text
        # It follows the shell's result in the same user message, after the tool_result.
        last = body["messages"][-1]
        assert last["role"] == "user" and last["content"][0]["type"] == "tool_result"
        await wait_turn(nc, sid, accepted.turn_id)
        got = await ask(nc, "get_mail", GetMail(epic_id=epic, message_id=m1.message_id), MailMessage)
        assert got.delivered_to == [holder]
        assert (await ask(nc, "pending_mail", PendingMail(epic_id=epic, agent_name=holder), MailList)).messages == []
    finally:
        await stop()

    # Posted while no runner listens: it waits in the mailbox.
    await post(nc, epic, holder, "While you were away", "b2 landed.")
    runner, stop = await open_runner(nc, runner_settings(data, model))
    try:
        follow = await request(nc, subjects.request("agent_runner", "send_message"),
                               SendMessage(session_id=sid, text="Carry on."), TurnAccepted)
        await wait_turn(nc, sid, follow.turn_id)
        body, _ = await request_at(model, sid, 2)
        texts = mail_texts(body)
        # The first message once (replayed from the session's history), the second one new: nothing twice.
        assert len(texts) == 2 and "Startup hint" in texts[0] and "While you were away" in texts[1]
        assert (await ask(nc, "pending_mail", PendingMail(epic_id=epic, agent_name=holder), MailList)).messages == []
        assert runner.sessions[sid].mail_received == {"m1", "m2"}
    finally:
        await stop()


async def test_a_session_that_is_no_worker_is_not_touched(nc, orchestrator, tools, model, repo, tmp_path) -> None:
    epic, sid = str(uuid.uuid4()), str(uuid.uuid4())
    await post(nc, epic, "AmberFalcon", "Hi", "Not for a plain pulse.")
    runner, stop = await open_runner(nc, runner_settings(tmp_path / "runner", model))
    try:
        accepted = await request(nc, subjects.request("agent_runner", "start_session"), StartSession(
            session_id=sid, role="pulsing", root=str(repo), kickoff="Work.", script="mail", run_id=epic),
            TurnAccepted)
        await wait_turn(nc, sid, accepted.turn_id)
        assert runner.sessions[sid].mail_received == set()
        assert len((await ask(nc, "pending_mail", PendingMail(epic_id=epic, agent_name="AmberFalcon"),
                              MailList)).messages) == 1
    finally:
        await stop()
