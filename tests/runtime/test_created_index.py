"""Listing every aggregate of a kind reads the embedded store's index of first events, and answers exactly what a
read of the whole notification log answers."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

from autarch.runtime.aggregates import created_events, created_ids
from autarch.services.orchestrator.application import _CREATED_TOPICS, _LOOP_CREATED_TOPICS, WorkflowApplication
from autarch.services.orchestrator.workflow.model import Workflow

from ..orchestrator.test_snapshots import loop_history


class LogOnly:
    """The same recorder without its index read: what every other store does."""

    def __init__(self, recorder: Any) -> None:
        self.select_notifications = recorder.select_notifications


def _ids(recorder: Any, topics: list[str], page: int) -> list[tuple[int, str]]:
    return [(n.id, str(n.originator_id)) for n in created_events(recorder, topics, page=page)]


def test_first_events_read_through_the_index_are_those_the_log_holds_in_its_order(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite"
    app = WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(path)})
    try:
        for n in range(7):  # workflows and loop sessions interleaved, each with later events of its own
            wf = Workflow(workflow_id=str(uuid.uuid4()), title=f"t{n}", request="r", repo="/x", base_branch="main",
                          branch=None, script=None)
            wf.record_error(stage="scoping", message="later event")
            app.save(wf)
            if n % 2:
                session, steps = loop_history(1)
                for step in steps[:3]:
                    step(session)
                app.save(session)
        for topics in (_CREATED_TOPICS, _LOOP_CREATED_TOPICS, [*_CREATED_TOPICS, *_LOOP_CREATED_TOPICS]):
            for page in (1, 2, 1000):
                expected = _ids(LogOnly(app.recorder), topics, page)
                assert expected and _ids(app.recorder, topics, page) == expected
            # The ids alone (a start-up's read), from the index alone, are the same in the same order.
            assert list(created_ids(app.recorder, topics)) == [oid for _, oid in expected]
    finally:
        app.close()
    plan = sqlite3.connect(path).execute(
        "EXPLAIN QUERY PLAN SELECT rowid FROM stored_events WHERE originator_version = 1 AND topic IN (?) "
        "AND rowid >= 1 ORDER BY rowid LIMIT 10", _CREATED_TOPICS[:1]).fetchall()
    assert any("stored_events_created" in str(row) for row in plan)  # the index, not a scan of every event
    plan = sqlite3.connect(path).execute(
        "EXPLAIN QUERY PLAN SELECT originator_id FROM stored_events WHERE originator_version = 1 AND topic IN (?) "
        "ORDER BY rowid", _CREATED_TOPICS[:1]).fetchall()
    assert any("COVERING INDEX stored_events_created_ids" in str(row) for row in plan), plan  # no event's row read
