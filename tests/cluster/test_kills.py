"""Twenty demo workflows on the local cluster while, at chosen moments, the event stream's leader node is SIGKILLed,
the PostgreSQL connections of an orchestrator (the cluster splits the workflows in two partitions, one per
instance) and of the leading agent runner are cut by the server, and then those processes (holding the store's
connections), an instance of tools and of git, a gateway and the
leading notifier and indexer are SIGKILLed. Every workflow ends with the commits of an undisturbed run, its
events once each on its SSE stream, its log replaying to its live state; and both stores match the stream: every
event exactly once, nothing foreign."""

from __future__ import annotations

import time

import pytest

from autarch.contracts.subjects import partition_of
from autarch.runtime.standby import LOST_LEASE_EXIT
from autarch.services.scripted_model import ScriptedModelServer
from tests.workflows.conftest import Client, demo_scenario, make_repo
from tests.workflows.faults.harness import BRANCH, Approver, assert_same_result, reference, run_to_done

from .conftest import TTL, ClusterSystem, drop_postgres_connections, leader_of, stream_leader, wait_replicas_current
from .test_local_cluster import stores_match_stream

pytestmark = pytest.mark.slow

WORKFLOWS = 20
STAGES = ("scoping", "research", "planning", "execution", "review", "done")


def _progress(approver: Approver) -> int:
    """Stages reached, summed over the workflows (0 at the start, 5 * WORKFLOWS when all are done): a moment in
    the run that the kills are aimed at."""
    return sum(STAGES.index(view["stage"]) for view in list(approver.views.values()) if view["stage"] in STAGES)


def test_twenty_workflows_survive_kills_across_the_cluster(cluster: ClusterSystem, model: ScriptedModelServer,
                                                           tmp_path) -> None:
    scenario = demo_scenario()
    model.use(scenario)
    client = Client(cluster)
    try:
        control_repo = make_repo(tmp_path / "control", scenario["files"])
        started = time.monotonic()
        control = client.create(control_repo, branch=BRANCH)
        ref = reference(control_repo, run_to_done(client, [control], timeout=120, started=started)[control])

        repos = [make_repo(tmp_path / f"wf-{i:02d}", scenario["files"]) for i in range(WORKFLOWS)]
        started = time.monotonic()
        ids = [client.create(repo, branch=BRANCH) for repo in repos]
        owners = {partition_of(wid, 2) for wid in ids}
        assert owners == {0, 1}, "the workflows should be spread over both orchestrator partitions"
        killed: list[tuple[str, int]] = []

        def nats_leader() -> list[str]:
            node, _ = stream_leader(cluster)
            return [f"nats-{node.rsplit('-', 1)[1]}"]

        def leader(service: str) -> list[str]:
            # The orchestrator is split in two partitions, one per instance: its victim is partition 0's holder.
            lease = "orchestrator.p0" if service == "orchestrator" else service
            return [leader_of(cluster, lease) or f"{service}-1"]

        def drop_connections() -> list[str]:
            # The leaders' PostgreSQL connections cut by the server, the processes left running.
            for service in ("orchestrator", "agent_runner"):
                deadline = time.monotonic() + 20
                while True:  # a leader that is just taking over may not have opened its store yet
                    holder = leader(service)[0]
                    count = drop_postgres_connections(cluster, holder)
                    if count or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
                dropped.append((holder, count))
            return []

        def freeze_runner() -> list[str]:
            # The leading runner paused past its lease (a stalled VM, a stopped container): the standby takes over,
            # and the paused one, resumed, finds its lease gone and exits before it acts as a second leader.
            holder = leader("agent_runner")[0]
            frozen.append(holder)
            cluster.freeze(holder, TTL + 3)
            return []

        dropped: list[tuple[str, int]] = []
        frozen: list[str] = []
        plan = [
            (10, nats_leader),  # the stream's leader node, while relays publish
            (20, drop_connections),
            (35, lambda: leader("orchestrator")),
            (42, freeze_runner),
            (50, lambda: leader("agent_runner")),
            (65, lambda: ["tools-1", "git-2", "gateway-2", *leader("notifier"), *leader("indexer")]),
        ]

        def killer(approver: Approver) -> None:
            for threshold, victims in plan:
                while _progress(approver) < threshold:
                    if approver.stop.is_set():
                        return
                    time.sleep(0.05)
                for victim in victims():
                    killed.append((victim, _progress(approver)))
                    cluster.kill(victim)
                time.sleep(1.0)  # one fault at a time: the next lands on a system already recovering

        seconds = run_to_done(client, ids, timeout=300, started=started, killer=killer)
        victims = [name for name, _ in killed]
        assert len(victims) == 8, f"not every kill happened during the run: {killed}"
        assert len(dropped) == 2 and all(count > 0 for _, count in dropped), dropped
        log = cluster.log.read_text(errors="replace") if cluster.log else ""
        assert f"{frozen[0]} lost the agent_runner lease: exiting" in log, "the paused leader did not step down"
        assert f"WARNING supervisor: {frozen[0]} exited with {LOST_LEASE_EXIT}" in log
        assert [name.rsplit("-", 1)[0] for name in victims[1:]] == ["orchestrator", "agent_runner", "tools", "git",
                                                                      "gateway", "notifier", "indexer"]
        for repo, wid in zip(repos, ids, strict=True):
            assert_same_result(client, repo, wid, ref)
        wait_replicas_current(cluster)  # the killed node was restarted and caught up with its peers
        print(f"{WORKFLOWS} workflows with kills {killed}, connections dropped {dropped}: "
              f"slowest {max(seconds.values()):.1f}s, control {ref.seconds:.1f}s")
    finally:
        client.http.close()
    stores_match_stream(cluster)
