"""The relay's wire events of an epic: a merged bead's ``bead:closed`` names the worker of its attempt, known from
the claim the relay translated before it, or read from the store when the relay started after the claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autarch.contracts.events import BeadClosed
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.swarm.model import Swarm
from autarch.services.orchestrator.wire import WireEvents

from .test_snapshots import record


def test_a_merged_beads_worker_is_the_one_its_claim_named_with_or_without_the_claim_seen(tmp_path: Path) -> None:
    app = WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store",
                                   "SQLITE_DBNAME": str(tmp_path / "e.sqlite")})
    try:
        _, swarm_id = record(app, "swarm")
        events: list[Any] = list(app.repository.event_store.get(swarm_id))
        merge = next(e for e in events if isinstance(e, Swarm.BeadMerged))

        in_order = WireEvents(app)
        wired = [in_order(e) for e in events]
        closed = [w for w in wired if isinstance(w, BeadClosed)]
        assert [(c.bead_id, c.worker) for c in closed] == [("a", "w-one")]
        assert not in_order._workers or all(k[1] != "a" for k in in_order._workers)  # forgotten once merged

        late = WireEvents(app)  # a relay that starts after the claim: read from the store
        alone = late(merge)
        assert isinstance(alone, BeadClosed) and alone.worker == "w-one"
        assert alone == closed[0]
    finally:
        app.close()
