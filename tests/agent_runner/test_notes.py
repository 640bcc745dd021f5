"""A note the session takes with take_note reaches the next turn's request.

take_note goes from the runner to the tools service and on to the orchestrator, which stores it in
the workflow; so the real orchestrator runs here too (recording commands only, not driving the
workflow: this test drives the session itself).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from autarch.contracts import subjects
from autarch.contracts.agents import SendMessage, TurnAccepted
from autarch.contracts.workflows import CreateWorkflow, GetArtifacts, WorkflowArtifacts, WorkflowView
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.service import start as start_orchestrator

from .conftest import RUNNER, start_session, wait_turn
from .scenarios import NOTE


@pytest.fixture
async def orchestrator(nc, tmp_path: Path) -> AsyncIterator[None]:
    stop = await start_orchestrator(nc, Settings(data_dir=str(tmp_path / "orchestrator"), drive_workflows=False))
    yield
    await stop()


async def test_a_note_taken_in_one_turn_is_injected_into_the_next(nc, runner, repo, scripted, orchestrator):
    workflow_id = str(uuid.uuid4())
    await request(nc, subjects.request("orchestrator", "create_workflow"),
                  CreateWorkflow(workflow_id=workflow_id, title="Greet", request="Greet the world", repo=str(repo)),
                  WorkflowView)
    accepted = await start_session(nc, role="research", script="note-taker", root=repo, workflow_id=workflow_id,
                                   notes=["The stage started with this note."])
    view = await wait_turn(nc, accepted.session_id, accepted.turn_id)
    [call] = view.turns[0].tool_calls
    assert (call.name, call.is_error, call.output) == ("take_note", False, '{"success":true}'), call
    artifacts = await request(nc, subjects.request("orchestrator", "get_artifacts"),
                              GetArtifacts(workflow_id=workflow_id), WorkflowArtifacts)
    assert [(n.note, n.session_id) for n in artifacts.notes] == [(NOTE, accepted.session_id)]

    follow = await request(nc, subjects.request(RUNNER, "send_message"),
                           SendMessage(session_id=accepted.session_id, text="What do you know so far?"), TurnAccepted)
    view = await wait_turn(nc, accepted.session_id, follow.turn_id)
    assert view.turns[1].messages == ["The note is in front of me."]
    assert view.notes == ["The stage started with this note.", NOTE]
    body = next(r.body for r in reversed(scripted.requests) if r.key == "research:note-taker" and r.step == 2)
    *_, notes, text = body["messages"][-1]["content"]
    assert text["text"] == "What do you know so far?"
    assert notes["text"].startswith("<stage-notes>")
    assert "- The stage started with this note.\n" in notes["text"] and f"- {NOTE}\n" in notes["text"]
    # Turn 1's opening had only the stage's note: the session took its own during that turn.
    assert NOTE not in body["messages"][0]["content"][0]["text"]
