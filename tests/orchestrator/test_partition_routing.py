"""Routing of orchestrator requests to partitions: every verb names what it is about (or is a list asked of every
partition), every spelling of an id lands in one partition, and the ids spread over all of them."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import msgspec
import pytest

from autarch.contracts import subjects
from autarch.contracts.beads import GetBead
from autarch.contracts.loops import ListLoops
from autarch.contracts.mail import FetchInbox
from autarch.contracts.workflows import CreateWorkflow, GetWorkflow, ListWorkflows, ReplayWorkflow
from autarch.runtime.micro import TypedService
from autarch.runtime.settings import SettingsError, load_settings
from autarch.services.orchestrator.loop.book import register_loops
from autarch.services.orchestrator.mail.book import register_mail
from autarch.services.orchestrator.partition import Partition
from autarch.services.orchestrator.swarm.book import register_beads
from autarch.services.orchestrator.workflow.verbs import register_lifecycle


class _Anything:
    """Stands in for the books: registering endpoints only takes their bound methods."""

    def __getattr__(self, name: str) -> Any:
        async def handler(_request: Any) -> None:
            return None

        return handler


def _served() -> dict[str, type]:
    service = TypedService(nc=None, name="orchestrator")  # type: ignore[arg-type]  # never started: only its endpoints are listed
    # The four that service.start registers itself, with their request types.
    for name, request_type in (("create_workflow", CreateWorkflow), ("get_workflow", GetWorkflow),
                               ("list_workflows", ListWorkflows), ("replay_workflow", ReplayWorkflow)):
        service.endpoint(name, request_type, _Anything().handler)
    register_lifecycle(service, _Anything())  # type: ignore[arg-type]  # a stand-in: only the verbs are read
    register_loops(service, _Anything())  # type: ignore[arg-type]  # a stand-in: only the verbs are read
    register_beads(service, _Anything())  # type: ignore[arg-type]  # a stand-in: only the verbs are read
    register_mail(service, _Anything())  # type: ignore[arg-type]  # a stand-in: only the verbs are read
    return {ep.verb: ep.request_type for ep in service._endpoints}


def test_every_orchestrator_request_names_its_partition_or_is_a_list() -> None:
    served = _served()
    assert set(subjects.ORCHESTRATOR_VERBS) == set(served)
    for verb, request_type in served.items():
        names = {f.name for f in msgspec.structs.fields(request_type)}
        if verb in subjects.SCATTERED_VERBS:
            assert not names & set(subjects.ROUTING_FIELDS), f"{verb} names something yet is asked of every partition"
        else:
            assert names & set(subjects.ROUTING_FIELDS), f"{verb} ({request_type.__name__}) names no partition"


def test_every_spelling_of_an_id_has_one_partition() -> None:
    wid = uuid.uuid4()
    spellings = [str(wid), str(wid).upper(), wid.hex, f"{{{wid}}}", f"urn:uuid:{wid}"]
    assert len({subjects.partition_of(s, 7) for s in spellings}) == 1


def test_ids_spread_over_every_partition() -> None:
    counts = Counter(subjects.partition_of(str(uuid.uuid4()), 4) for _ in range(4000))
    assert set(counts) == {0, 1, 2, 3}
    assert min(counts.values()) > 800, counts  # 1000 each expected


def test_a_key_that_is_no_uuid_still_has_a_partition() -> None:
    assert subjects.partition_of("not-a-uuid", 3) in (0, 1, 2)
    assert subjects.partition_of("not-a-uuid", 1) == 0


def test_subjects_of_one_and_of_several_partitions() -> None:
    wid = str(uuid.uuid4())
    query = GetWorkflow(workflow_id=wid)
    assert subjects.orchestrator_request("get_workflow", query, 1) == "autarch.svc.orchestrator.get_workflow"
    k = subjects.partition_of(wid, 3)
    assert subjects.orchestrator_request("get_workflow", query, 3) == f"autarch.svc.orchestrator.p{k}.get_workflow"
    # A bead request goes where its epic (a workflow) lives; a worker's inbox where its project's mailbox does.
    assert subjects.orchestrator_request("get_bead", GetBead(epic_id=wid, bead_id="b1"), 3).endswith(
        f".p{k}.get_bead")
    inbox = FetchInbox(project_key=wid, agent_name="GreenCastle", session_id=str(uuid.uuid4()))
    assert subjects.routing_key(inbox) == wid
    assert subjects.routing_key(ListLoops()) is None
    assert subjects.service_of(subjects.orchestrator_partition("approve", 2, 3)) == "orchestrator"


def test_a_partition_owns_exactly_its_share() -> None:
    parts = [Partition(k, 3) for k in range(3)]
    for _ in range(200):
        key = str(uuid.uuid4())
        assert sum(p.owns(key) for p in parts) == 1
    assert Partition().owns(str(uuid.uuid4())) and not Partition().split and Partition().suffix == ""
    assert parts[2].suffix == "-p2" and parts[2].subject("approve") == "autarch.svc.orchestrator.p2.approve"


@pytest.mark.parametrize("value", ["0", "65", "-1"])
def test_partitions_out_of_range_are_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTARCH_ORCHESTRATOR_PARTITIONS", value)
    with pytest.raises(SettingsError, match="orchestrator_partitions must be between 1 and 64"):
        load_settings()
