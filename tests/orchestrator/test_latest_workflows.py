"""The orchestrator keeps each workflow's latest state between commands: every read still answers what the store
holds, with another writer on the same store, after a refused command, a refused save, or a reader's slip."""

from __future__ import annotations

import uuid

import pytest
from eventsourcing.persistence import IntegrityError

from autarch.contracts.workflows import CreateWorkflow
from autarch.runtime.errors import ServiceFailure
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.workflow.book import WorkflowBook
from autarch.services.orchestrator.workflow.lifecycle import LifecycleError
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.writer import BatchedWriter


def _app(path) -> WorkflowApplication:
    return WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store", "SQLITE_DBNAME": str(path)})


@pytest.fixture
async def orchestrator(tmp_path):
    app = _app(tmp_path / "events.sqlite")
    writer = BatchedWriter(app=app, inline=True)
    writer.start()
    yield WorkflowBook(app=app, writer=writer)
    await writer.stop()
    app.close()


async def _create(orch: WorkflowBook, tmp_path) -> str:
    wid = str(uuid.uuid4())
    await orch.create_workflow(CreateWorkflow(workflow_id=wid, title="t", request="r", repo=str(tmp_path)))
    return wid


def _other_writer_records_error(tmp_path, wid: str, message: str) -> int:
    """A second application on the same store (another orchestrator) records an error; the new version."""
    other = _app(tmp_path / "events.sqlite")
    try:
        wf = other.get_workflow(wid)
        wf.record_error(stage=wf.stage, message=message)
        other.save(wf)
        return wf.version
    finally:
        other.close()


async def test_a_read_sees_what_another_writer_of_the_store_recorded(orchestrator, tmp_path):
    wid = await _create(orchestrator, tmp_path)
    first = await orchestrator.read(wid)
    assert (await orchestrator.read(wid)) is first  # kept: the second read did not rebuild it

    version = _other_writer_records_error(tmp_path, wid, "from the other writer")
    seen = await orchestrator.read(wid)
    assert (seen.version, seen.last_error) == (version, "from the other writer")
    assert first.last_error is None  # what a reader already held is not changed under it

    # A change made here lands on top of the other writer's event, not on the stale state.
    await orchestrator.change(wid, lambda w: w.record_error(stage=w.stage, message="here"))
    assert _app(tmp_path / "events.sqlite").get_workflow(wid).version == version + 1
    assert (await orchestrator.read(wid)).error_count == 2


async def test_a_refused_command_leaves_the_kept_state_as_recorded(orchestrator, tmp_path):
    wid = await _create(orchestrator, tmp_path)
    before = await orchestrator.read(wid)

    def half_done_then_refused(w: Workflow) -> None:
        w.record_error(stage=w.stage, message="not saved")
        raise LifecycleError("wrong_stage", "refused after a change")

    with pytest.raises(ServiceFailure):
        await orchestrator.change(wid, half_done_then_refused)
    after = await orchestrator.read(wid)
    assert (after.version, after.last_error, after.error_count) == (before.version, None, 0)


async def test_a_save_refused_by_another_writers_version_leaves_reads_on_the_store(orchestrator, tmp_path):
    wid = await _create(orchestrator, tmp_path)
    await orchestrator.read(wid)
    raced: list[int] = []

    def record_while_another_writer_wins(w: Workflow) -> None:
        # The other writer records the same next version between this command's read and its save.
        raced.append(_other_writer_records_error(tmp_path, wid, "the other writer won"))
        w.record_error(stage=w.stage, message="lost the race")

    with pytest.raises(IntegrityError):
        await orchestrator.change(wid, record_while_another_writer_wins)
    seen = await orchestrator.read(wid)
    assert (seen.version, seen.last_error, seen.error_count) == (raced[0], "the other writer won", 1)


async def test_a_reader_that_changes_its_shared_copy_does_not_leak_unsaved_state(orchestrator, tmp_path):
    wid = await _create(orchestrator, tmp_path)
    shared = await orchestrator.read(wid)
    shared.record_error(stage=shared.stage, message="never saved")  # a slip: changes go through change()
    again = await orchestrator.read(wid)
    assert again is not shared
    assert (again.version, again.last_error) == (1, None)


async def test_an_unknown_workflow_is_not_found(orchestrator):
    with pytest.raises(ServiceFailure) as missing:
        await orchestrator.read(str(uuid.uuid4()))
    assert missing.value.code == "not_found"
