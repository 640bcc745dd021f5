"""The scale-out shape: PostgreSQL stores written by two instances of every service, a replicated stream. A
workflow run to its end leaves a log whose every chain, checkpoint and stream message verifies."""

from __future__ import annotations

import json
import time

import pytest

from autarch.cli.main import main
from tests.cluster.conftest import cluster, model, postgres_url  # noqa: F401 - the cluster tests' fixtures
from tests.workflows.conftest import Client, demo_scenario, make_repo
from tests.workflows.faults.harness import BRANCH, run_to_done

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_a_workflow_on_the_cluster_leaves_a_log_that_verifies(cluster, model, postgres_url, tmp_path,  # noqa: F811
                                                              capsys):
    scenario = demo_scenario()
    model.use(scenario)
    repo = make_repo(tmp_path / "repo", scenario["files"])
    client = Client(cluster)
    try:
        wid = client.create(repo, branch=BRANCH)
        run_to_done(client, [wid], timeout=120, started=time.monotonic())
    finally:
        client.http.close()
    argv = ["--data-dir", str(cluster.data_dir), "--nats", cluster.nats_url, "--postgres-url", postgres_url]
    deadline = time.monotonic() + 60
    while True:  # the relays publish on their own time: wait until the stream holds every event
        code = main(["audit", "verify", "--json", *argv])
        reports = {r["store"]: r for r in json.loads(capsys.readouterr().out)}
        pending = [f for r in reports.values() for f in r["findings"] if f["kind"] == "unpublished"]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert code == 0, reports
    orchestrator, runner = reports["orchestrator"], reports["agent_runner"]
    assert orchestrator["events"] == orchestrator["chained"] > 20 and orchestrator["stream_messages"] > 20
    assert runner["events"] == runner["chained"] > 0 and runner["stream_messages"] > 0
    assert not [f for r in reports.values() for f in r["findings"]]
    assert main(["audit", "verify", wid, *argv]) == 0
    assert f"head: aggregate {wid}" in capsys.readouterr().out
