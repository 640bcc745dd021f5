"""A start-up reads a settled workflow's or loop session's kept view instead of replaying it, and only while nothing
was recorded on it since: what it lists is what a full rebuild would list."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from autarch.contracts.workflows import CreateWorkflow
from autarch.runtime.settings import OrchestratorSettings
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.kept_views import kept_views_for
from autarch.services.orchestrator.loop.book import LoopBook
from autarch.services.orchestrator.workflow.book import WorkflowBook
from autarch.services.orchestrator.writer import BatchedWriter

from .test_snapshots import loop_history


def _env(tmp_path: Path) -> dict[str, str]:
    return {"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(tmp_path / "events.sqlite")}


class Started:
    """One orchestrator's books on the store in ``tmp_path``, their views loaded as a start-up loads them."""

    def __init__(self, tmp_path: Path, *, kept: bool = True) -> None:
        env = _env(tmp_path)
        self.app = WorkflowApplication(env=env)
        self.kept = kept_views_for(env if kept else {})
        self.writer = BatchedWriter(app=self.app, inline=True)
        self.rebuilt: list[str] = []
        self.workflows = WorkflowBook(app=self.app, writer=self.writer, kept=self.kept)
        self.loops = LoopBook(app=self.app, writer=self.writer, nc=None, settings=OrchestratorSettings(),
                              kept=self.kept)
        for book in (self.workflows.book, self.loops.book):
            rebuild = book.rebuild

            def counted(key: str, *, version: int | None = None, rebuild: Any = rebuild) -> Any:
                self.rebuilt.append(key)
                return rebuild(key, version=version)

            book.rebuild = counted  # type: ignore[method-assign]  # counts the book's rebuilds

    def load(self) -> Started:
        self.workflows.load_views()
        self.loops.load_views()
        return self

    async def __aenter__(self) -> Started:
        self.writer.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.writer.stop()
        self.kept.close()
        self.app.close()


async def _history(tmp_path: Path) -> tuple[str, str, str]:
    """A settled (abandoned) workflow, a running one, and a settled loop session, each saved through its book."""
    async with Started(tmp_path) as orch:
        ids = []
        for _ in range(2):
            wid = str(uuid.uuid4())
            await orch.workflows.create_workflow(CreateWorkflow(workflow_id=wid, title="t", request="r",
                                                                repo=str(tmp_path)))
            ids.append(wid)
        await orch.workflows.change(ids[0], lambda w: w.abandon("no longer wanted"))
        session, steps = loop_history(4)
        sid = str(session.id)
        await orch.loops.book.save(sid, session)
        for step in steps:
            await orch.loops.change(sid, step)
        assert (await orch.loops.read(sid)).settled
    return ids[0], ids[1], sid


async def test_a_start_up_lists_settled_aggregates_from_their_kept_views_as_a_full_rebuild_would(tmp_path):
    settled, running, _ = await _history(tmp_path)
    async with Started(tmp_path, kept=False) as full:
        full.load()
    async with Started(tmp_path) as orch:
        orch.load()
        assert orch.rebuilt == [running]  # the settled workflow and session were not replayed
        assert (orch.workflows.from_kept, orch.loops.from_kept) == (1, 1)
        assert orch.workflows.unsettled == [running] and orch.loops.unsettled == []
        assert list(orch.workflows.views) == list(full.workflows.views) == [settled, running]
        assert orch.workflows.views == full.workflows.views
        assert orch.loops.views == full.loops.views


async def test_anything_recorded_after_a_kept_view_sends_its_aggregate_back_to_the_rebuild(tmp_path):
    settled, running, _ = await _history(tmp_path)
    # Another writer of the store (a second orchestrator, a crash before the view was kept) records an event.
    other = WorkflowApplication(env=_env(tmp_path))
    try:
        wf = other.get_workflow(settled)
        wf.record_error(stage=wf.stage, message="recorded after its view was kept")
        other.save(wf)
    finally:
        other.close()
    async with Started(tmp_path) as orch:
        orch.load()
        assert sorted(orch.rebuilt) == sorted([settled, running])
        assert orch.workflows.views[settled].last_error == "recorded after its view was kept"
    async with Started(tmp_path) as orch:  # and its view, kept again at that start, serves the next
        orch.load()
        assert orch.rebuilt == [running]
        assert orch.workflows.views[settled].last_error == "recorded after its view was kept"


@pytest.mark.parametrize("damage", ["other_shape", "unreadable", "table_gone"])
async def test_a_view_kept_by_other_code_or_damaged_is_not_taken(tmp_path, damage: str):
    settled, running, session = await _history(tmp_path)
    db = sqlite3.connect(tmp_path / "events.sqlite")
    with db:
        if damage == "other_shape":
            db.execute("UPDATE kept_views SET shape='earlier code'")
        elif damage == "unreadable":
            db.execute("UPDATE kept_views SET view=x'7b2262726f6b656e'")
        else:
            db.execute("DROP TABLE kept_views")
    db.close()
    async with Started(tmp_path, kept=False) as full:
        full.load()
    async with Started(tmp_path) as orch:
        orch.load()
        assert sorted(orch.rebuilt) == sorted([settled, running, session])
        assert orch.workflows.views == full.workflows.views and orch.loops.views == full.loops.views
