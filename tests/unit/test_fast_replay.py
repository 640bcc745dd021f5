"""``load`` (runtime/aggregates.py) rebuilds exactly what eventsourcing's repository rebuilds, at every version."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import OriginatorVersionError

from autarch.runtime.aggregates import load, project
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.domainmodel import Workflow
from tests.orchestrator.test_swarm_model import WID, diamond
from tests.orchestrator.test_workflow_domain import PLAN, RESEARCH, SCOPE, card


def _app(tmp_path: Path) -> WorkflowApplication:
    return WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store",
                                    "SQLITE_DBNAME": str(tmp_path / "events.sqlite")})


def _state(aggregate: Any) -> bytes:
    return pickle.dumps(vars(aggregate))


def _same_at_every_version(app: WorkflowApplication, aggregate: Any) -> None:
    for version in range(1, aggregate.version + 1):
        slow = app.repository.get(aggregate.id, version=version, projector_func=project)
        fast = load(app, aggregate.id, version=version)
        assert type(fast) is type(slow) and fast.version == slow.version == version
        assert _state(fast) == _state(slow), f"version {version} differs"


def test_a_whole_workflow_replays_the_same(tmp_path: Path) -> None:
    app = _app(tmp_path)
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/x", base_branch="main",
                  branch=None, script=None)
    for stage, fields in (("scoping", SCOPE), ("research", RESEARCH), ("planning", PLAN)):
        wf.submit_artifact(stage, card(stage, fields))
        if stage == "research":
            wf.request_changes("say more")
            wf.submit_artifact(stage, card(stage, fields))
        wf.approve()
    wf.record_error(stage="execution", message="a hiccup")
    wf.finish_execution()
    wf.submit_artifact("review", card("review", {"recommendation": "approve", "summary": "fine"}))
    wf.approve()
    app.save(wf)
    assert wf.version > 10
    _same_at_every_version(app, wf)


def test_a_swarm_replays_the_same(tmp_path: Path) -> None:
    app = _app(tmp_path)
    swarm = diamond()
    a = swarm.claim("a", "w-one")
    swarm.begun(a, "base0")
    swarm.leased(a, ["a.py"])
    swarm.session_opened(a, "turn-1")
    swarm.turn_handled(a, "turn-2", "tool", summary="feat(a): a", nudge=None)
    swarm.lease_conflict(swarm.claim("x", "w-two"), ["x.py"], ["someone"])
    app.save(swarm)
    assert str(swarm.id) == str(app.get_swarm(WID).id)
    _same_at_every_version(app, swarm)


def test_an_unknown_aggregate_is_not_found(tmp_path: Path) -> None:
    app = _app(tmp_path)
    with pytest.raises(AggregateNotFoundError):
        load(app, diamond().id)


def test_a_gap_in_the_versions_is_refused(tmp_path: Path) -> None:
    app = _app(tmp_path)
    swarm = diamond()
    swarm.claim("a", "w-one")
    app.save(swarm)
    with app.recorder.datastore.transaction(commit=True) as cursor:  # type: ignore[attr-defined]
        cursor.execute(f"DELETE FROM {app.recorder.events_table_name} WHERE originator_version=2")  # type: ignore[attr-defined]
    with pytest.raises(OriginatorVersionError):
        load(app, swarm.id)
