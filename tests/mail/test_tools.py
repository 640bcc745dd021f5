"""The mail tools of a swarm worker through the real tools executor, forwarded over NATS to the real
orchestrator: the seed's parameters, the sender always the worker itself, and the error shapes."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from autarch.contracts.mail import GetMail, ListMail, MailList, MailMessage, ReplyMail, epic_topic
from autarch.contracts.tools import ToolCall
from autarch.runtime.settings import Settings
from autarch.services.tools.executor import ToolExecutor
from autarch.services.tools.service import build_executor

from .conftest import ask


@pytest.fixture
async def executor(nc, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
    executor = build_executor(Settings(data_dir=str(tmp_path / "tools"), request_timeout=5.0, restart_grace=0.2),
                              nc=nc, grep_workers=0)
    yield executor
    executor.close()


async def call(executor: ToolExecutor, tmp_path: Path, tool: str, arguments: dict[str, Any], *,
               epic: str | None, holder: str | None, session: str = "s-1") -> tuple[dict[str, Any], bool]:
    arguments = {"reason": "coordination", **arguments}
    result = await executor.call(ToolCall(session_id=session, tool_call_id=uuid.uuid4().hex, role="pulsing",
                                          root=str(tmp_path), tool=tool, arguments=arguments, run_id=epic,
                                          lease_holder=holder))
    return json.loads(result.content), result.is_error


async def test_a_worker_sends_replies_and_reads(nc, orchestrator, epic, executor, tmp_path) -> None:
    sent, err = await call(executor, tmp_path, "send_message", {
        "project_key": str(tmp_path), "sender_name": "AmberFalcon", "to": ["coordinator"], "thread_id": epic,
        "topic": epic_topic(epic), "subject": "Startup", "body_md": "AGENTS.md read; pulse:executing is loading."},
        epic=epic, holder="AmberFalcon")
    assert not err and sent == {"success": True, "message_id": "m1", "thread_id": epic, "topic": epic_topic(epic)}
    got = await ask(nc, "get_mail", GetMail(epic_id=epic, message_id="m1"), MailMessage)
    assert (got.sender, got.to, got.subject) == ("AmberFalcon", ["coordinator"], "Startup")

    # The coordinator answers; the worker reads its inbox (the seed's call) and the topic.
    await ask(nc, "reply_mail", ReplyMail(
        project_key=epic, message_id="m1", sender_name="coordinator", body_md="Welcome; start with b1."), MailMessage)
    inbox, err = await call(executor, tmp_path, "fetch_inbox", {
        "project_key": str(tmp_path), "agent_name": "AmberFalcon", "topic": epic_topic(epic)},
        epic=epic, holder="AmberFalcon")
    assert not err and inbox["agent_name"] == "AmberFalcon"
    assert [(m["message_id"], m["from"], m["body_md"]) for m in inbox["messages"]] == [
        ("m2", "coordinator", "Welcome; start with b1.")]
    timeline, err = await call(executor, tmp_path, "fetch_topic", {"topic_name": epic_topic(epic)}, epic=epic,
                               holder="AmberFalcon")
    assert not err and [m["message_id"] for m in timeline["messages"]] == ["m1", "m2"]
    # What it fetched counts as delivered: the runner will not push it again.
    assert (await ask(nc, "get_mail", GetMail(epic_id=epic, message_id="m2"), MailMessage)).delivered_to == [
        "AmberFalcon"]

    replied, err = await call(executor, tmp_path, "reply_message", {"message_id": "m2", "body_md": "On it."},
                              epic=epic, holder="AmberFalcon")
    assert not err and replied == {"success": True, "message_id": "m3", "thread_id": epic, "to": ["coordinator"]}


async def test_a_repeated_tool_call_posts_once(nc, orchestrator, epic, executor, tmp_path) -> None:
    args = {"reason": "Report the bead", "to": ["coordinator"], "subject": "Completed b1", "body_md": "Commit abc."}
    first = await executor.call(ToolCall(session_id="s-1", tool_call_id="tu-1", role="pulsing", root=str(tmp_path),
                                         tool="send_message", arguments=args, run_id=epic, lease_holder="w1"))
    again = await executor.call(ToolCall(session_id="s-1", tool_call_id="tu-1", role="pulsing", root=str(tmp_path),
                                         tool="send_message", arguments=args, run_id=epic, lease_holder="w1"))
    assert json.loads(first.content)["message_id"] == json.loads(again.content)["message_id"] == "m1"
    assert len((await ask(nc, "list_mail", ListMail(epic_id=epic), MailList)).messages) == 1


async def test_error_shapes(nc, orchestrator, epic, executor, tmp_path) -> None:
    base = {"to": ["coordinator"], "subject": "Hi", "body_md": "x"}
    no_worker, err = await call(executor, tmp_path, "send_message", base, epic=None, holder=None)
    assert err and no_worker["success"] is False and "only available to swarm workers" in no_worker["error"]
    no_holder, err = await call(executor, tmp_path, "fetch_inbox", {}, epic=epic, holder=None)
    assert err and set(no_holder) == {"error"} and "swarm workers" in no_holder["error"]

    other = str(uuid.uuid4())
    wrong, err = await call(executor, tmp_path, "send_message", {**base, "project_key": other}, epic=epic,
                            holder="w1")
    assert err and wrong["success"] is False and "names another epic" in wrong["error"]
    wrong_topic, err = await call(executor, tmp_path, "fetch_topic",
                                  {"topic_name": "t", "project_key": f"epic-{other}"}, epic=epic, holder="w1")
    assert err and "names another epic" in wrong_topic["error"]

    spoof, err = await call(executor, tmp_path, "send_message", {**base, "sender_name": "coordinator"}, epic=epic,
                            holder="w1")
    assert err and spoof == {"success": False, "error": "You can only send as yourself: your agent mail name is "
                                                         "'w1', not 'coordinator'"}
    peek, err = await call(executor, tmp_path, "fetch_inbox", {"agent_name": "w2"}, epic=epic, holder="w1")
    assert err and "only read your own inbox" in peek["error"]

    missing, err = await call(executor, tmp_path, "reply_message", {"message_id": "m9", "body_md": "?"}, epic=epic,
                              holder="w1")
    assert err and missing == {"success": False, "error": "Message not found: m9"}
    bad_name, err = await call(executor, tmp_path, "send_message", {**base, "to": ["two words"]}, epic=epic,
                               holder="w1")
    assert err and bad_name["success"] is False and bad_name["error"].startswith("Could not send the message")
    unknown_arg, err = await call(executor, tmp_path, "send_message", {**base, "cc": ["x"]}, epic=epic, holder="w1")
    assert err and "cc" in json.dumps(unknown_arg)
    # None of the refused calls recorded anything.
    assert (await ask(nc, "list_mail", ListMail(epic_id=epic), MailList)).messages == []


async def test_without_an_orchestrator_the_error_says_so(nc, epic, executor, tmp_path) -> None:
    result, err = await call(executor, tmp_path, "send_message", {"to": ["coordinator"], "subject": "Hi",
                                                                   "body_md": "x"}, epic=epic, holder="w1")
    assert err and result["success"] is False and "did not answer" in result["error"]
