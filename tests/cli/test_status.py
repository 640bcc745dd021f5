"""``autarch status`` reports the true request and error counts of every instance, over a real nats-server."""

from __future__ import annotations

import argparse
import asyncio

import msgspec
import pytest

from autarch.cli.system import _status, cmd_status
from autarch.runtime.errors import RemoteError, ServiceFailure
from autarch.runtime.micro import TypedService
from autarch.runtime.requests import request
from autarch.runtime.settings import load_settings


class Job(msgspec.Struct, kw_only=True):
    fail: bool = False


class Done(msgspec.Struct, kw_only=True):
    ok: bool = True


async def _work(job: Job) -> Done:
    await asyncio.sleep(0.15)
    if job.fail:
        raise ServiceFailure.conflict("failed after 150 ms")
    return Done()


async def test_status_counts_failed_requests_and_their_time(nc, nats_server, tmp_path, monkeypatch, capsys):
    instances = [TypedService(nc, name="status_test") for _ in range(2)]
    for svc in instances:
        svc.endpoint("work", Job, _work, subject="test.status.work")
        await svc.start()
    try:
        with pytest.raises(RemoteError):
            await request(nc, "test.status.work", Job(fail=True), Done)
        await request(nc, "test.status.work", Job(), Done)
        settings = load_settings({"nats_url": nats_server.url, "data_dir": str(tmp_path)}, environ={})
        entry = (await _status(settings, ["status_test"]))["services"]["status_test"]
        monkeypatch.setattr("autarch.cli.local.supervisor.AVAILABLE_SERVICES", ("status_test",))
        args = argparse.Namespace(json=False, nats=nats_server.url, data_dir=str(tmp_path))
        assert await asyncio.to_thread(cmd_status, args) == 0
    finally:
        for svc in instances:
            await svc.stop()
    assert (entry["ok"], entry["instances"]) == (True, 2)
    assert (entry["requests"], entry["errors"]) == (2, 1)  # summed over both instances, whichever took them
    assert entry["average_ms"] >= 150
    assert entry["last_error"] == "conflict: failed after 150 ms"
    out = capsys.readouterr().out
    assert f"status_test   ok (2 instances)  requests 2, errors 1, avg {entry['average_ms']:.1f} ms" in out
    assert "last error: conflict: failed after 150 ms" in out
