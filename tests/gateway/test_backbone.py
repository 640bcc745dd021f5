"""The backbone end to end: HTTP create → event store → JetStream → SSE, restarts and crashes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import time
from pathlib import Path

import httpx
import pytest

from tests.system import System, pid_alive, work_tree

from .test_events import Sse, sse_events

pytestmark = pytest.mark.slow


def _body(repo: str, **over: object) -> dict:
    body: dict[str, object] = {"title": "JWT", "request": "add JWT validation to the API",
                               "repo": str(work_tree(Path(repo)))}
    body.update(over)
    return body


async def _sse_events(system: System, n: int, *, last_event_id: str | None = None, query: str = "",
                      timeout: float = 10, live: asyncio.Event | None = None) -> list[Sse]:
    """The first ``n`` events of ``/api/events``; ``live`` is set once the feed said it is connected."""
    headers = dict(system.headers)
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    got = []
    async with httpx.AsyncClient(timeout=timeout) as client:
        async with client.stream("GET", f"{system.url}/api/events{query}", headers=headers) as stream:
            assert stream.status_code == 200
            async with asyncio.timeout(timeout):
                async for sse in sse_events(stream, live):
                    got.append(sse)
                    if len(got) >= n:
                        break
    return got


def test_auth_token_and_public_health(system: System, tmp_path):
    mode = stat.S_IMODE(os.stat(system.data_dir / "token").st_mode)
    assert mode == 0o600
    health = httpx.get(f"{system.url}/healthz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "nats": True, "services": {"orchestrator": {"ok": True, "instances": 1}}}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        for method, path in (("GET", "/api/workflows"), ("POST", "/api/workflows"), ("GET", "/schema/openapi.json"),
                             ("GET", "/api/events")):
            r = httpx.request(method, f"{system.url}{path}", headers=headers, json=_body(str(tmp_path)))
            assert r.status_code == 401, (method, path, headers)
            assert r.json()["code"] == "unauthorized"
    assert httpx.get(f"{system.url}/api/workflows", headers=system.headers).json()["total"] == 0
    schema = httpx.get(f"{system.url}/schema/openapi.json", headers=system.headers).json()
    assert {"/api/workflows", "/api/workflows/{workflow_id}", "/api/events", "/healthz"} <= set(schema["paths"])


async def test_create_shows_on_sse_and_last_event_id_resumes_without_gap_or_repeat(system: System, tmp_path):
    live = asyncio.Event()
    listener = asyncio.create_task(_sse_events(system, 1, live=live))
    # The feed is live once it says so: a workflow created after that shows on it.
    await asyncio.wait_for(live.wait(), 10)
    async with httpx.AsyncClient(headers=system.headers) as client:
        r = await client.post(f"{system.url}/api/workflows", json=_body(str(tmp_path)))
        assert r.status_code == 201
        created = r.json()
        assert (created["stage"], created["base_branch"], created["repo"]) == ("scoping", "main", str(tmp_path))
        [first] = await listener
        assert first.event == "workflow:created"
        assert json.loads(first.data)["workflow_id"] == created["id"]
        more = [(await client.post(f"{system.url}/api/workflows", json=_body(str(tmp_path), title=f"w{i}"))).json()
                for i in range(3)]
    resumed = await _sse_events(system, 3, last_event_id=first.id)
    assert [json.loads(e.data)["workflow_id"] for e in resumed] == [w["id"] for w in more]
    assert [int(e.id) for e in resumed] == list(range(int(first.id) + 1, int(first.id) + 4))
    # The workflow filter and ?since= give the same resumption for one workflow.
    only = await _sse_events(system, 1, query=f"?since=0&workflow={more[1]['id']}")
    assert json.loads(only[0].data)["workflow_id"] == more[1]["id"]


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b"{not json", None),
        (b"[]", None),
        (b'{"title": 5, "request": "r", "repo": "REPO"}', "title"),
        (b'{"request": "r", "repo": "REPO"}', "title"),
        (b'{"title": "t", "request": "r"}', "repo"),
        (b'{"title": "", "request": "r", "repo": "REPO"}', "title"),
        (b'{"title": "t", "request": "r", "repo": "REPO", "colour": "red"}', "colour"),
        (b'{"title": "t", "request": "r", "repo": "/definitely/not/here"}', "repo"),
    ],
)
def test_bad_create_bodies_are_typed_400s_and_record_nothing(system: System, tmp_path, content, field):
    content = content.replace(b"REPO", str(tmp_path).encode())
    r = httpx.post(f"{system.url}/api/workflows", content=content,
                   headers={**system.headers, "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "bad_request" and body["message"]
    if field:
        assert field in json.dumps(body)
    assert httpx.get(f"{system.url}/api/workflows", headers=system.headers).json()["total"] == 0


def test_unknown_or_malformed_workflow_ids_are_typed_404s(system: System):
    for wid in ("00000000-0000-4000-8000-000000000000", "nope"):
        r = httpx.get(f"{system.url}/api/workflows/{wid}", headers=system.headers)
        assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = httpx.get(f"{system.url}/api/events?workflow=nope", headers=system.headers)
    assert r.status_code == 400 and r.json()["code"] == "bad_request"
    r = httpx.get(f"{system.url}/api/events", headers={**system.headers, "Last-Event-ID": "abc"})
    assert r.status_code == 400 and r.json()["code"] == "bad_request"


def test_idempotency_key_makes_retries_safe(system: System, tmp_path):
    headers = {**system.headers, "Idempotency-Key": "client-retry-1"}
    a = httpx.post(f"{system.url}/api/workflows", json=_body(str(tmp_path)), headers=headers)
    b = httpx.post(f"{system.url}/api/workflows", json=_body(str(tmp_path)), headers=headers)
    assert a.status_code == b.status_code == 201 and a.json() == b.json()
    c = httpx.post(f"{system.url}/api/workflows", json=_body(str(tmp_path), title="other"), headers=headers)
    assert c.status_code == 409 and c.json()["code"] == "conflict"
    assert httpx.get(f"{system.url}/api/workflows", headers=system.headers).json()["total"] == 1


async def test_kill_9_orchestrator_during_a_burst_of_1000_creates(system: System, tmp_path):
    orchestrator_pid = system.run_info()["children"]["orchestrator"]
    ok: list[str] = []
    failed: list[int] = []
    sem = asyncio.Semaphore(16)

    async def create(client: httpx.AsyncClient, i: int) -> None:
        async with sem:
            try:
                r = await client.post(f"{system.url}/api/workflows", json=_body(str(tmp_path), title=f"burst {i}"))
            except httpx.HTTPError:
                failed.append(i)
                return
            if 200 <= r.status_code < 300:
                ok.append(r.json()["id"])
            else:
                failed.append(r.status_code)

    async def killer() -> None:
        while len(ok) < 300:
            await asyncio.sleep(0.01)
        os.kill(orchestrator_pid, signal.SIGKILL)

    async with httpx.AsyncClient(headers=system.headers, timeout=60) as client:
        await asyncio.gather(killer(), *(create(client, i) for i in range(1000)))
    # The supervisor restarted it.
    deadline = time.monotonic() + 20
    while system.run_info()["children"]["orchestrator"] == orchestrator_pid and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert system.run_info()["children"]["orchestrator"] != orchestrator_pid
    assert len(ok) >= 900, f"only {len(ok)} creates succeeded; failures: {failed[:10]}"

    listed = httpx.get(f"{system.url}/api/workflows", headers=system.headers, params={"limit": 10000}).json()
    listed_ids = [w["id"] for w in listed["items"]]
    assert len(listed_ids) == len(set(listed_ids))
    assert set(ok) <= set(listed_ids)
    streamed = await _sse_events(system, len(listed_ids), query="?since=0", timeout=30)
    streamed_ids = [json.loads(e.data)["workflow_id"] for e in streamed]
    assert len(streamed_ids) == len(set(streamed_ids)) == len(listed_ids)
    assert set(streamed_ids) == set(listed_ids)


async def test_full_restart_brings_the_same_state_back_and_leaves_no_orphans(system: System, tmp_path):
    async with httpx.AsyncClient(headers=system.headers) as client:
        for i in range(5):
            r = await client.post(f"{system.url}/api/workflows", json=_body(str(tmp_path), title=f"w{i}"))
            assert r.status_code == 201
        before = (await client.get(f"{system.url}/api/workflows")).json()
    events_before = await _sse_events(system, 5, query="?since=0")
    pids = system.all_pids()
    assert len(pids) == 3  # nats-server, orchestrator, gateway
    assert system.stop() == 0
    assert not (system.data_dir / "run.json").exists()
    for pid in pids:
        assert not pid_alive(pid), f"process {pid} outlived autarch up"

    replayed = system.cli("replay", before["items"][2]["id"])
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["workflow"] == before["items"][2]

    system.start()
    after = httpx.get(f"{system.url}/api/workflows", headers=system.headers).json()
    assert after == before
    events_after = await _sse_events(system, 5, query="?since=0")
    assert [(e.id, e.data) for e in events_after] == [(e.id, e.data) for e in events_before]
    status = system.cli("status")
    # Only the orchestrator runs here: it is ok, the services not started say DOWN (so status exits 1).
    assert "orchestrator  ok" in status.stdout and "agent_runner  DOWN" in status.stdout, status.stdout


def test_replay_cli_errors(system: System):
    r = system.cli("replay", "00000000-0000-4000-8000-000000000000")
    assert r.returncode == 1 and "no workflow" in r.stderr
    r = system.cli("replay", "not-an-id")
    assert r.returncode == 1 and "not a workflow id" in r.stderr
    r = system.cli("replay", "00000000-0000-4000-8000-000000000000", "--at", "0")
    assert r.returncode == 1 and "counts events from 1" in r.stderr


def test_events_cli_tails_the_stream_and_logs_are_prefixed(system: System, tmp_path):
    ids = [httpx.post(f"{system.url}/api/workflows", json=_body(str(tmp_path), title=f"t{i}"),
                      headers=system.headers).json()["id"] for i in range(2)]
    r = system.cli("events", "--since", "0", "--limit", "2")
    assert r.returncode == 0, r.stderr
    lines = [line.split("\t") for line in r.stdout.splitlines()]
    assert [(seq, kind) for seq, kind, _ in lines] == [("1", "workflow:created"), ("2", "workflow:created")]
    assert [json.loads(data)["workflow_id"] for *_, data in lines] == ids
    only = system.cli("events", "--since", "0", "--limit", "1", "--workflow", ids[1])
    assert json.loads(only.stdout.split("\t")[2])["workflow_id"] == ids[1]
    log = system.log.read_text()
    assert "orchestrator | " in log and "orchestrator ready" in log


def test_a_killed_supervisor_leaves_no_orphans(system: System):
    pids = system.all_pids()
    system.proc.kill()  # SIGKILL: the supervisor gets no chance to clean up
    system.proc.wait()
    system.proc = None
    deadline = time.monotonic() + 15
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in pids if pid_alive(p)] == []


def test_ctrl_c_stops_everything_and_status_then_reports_down(system: System):
    pids = system.all_pids()
    system.proc.send_signal(signal.SIGINT)
    try:
        assert system.proc.wait(30) == 0
    except Exception:
        print(system.log.read_text())
        raise
    system.proc = None
    assert [p for p in pids if pid_alive(p)] == []
    status = system.cli("status")
    assert status.returncode == 1 and "DOWN" in status.stdout
