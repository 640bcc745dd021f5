"""An epic's mailbox is kept between commands: a post or a read does not rebuild it from the store, and every read
still answers what the store holds."""

from __future__ import annotations

import uuid

import msgspec
import pytest

from autarch.runtime.snapshots import Snapshots
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.mail.book import MailBook
from autarch.services.orchestrator.mail.model import Mailbox, mailbox_id_for
from autarch.services.orchestrator.writer import BatchedWriter


def _app(path) -> WorkflowApplication:
    return WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(path)})


@pytest.fixture
async def mail(tmp_path):
    app = _app(tmp_path / "events.sqlite")
    writer = BatchedWriter(app=app, inline=True)
    writer.start()
    yield MailBook(app=app, writer=writer)
    await writer.stop()
    app.close()


async def test_posts_and_reads_do_not_rebuild_the_mailbox(mail: MailBook, tmp_path, monkeypatch: pytest.MonkeyPatch):
    epic = str(uuid.uuid4())
    for n in range(20):
        await mail.post(epic, "coordinator", ["w1"], f"Completed b{n}", "done", key=f"k{n}")
    rebuilds: list[object] = []
    load = Snapshots.load  # every rebuild from the store goes through it (``Book.rebuild``)

    def counted(self: Snapshots, kind, aggregate_id, **kwargs):  # type: ignore[no-untyped-def]  # Snapshots.load's
        if self is mail.app.snapshotter:  # this orchestrator's, not the other writer's below
            rebuilds.append(aggregate_id)
        return load(self, kind, aggregate_id, **kwargs)

    monkeypatch.setattr(Snapshots, "load", counted)
    for n in range(20, 40):
        await mail.post(epic, "coordinator", ["w1"], f"Completed b{n}", "done", key=f"k{n}")
    assert len(await mail.read(epic)) == 40
    assert rebuilds == []

    # Another writer of the store posts: the next read sees it (rebuilt once, then kept again).
    other = _app(tmp_path / "events.sqlite")
    try:
        mailbox = other.load(Mailbox, mailbox_id_for(epic))
        mailbox.post(sender="w2", to=["coordinator"], subject="from the other writer", body_md="hi")
        other.save(mailbox)
    finally:
        other.close()
    messages = await mail.read(epic)
    assert [m.subject for m in messages][-1] == "from the other writer" and len(messages) == 41
    assert len(rebuilds) == 1


def test_a_copy_for_a_command_leaves_the_kept_mailbox_as_it_was():
    epic = str(uuid.uuid4())
    kept = Mailbox(epic_id=epic)
    for n in range(5):
        kept.post(sender="coordinator", to=["w1", "w2"], subject=f"s{n}", body_md="b", key=f"k{n}")
    kept.collect_events()
    before = msgspec.json.encode(list(kept.messages.values())), dict(kept.keys)
    copy = kept.copy_for_change()
    # The messages are shared, not copied: a copy costs the same whatever the mailbox holds.
    assert all(copy.messages[m] is kept.messages[m] for m in kept.messages)
    copy.deliver(agent="w1", message_ids=["m1", "m2"])
    copy.post(sender="w1", to=["coordinator"], subject="late", body_md="b", key="k9")
    assert (msgspec.json.encode(list(kept.messages.values())), dict(kept.keys)) == before
    assert copy.messages["m1"].delivered_to == ["w1"] and kept.messages["m1"].delivered_to == []
    assert len(copy.messages) == 6 and len(kept.messages) == 5
