"""The mail verbs over NATS against the real orchestrator: send, reply, inbox, topic, pending, delivery, the
notice to each recipient, ``mail:posted`` on the event stream, and a restart that keeps everything."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest
from nats.aio.msg import Msg

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import AnyEvent, MailPosted
from autarch.contracts.mail import (
    FetchInbox,
    FetchTopic,
    GetMail,
    ListMail,
    MailDelivered,
    MailList,
    MailMessage,
    MarkDelivered,
    PendingMail,
    ReplyMail,
    SendMail,
    epic_topic,
)
from autarch.runtime.errors import RemoteError
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.service import start as start_orchestrator

from .conftest import ask


def send(epic: str, sender: str, to: list[str], subject: str, body: str = "…", **fields) -> SendMail:
    return SendMail(project_key=epic, sender_name=sender, to=to, subject=subject, body_md=body, **fields)


async def test_send_reply_inbox_topic(nc, orchestrator, epic) -> None:
    m1 = await ask(nc, "send_mail", send(epic, "AmberFalcon", ["coordinator"], "File conflict on b2",
                                         thread_id=epic, topic=epic_topic(epic)), MailMessage)
    assert (m1.message_id, m1.epic_id, m1.thread_id, m1.topic) == ("m1", epic, epic, f"epic-{epic}")
    m2 = await ask(nc, "reply_mail", ReplyMail(project_key=epic, message_id="m1", sender_name="coordinator",
                                               body_md="Take b3."), MailMessage)
    assert (m2.to, m2.reply_to, m2.subject) == (["AmberFalcon"], "m1", "Re: File conflict on b2")
    await ask(nc, "send_mail", send(epic, "coordinator", ["CopperHeron"], "Elsewhere", topic="misc"), MailMessage)

    inbox = await ask(nc, "fetch_inbox", FetchInbox(project_key=epic, agent_name="AmberFalcon",
                                                    topic=epic_topic(epic)), MailList)
    assert [m.message_id for m in inbox.messages] == ["m2"]
    timeline = await ask(nc, "fetch_topic", FetchTopic(project_key=epic, topic_name=epic_topic(epic)), MailList)
    assert [m.message_id for m in timeline.messages] == ["m1", "m2"]
    everything = await ask(nc, "list_mail", ListMail(epic_id=epic), MailList)
    assert [m.message_id for m in everything.messages] == ["m1", "m2", "m3"]
    mine = await ask(nc, "list_mail", ListMail(epic_id=epic, agent="AmberFalcon"), MailList)
    assert [m.message_id for m in mine.messages] == ["m1", "m2"]
    misc = await ask(nc, "list_mail", ListMail(epic_id=epic, topic="misc"), MailList)
    assert [m.message_id for m in misc.messages] == ["m3"]
    assert (await ask(nc, "get_mail", GetMail(epic_id=epic, message_id="m3"), MailMessage)).subject == "Elsewhere"


async def test_pending_and_mark_delivered(nc, orchestrator, epic) -> None:
    await ask(nc, "send_mail", send(epic, "coordinator", ["w1", "w2"], "Go"), MailMessage)
    await ask(nc, "send_mail", send(epic, "w2", ["w1"], "Psst"), MailMessage)
    pending = await ask(nc, "pending_mail", PendingMail(epic_id=epic, agent_name="w1"), MailList)
    assert [m.message_id for m in pending.messages] == ["m1", "m2"]
    marked = await ask(nc, "mark_delivered", MarkDelivered(epic_id=epic, agent_name="w1", message_ids=["m1", "m2"],
                                                           session_id="s1"), MailDelivered)
    assert marked.marked == ["m1", "m2"]
    again = await ask(nc, "mark_delivered", MarkDelivered(epic_id=epic, agent_name="w1", message_ids=["m1"]),
                      MailDelivered)
    assert again.marked == []
    assert (await ask(nc, "pending_mail", PendingMail(epic_id=epic, agent_name="w1"), MailList)).messages == []
    assert len((await ask(nc, "pending_mail", PendingMail(epic_id=epic, agent_name="w2"), MailList)).messages) == 1
    # An agent fetching its own inbox (a session given) has been given what it read.
    await ask(nc, "fetch_inbox", FetchInbox(project_key=epic, agent_name="w2", session_id="s2"), MailList)
    assert (await ask(nc, "pending_mail", PendingMail(epic_id=epic, agent_name="w2"), MailList)).messages == []
    got = await ask(nc, "get_mail", GetMail(epic_id=epic, message_id="m1"), MailMessage)
    assert got.delivered_to == ["w1", "w2"]


async def test_idempotency_key_posts_once(nc, orchestrator, epic) -> None:
    first = await ask(nc, "send_mail", send(epic, "w1", ["coordinator"], "Hi", idempotency_key="s:tu1"), MailMessage)
    again = await ask(nc, "send_mail", send(epic, "w1", ["coordinator"], "Hi", idempotency_key="s:tu1"), MailMessage)
    assert first.message_id == again.message_id == "m1"
    assert len((await ask(nc, "list_mail", ListMail(epic_id=epic), MailList)).messages) == 1


async def test_errors(nc, orchestrator, epic) -> None:
    with pytest.raises(RemoteError) as unknown:
        await ask(nc, "get_mail", GetMail(epic_id=epic, message_id="m1"), MailMessage)
    assert unknown.value.code == ErrorCode.NOT_FOUND
    with pytest.raises(RemoteError) as no_original:
        await ask(nc, "reply_mail", ReplyMail(project_key=epic, message_id="m7", sender_name="w1", body_md="?"),
                  MailMessage)
    assert no_original.value.code == ErrorCode.NOT_FOUND
    with pytest.raises(RemoteError) as bad_epic:
        await ask(nc, "send_mail", send("not-an-epic", "w1", ["coordinator"], "Hi"), MailMessage)
    assert bad_epic.value.code == ErrorCode.BAD_REQUEST
    with pytest.raises(RemoteError) as bad_name:
        await ask(nc, "send_mail", send(epic, "w1", ["two words"], "Hi"), MailMessage)
    assert bad_name.value.code == ErrorCode.BAD_REQUEST
    # Nothing was recorded by the refused commands.
    assert (await ask(nc, "list_mail", ListMail(epic_id=epic), MailList)).messages == []


async def test_notice_to_each_recipient_and_mail_posted_on_the_stream(nc, orchestrator, epic) -> None:
    notices: list[tuple[str, dict]] = []
    got = asyncio.Event()

    async def heard(msg: Msg) -> None:
        notices.append((msg.subject, json.loads(msg.data)))
        if len(notices) == 2:
            got.set()

    sub = await nc.subscribe(subjects.mail(epic, "*"), cb=heard)
    js = nc.jetstream()
    events = await js.subscribe(subjects.run_events(epic), ordered_consumer=True)
    try:
        await ask(nc, "send_mail", send(epic, "coordinator", ["w1", "w2"], "Go", body="Both."), MailMessage)
        await asyncio.wait_for(got.wait(), 5)
        assert sorted(s for s, _ in notices) == [subjects.mail(epic, "w1"), subjects.mail(epic, "w2")]
        assert notices[0][1]["message_id"] == "m1" and notices[0][1]["subject"] == "Go"
        msg = await events.next_msg(timeout=5)
        event = msgspec.json.decode(msg.data, type=AnyEvent)
        assert isinstance(event, MailPosted) and event.workflow_id == epic
        assert (event.message.message_id, event.message.to, event.message.body_md) == ("m1", ["w1", "w2"], "Both.")
        assert subjects.event_type_from_subject(msg.subject) == "mail:posted"
        assert msg.headers and msg.headers.get("Autarch-Event") == "mail:posted"
    finally:
        await sub.unsubscribe()
        await events.unsubscribe()


async def test_mail_survives_an_orchestrator_restart(nc, tmp_path: Path, epic) -> None:
    settings = Settings(data_dir=str(tmp_path / "orch"), drive_workflows=False)
    stop = await start_orchestrator(nc, settings)
    try:
        await ask(nc, "send_mail", send(epic, "coordinator", ["w1"], "Before"), MailMessage)
        await ask(nc, "mark_delivered", MarkDelivered(epic_id=epic, agent_name="w1", message_ids=["m1"]),
                  MailDelivered)
    finally:
        await stop()
    stop = await start_orchestrator(nc, settings)
    try:
        again = await ask(nc, "get_mail", GetMail(epic_id=epic, message_id="m1"), MailMessage)
        assert (again.subject, again.delivered_to) == ("Before", ["w1"])
        after = await ask(nc, "send_mail", send(epic, "w1", ["coordinator"], "After"), MailMessage)
        assert after.message_id == "m2"
    finally:
        await stop()
