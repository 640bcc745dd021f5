"""The orchestrator split in two partitions on the embedded default (one process serving both): workflows in
either partition run to the same commits as on one orchestrator, the list is merged in creation order, each
partition answers only on its own subjects, and the shared store's events reach the stream once each; loop
sessions in either partition complete too."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from autarch.contracts import subjects
from autarch.contracts.workflows import GetWorkflow
from autarch.services.scripted_model import ScriptedModelServer
from tests.loops.conftest import FILES, Loops, iteration, write
from tests.system import System
from tests.workflows.faults.harness import BRANCH, assert_same_result, reference, run_to_done

from .conftest import Client, demo_scenario, make_repo, scripted_system

WORKFLOWS = 6


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    yield from scripted_system(tmp_path_factory, model, "partitions", AUTARCH_ORCHESTRATOR_PARTITIONS="2",
                               AUTARCH_REQUEST_TIMEOUT="30")


async def _asked(system: System, wid: str) -> dict[str, str]:
    """What each orchestrator subject answers a ``get_workflow`` of ``wid`` with."""
    nc = await nats.connect(f"nats://127.0.0.1:{system.nats_port}")
    answers: dict[str, str] = {}
    try:
        payload = json.dumps({"workflow_id": wid}).encode()
        for subject in (subjects.request("orchestrator", "get_workflow"),
                        *(subjects.orchestrator_partition("get_workflow", k, 2) for k in range(2))):
            try:
                reply = await nc.request(subject, payload, timeout=2)
                answers[subject] = json.loads(reply.data).get("code", "ok")
            except nats.errors.NoRespondersError:
                answers[subject] = "no responders"
        return answers
    finally:
        await nc.close()


def test_workflows_in_both_partitions_run_as_on_one_orchestrator(split: System, model: ScriptedModelServer,
                                                                 tmp_path) -> None:
    scenario = demo_scenario()
    model.use(scenario)
    client = Client(split)
    try:
        banner = split.log.read_text() if split.log else ""
        assert "Autarch starting: services" in banner and "orchestrator  2 partitions" in banner, banner[:800]
        health = client.http.get("/healthz").json()
        assert health["services"]["orchestrator"] == {"ok": True, "instances": 2}, health
        # ``autarch status`` reads the partitions from the instances' answers, not from its own settings.
        status = split.cli("status", "--json", extra_env={"AUTARCH_ORCHESTRATOR_PARTITIONS": "1"})
        orchestrator = json.loads(status.stdout)["services"]["orchestrator"]
        assert orchestrator["ok"] and orchestrator["partitions"] == {"count": 2, "served": [0, 1]}, orchestrator

        repos: list[Path] = []
        ids: list[str] = []
        started = time.monotonic()
        # Six, and more while they all fell in one partition (1 chance in 32 each time): both have work.
        while len(ids) < WORKFLOWS or len({subjects.partition_of(wid, 2) for wid in ids}) < 2:
            repos.append(make_repo(tmp_path / f"wf-{len(ids)}", scenario["files"]))
            ids.append(client.create(repos[-1], branch=BRANCH))
        seconds = run_to_done(client, ids, timeout=180, started=started)
        ref = reference(repos[0], seconds[ids[0]])
        for repo, wid in zip(repos, ids, strict=True):
            assert_same_result(client, repo, wid, ref)

        # The list is every partition's, merged in creation order, and pages across the partitions.
        listed = client.http.get("/api/workflows").json()
        assert listed["total"] == len(ids)
        assert [item["id"] for item in listed["items"]] == ids
        page = client.http.get("/api/workflows", params={"offset": 2, "limit": 3}).json()
        assert [item["id"] for item in page["items"]] == ids[2:5] and page["total"] == len(ids)
        assert client.http.get("/api/pulse").json()["total"] == 0

        # Only the owner answers on its partition's subject; the unpartitioned subject has nobody.
        wid = ids[0]
        answers = asyncio.run(_asked(split, wid))
        own = subjects.orchestrator_request("get_workflow", GetWorkflow(workflow_id=wid), 2)
        other = subjects.orchestrator_partition("get_workflow", 1 - subjects.partition_of(wid, 2), 2)
        assert answers == {subjects.request("orchestrator", "get_workflow"): "no responders", own: "ok",
                           other: "not_found"}
    finally:
        client.http.close()


def test_loop_sessions_in_both_partitions_complete(split: System, model: ScriptedModelServer, tmp_path) -> None:
    health = "def health():\n    return 'ok'\n"
    model.use({"files": FILES, "scripts": {
        "loop:split.i1": iteration([write("shop/health.py", health)],
                                   "feat(shop): add a health function\n\n<signal>COMPLETE</signal>"),
    }})
    loops = Loops(split, tmp_path)
    client = Client(split)
    try:
        started = [loops.start(loops.repo(f"loop-{i}"), "split") for i in range(4)]
        owners = {subjects.partition_of(view.id, 2) for view in started}
        while len(owners) < 2:  # 1 chance in 8: one more, until both partitions run one
            started.append(loops.start(loops.repo(f"loop-{len(started)}"), "split"))
            owners.add(subjects.partition_of(started[-1].id, 2))
        for view in started:
            done = loops.wait_status(view.id, "complete")
            assert done.total_commits == 1 and [it.signal for it in done.iterations] == ["COMPLETE"]
            assert loops.events(view.id).count("loop:completed") == 1
        listed = client.http.get("/api/pulse").json()
        assert [item["id"] for item in listed["items"]] == [view.id for view in started]
    finally:
        loops.close()
        client.http.close()
