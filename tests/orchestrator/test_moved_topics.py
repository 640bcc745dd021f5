"""Events recorded before the orchestrator's aggregates moved into their contexts' packages still load.

A stored event names its class by module (``autarch.services.orchestrator.domainmodel:Workflow.Created``): users'
stores keep those names for good. Here a store is written with today's classes, its topics rewritten to the
modules the aggregates lived in before, and opened again: every aggregate is listed, rebuilt, changed on top of
its old events, and relayed as before.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from autarch.contracts.events import LoopStarted, MailPosted, SwarmStarted, WorkflowCreated
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.loop.model import LoopSession
from autarch.services.orchestrator.mail.model import Mailbox
from autarch.services.orchestrator.swarm.model import Swarm
from autarch.services.orchestrator.wire import WireEvents
from autarch.services.orchestrator.workflow.model import Workflow

EARLIER = {
    "autarch.services.orchestrator.workflow.model:": "autarch.services.orchestrator.domainmodel:",
    "autarch.services.orchestrator.loop.model:": "autarch.services.orchestrator.loop_model:",
    "autarch.services.orchestrator.swarm.model:": "autarch.services.orchestrator.swarm_model:",
    "autarch.services.orchestrator.mail.model:": "autarch.services.orchestrator.mail_model:",
}
AT = "2026-11-25T09:00:00+00:00"


def _app(path: Path) -> WorkflowApplication:
    return WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(path)})


def _record_everything(path: Path) -> tuple[str, str]:
    wid, sid = str(uuid.uuid4()), str(uuid.uuid4())
    app = _app(path)
    try:
        workflow = Workflow(workflow_id=wid, title="t", request="r", repo="/r", base_branch="main", branch=None,
                            script=None)
        workflow.record_error(stage="scoping", message="first")
        session = LoopSession(session_id=sid, project_name="p", project_path="/p", goal="g", max_iterations=3,
                              anchor_turn_id=None, branch_name="autarch/loop-x", base_branch="main",
                              context_strategy="prefetch", notify=[], created_by="api", script=None, created_at=AT,
                              max_tokens=None, max_cost_usd=None, status="pending")
        swarm = Swarm(workflow_id=wid, mode="swarm", max_workers=1, at=AT,
                      beads=[{"id": "b1", "title": "b1", "files": ["a.py"], "verify": ["true"]}])
        mailbox = Mailbox(epic_id=wid)
        mailbox.post(sender="AmberFalcon", to=["coordinator"], subject="Hi", body_md="Ready.", at=AT)
        app.save(workflow, session, swarm, mailbox)
    finally:
        app.close()
    return wid, sid


def _rewrite_to_earlier_topics(path: Path) -> int:
    """Give every stored event the topic an earlier version stored it under; how many were rewritten."""
    rewritten = 0
    with sqlite3.connect(path) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if "topic" not in {col[1] for col in db.execute(f"PRAGMA table_info({table})")}:
                continue
            for now, before in EARLIER.items():
                rewritten += db.execute(f"UPDATE {table} SET topic = replace(topic, ?, ?) WHERE topic LIKE ?",
                                        (now, before, f"{now}%")).rowcount
    return rewritten


def test_aggregates_recorded_under_their_earlier_modules_still_load(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite"
    wid, sid = _record_everything(path)
    assert _rewrite_to_earlier_topics(path) >= 5

    app = _app(path)
    try:
        assert list(app.workflow_ids()) == [wid]
        assert list(app.loop_ids()) == [sid]
        assert list(app.swarm_workflow_ids()) == [wid]
        workflow = app.get_workflow(wid)
        assert (workflow.title, workflow.last_error, workflow.version) == ("t", "first", 2)
        assert app.get_loop(sid).goal == "g"
        assert list(app.get_swarm(wid).beads) == ["b1"]
        assert app.get_mailbox(wid).messages["m1"].subject == "Hi"

        # A change lands on top of the old events; the store then holds both spellings, and both load.
        workflow.record_error(stage="scoping", message="second")
        app.save(workflow)
        assert (app.get_workflow(wid).last_error, app.get_workflow(wid).version) == ("second", 3)
        assert list(app.workflow_ids()) == [wid]

        wire = WireEvents(app)
        published = [wire(app.mapper.to_domain_event(n)) for n in app.recorder.select_notifications(start=1,  # type: ignore[arg-type]  # DomainEvents
                                                                                                      limit=100)]
        kinds = {type(e) for e in published if e is not None}
        assert {WorkflowCreated, LoopStarted, SwarmStarted, MailPosted} <= kinds
    finally:
        app.close()
