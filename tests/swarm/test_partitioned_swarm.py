"""The swarm on an orchestrator split in two partitions: the same end-to-end runs as on one orchestrator (the
diamond on three workers, and a file conflict reported, answered and released over coordination mail), with the
bead verbs, the workers' mail and their turns routed to the partition that owns the epic."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System
from tests.workflows.conftest import scripted_system

# Collected here again, with this module's ``system``: the same assertions on the partitioned orchestrator.
from .test_mail_flow import (
    test_a_conflict_is_reported_answered_and_the_release_wakes_the_waiting_worker as test_partitioned_mail_flow,
)
from .test_swarm_e2e import (
    test_a_diamond_and_independent_beads_run_on_three_workers_one_commit_per_bead as test_partitioned_diamond,
)

__all__ = ["test_partitioned_diamond", "test_partitioned_mail_flow"]


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    yield from scripted_system(tmp_path_factory, model, "swarm-split", AUTARCH_SWARM_WORKERS="3",
                               AUTARCH_LEASE_TTL="5", AUTARCH_AGENT_MAX_STEPS="10", AUTARCH_REQUEST_TIMEOUT="30",
                               AUTARCH_ORCHESTRATOR_PARTITIONS="2")
