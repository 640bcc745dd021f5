"""The Mailbox aggregate: its rules, and that a replay of its events equals the state it recorded."""

from __future__ import annotations

import uuid

import pytest
from eventsourcing.application import Application

from autarch.contracts.mail import epic_topic
from autarch.runtime.aggregates import project
from autarch.services.orchestrator.mail.model import Mailbox, MailError, mailbox_id_for

EPIC = "5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13"


def test_a_post_gets_the_epic_thread_and_topic_by_default() -> None:
    box = Mailbox(epic_id=EPIC)
    m = box.post(sender="AmberFalcon", to=["coordinator", "coordinator"], subject="Hi", body_md="Ready.")
    assert (m.message_id, m.thread_id, m.topic, m.to) == ("m1", EPIC, epic_topic(EPIC), ["coordinator"])
    assert box.id == mailbox_id_for(EPIC) == mailbox_id_for(EPIC.upper())


def test_a_reply_goes_to_the_sender_in_the_same_thread_and_topic() -> None:
    box = Mailbox(epic_id=EPIC)
    box.post(sender="AmberFalcon", to=["coordinator"], subject="File conflict on b2", body_md="Need x.",
             topic="epic-x", thread_id="t-1")
    r = box.reply(message_id="m1", sender="coordinator", body_md="Take b3 meanwhile.")
    assert (r.to, r.thread_id, r.topic, r.subject, r.reply_to) == (["AmberFalcon"], "t-1", "epic-x",
                                                                    "Re: File conflict on b2", "m1")
    again = box.reply(message_id="m2", sender="AmberFalcon", body_md="Thanks.")
    assert (again.to, again.subject) == (["coordinator"], "Re: File conflict on b2")


def test_a_reply_to_an_unknown_message_records_nothing() -> None:
    box = Mailbox(epic_id=EPIC)
    before = box.version
    with pytest.raises(MailError) as refused:
        box.reply(message_id="m9", sender="coordinator", body_md="?")
    assert refused.value.code == "not_found" and box.version == before


def test_a_key_makes_a_repeat_answer_the_first_message() -> None:
    box = Mailbox(epic_id=EPIC)
    first = box.post(sender="coordinator", to=["w1"], subject="Start", body_md="Go.", key="ack:w1")
    again = box.post(sender="coordinator", to=["w1"], subject="Start", body_md="Go.", key="ack:w1")
    assert again is first and len(box.messages) == 1


def test_pending_and_delivery_per_recipient() -> None:
    box = Mailbox(epic_id=EPIC)
    box.post(sender="coordinator", to=["w1", "w2"], subject="All", body_md="Both of you.")
    box.post(sender="w2", to=["w1"], subject="Only w1", body_md="You.", topic="other")
    assert [m.message_id for m in box.pending("w1")] == ["m1", "m2"]
    assert box.deliver(agent="w1", message_ids=["m1", "m1", "m9"], session_id="s") == ["m1"]
    assert box.deliver(agent="w1", message_ids=["m1"]) == []  # once
    assert box.deliver(agent="w3", message_ids=["m1"]) == []  # not addressed to w3
    assert [m.message_id for m in box.pending("w1")] == ["m2"]
    assert [m.message_id for m in box.pending("w2")] == ["m1"]
    assert [m.message_id for m in box.inbox("w1", topic="other")] == ["m2"]
    assert [m.message_id for m in box.on_topic(epic_topic(EPIC))] == ["m1"]


def test_replay_equals_state() -> None:
    app: Application[uuid.UUID] = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    box = Mailbox(epic_id=EPIC)
    box.post(sender="w1", to=["coordinator"], subject="Startup", body_md="AGENTS.md read.", key="k1")
    box.reply(message_id="m1", sender="coordinator", body_md="Welcome.")
    box.post(sender="coordinator", to=["w1", "w2"], subject="Note", body_md="b3 is next.", topic="t")
    box.deliver(agent="w1", message_ids=["m2", "m3"], session_id=str(uuid.uuid4()))
    app.save(box)
    again = app.repository.get(box.id, projector_func=project)
    assert again.messages == box.messages and again.keys == box.keys and again.epic_id == box.epic_id
    assert again.version == box.version
    # Every intermediate version is a state the aggregate went through.
    assert list(app.repository.get(box.id, version=2, projector_func=project).messages) == ["m1"]
