"""A partition's start-up keeps only its own epics, and finds which workflow each epic belongs to from the epic's
first event: no other partition's epic is rebuilt (at 10,000 epics, that was every epic's whole life, per start)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.swarm.model import Swarm

from .test_swarm_model import _bead


def test_the_workflow_of_every_epic_comes_from_its_first_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store",
                                   "SQLITE_DBNAME": str(tmp_path / "events.sqlite")})
    workflows = [str(uuid.uuid4()) for _ in range(5)]
    for wid in workflows:
        swarm = Swarm(workflow_id=wid, mode="swarm", max_workers=2, at=datetime.now(UTC).isoformat(),
                      beads=[_bead("a"), _bead("b", "a")])
        swarm.join("AmberFalcon", "w1", "/wt/1")
        swarm.claim("a", "AmberFalcon")  # a life longer than its first event
        app.save(swarm)
    rebuilt: list[Any] = []
    load = app.load

    def counted(*args: Any, **kwargs: Any) -> Any:
        rebuilt.append(args)
        return load(*args, **kwargs)

    monkeypatch.setattr(app, "load", counted)
    assert list(app.swarm_workflow_ids()) == workflows
    assert rebuilt == []
