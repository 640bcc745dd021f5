"""``autarch up --cluster 3 --instances 2``: three NATS nodes in one JetStream cluster (the event stream replicated
three times, every write fsynced), PostgreSQL event stores, two processes of every service and of the gateway.
A demo workflow runs on it to the same commits as on the embedded default, and the stores match the stream."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import nats
from nats.aio.msg import Msg

from autarch.services.scripted_model import ScriptedModelServer
from tests.workflows.conftest import Client, demo_scenario, make_repo
from tests.workflows.faults.harness import BRANCH, assert_same_result, reference, run_to_done

from .conftest import INSTANCES, NODES, ClusterSystem, leader_of, stream_leader
from .stream_check import check_stores_against_stream

SERVICES = ("orchestrator", "tools", "git", "agent_runner", "indexer", "notifier")


async def _stores_match(system: ClusterSystem) -> dict[str, int]:
    nc = await nats.connect(system.nats_url.split(","), connect_timeout=2)
    try:
        return await check_stores_against_stream(nc, system.postgres_url)
    finally:
        await nc.close()


def stores_match_stream(system: ClusterSystem) -> dict[str, int]:
    return asyncio.run(_stores_match(system))


async def _requests_per_instance(system: ClusterSystem, service: str) -> list[int]:
    """Requests each answering instance of ``service`` has handled (``$SRV.STATS``, one answer per instance)."""
    nc = await nats.connect(system.nats_url.split(","), connect_timeout=2)
    answers: list[int] = []
    try:
        async def collect(msg: Msg) -> None:
            stats = json.loads(msg.data)
            answers.append(sum(e.get("num_requests", 0) for e in stats.get("endpoints") or []))

        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, cb=collect)
        await nc.publish(f"$SRV.STATS.{service}", b"", reply=inbox)
        await asyncio.sleep(1.0)  # a collection window: nothing marks the last instance's answer
        await sub.unsubscribe()
        return answers
    finally:
        await nc.close()


def test_the_cluster_shape(cluster: ClusterSystem) -> None:
    info = cluster.run_info()
    assert len(info["nats_pids"]) == NODES and all(info["nats_pids"])
    expected = {f"{s}-{i}" for s in (*SERVICES, "gateway") for i in range(1, INSTANCES + 1)}
    assert set(info["children"]) == expected
    _, replicas = stream_leader(cluster)
    assert replicas == 3
    for i in range(1, NODES + 1):
        conf = (cluster.data_dir / "nats-cluster" / f"nats-{i}" / "nats.conf").read_text()
        assert "sync_interval: always" in conf and "cluster {" in conf
    # Stateless services answer from both instances; a stateful one from its leader only.
    status = json.loads(cluster.cli("status", "--json").stdout)
    assert status["nats"] is True and "," in status["supervisor"]["nats_url"]
    assert status["services"]["tools"]["instances"] == 2
    assert status["services"]["git"]["instances"] == 2
    # The orchestrator is split in two partitions (``--partitions`` defaults to the instances): both work.
    assert status["services"]["orchestrator"]["instances"] == 2
    assert status["services"]["orchestrator"]["partitions"] == {"count": 2, "served": [0, 1]}
    assert status["services"]["agent_runner"]["instances"] == 1
    assert status["services"]["notifier"]["instances"] == 1
    assert status["services"]["indexer"]["instances"] == 1
    holders = {leader_of(cluster, f"orchestrator.p{k}") for k in range(INSTANCES)}
    assert holders == {"orchestrator-1", "orchestrator-2"}, f"one partition each, not {holders}"
    # Both gateways serve the API.
    for port in (cluster.port, cluster.port + 1):
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5, trust_env=False).status_code == 200


def test_a_workflow_completes_on_the_cluster(cluster: ClusterSystem, model: ScriptedModelServer, tmp_path) -> None:
    scenario = demo_scenario()
    model.use(scenario)
    repo = make_repo(tmp_path / "repo", scenario["files"])
    client = Client(cluster)
    second = Client(cluster)
    second.http.base_url = httpx.URL(f"http://127.0.0.1:{cluster.port + 1}")
    try:
        started = time.monotonic()
        wid = second.create(repo, branch=BRANCH)  # created through the second gateway, driven through the first
        seconds = run_to_done(client, [wid], timeout=120, started=started)
        ref = reference(repo, seconds[wid])
        assert ref.log == ["test(greeter): cover the empty-name greeting",
                           "feat(greeter): greet the world when the name is empty"]
        assert_same_result(client, repo, wid, ref)
        assert second.get(wid) == client.get(wid)
    finally:
        client.http.close()
        second.http.close()
    counts = stores_match_stream(cluster)
    assert counts["orchestrator"] > 0 and counts["agent_runner"] > 0
    # The stateless services' queue groups spread one workflow's requests over both instances.
    for service in ("tools", "git"):
        handled = asyncio.run(_requests_per_instance(cluster, service))
        assert len(handled) == 2 and all(n > 0 for n in handled), f"{service}: requests per instance {handled}"
