"""A swarm worker's own coordination tools through the real tools executor, the real orchestrator over NATS and
the real lease table: ``request_scope`` (the coordinator widens the bead and its lease, or refuses with the reason;
bad requests change nothing), ``file_reservation_paths`` / ``release_file_reservations`` (the same table as the
coordinator's assignments; shared leases for readers) and ``robot_priority`` (the ranked ready work)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg

from autarch.contracts import subjects
from autarch.contracts.beads import REQUEST_SCOPE_VERB, BeadView, GetBead
from autarch.contracts.tools import ToolCall
from autarch.runtime.eventstore import event_store_env
from autarch.runtime.leases import LeaseGrant, LeaseTable
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.service import start as start_orchestrator
from autarch.services.orchestrator.swarm.model import Bead, Swarm
from autarch.services.tools.executor import ToolExecutor
from autarch.services.tools.service import build_executor


def _bead(bead_id: str, files: list[str]) -> dict[str, Any]:
    return msgspec.to_builtins(Bead(id=bead_id, title=bead_id, files=files, verify=["true"]))


@pytest.fixture
def epic() -> str:
    return str(uuid.uuid4())


@pytest.fixture
async def leases(nc, tmp_path: Path, epic: str) -> AsyncIterator[LeaseTable]:
    """An epic in which w1 works b1 (src/a.py) and w2 works b2 (src/b.py), both leased by the coordinator; w3 has no
    bead. The orchestrator runs in-process on that store (answering verbs, not driving)."""
    data = tmp_path / "orchestrator"
    settings = Settings(data_dir=str(data), drive_workflows=False, lease_ttl=60)
    app = WorkflowApplication(env=event_store_env(settings, "orchestrator"))
    swarm = Swarm(workflow_id=epic, mode="swarm", max_workers=3, at="2026-11-27T09:00:00+00:00",
                  beads=[_bead("b1", ["src/a.py"]), _bead("b2", ["src/b.py"]), _bead("b3", ["src/c.py"])])
    table = await LeaseTable.open(nc)
    for worker, bead in (("w1", "b1"), ("w2", "b2")):
        swarm.join(worker, worker, f"/wt/{worker}")
        attempt = swarm.claim(bead, worker)
        swarm.begun(attempt, "0" * 40)
        swarm.leased(attempt, list(swarm.beads[bead].files))
        swarm.session_opened(attempt, None)
        assert isinstance(await table.acquire(epic, worker, swarm.beads[bead].files, bead_id=bead, ttl=60), LeaseGrant)
    swarm.join("w3", "w3", "/wt/w3")
    app.save(swarm)
    app.close()
    stop = await start_orchestrator(nc, settings)
    yield table
    await stop()


@pytest.fixture
async def executor(nc, tmp_path: Path, leases: LeaseTable) -> AsyncIterator[ToolExecutor]:
    executor = build_executor(Settings(data_dir=str(tmp_path / "tools"), request_timeout=5.0, restart_grace=0.2),
                              nc=nc, grep_workers=0, leases=leases)
    yield executor
    executor.close()


async def _ask(executor: ToolExecutor, root: Path, epic: str | None, holder: str | None, paths: list[str],
               wait_seconds: int = 0, call_id: str | None = None) -> tuple[dict[str, Any], bool]:
    result = await executor.call(ToolCall(
        session_id=f"s-{holder}", tool_call_id=call_id or uuid.uuid4().hex, role="pulsing", root=str(root),
        tool="request_scope", run_id=epic, lease_holder=holder,
        arguments={"reason": "the bead needs it", "paths": paths, "why": "the tests live there",
                   "wait_seconds": wait_seconds}))
    return json.loads(result.content), result.is_error


async def _bead_files(nc, epic: str, bead: str) -> list[str]:
    view = await request(nc, subjects.request("orchestrator", "get_bead"), GetBead(epic_id=epic, bead_id=bead),
                         BeadView, timeout=5.0)
    return view.files


async def test_a_request_is_granted_the_bead_and_its_lease_grow_and_a_repeat_answers_once(
        nc, epic, leases: LeaseTable, executor: ToolExecutor, tmp_path: Path) -> None:
    answer, err = await _ask(executor, tmp_path, epic, "w1", ["./tests/test_a.py"], call_id="tu-1")
    assert not err and answer["granted"] is True and answer["added"] == ["tests/test_a.py"], answer
    assert answer["bead_files"] == ["src/a.py", "tests/test_a.py"] and answer["bead_id"] == "b1"
    assert await _bead_files(nc, epic, "b1") == ["src/a.py", "tests/test_a.py"]
    mine = [(lease.pattern, lease.origin, lease.bead_id) for lease in await leases.leases(epic) if lease.holder == "w1"]
    assert sorted(mine) == [("src/a.py", "coordinator", "b1"), ("tests/test_a.py", "coordinator", "b1")]
    # The widened file is now writable by w1 (the same table the tools service checks).
    (tmp_path / "tests").mkdir()
    write = await executor.call(ToolCall(session_id="s-w1", tool_call_id="tu-w", role="pulsing", root=str(tmp_path),
                                         tool="write_file", run_id=epic, lease_holder="w1",
                                         arguments={"reason": "t", "path": "tests/test_a.py", "content": "x\n"}))
    assert not write.is_error, write.content
    again, _ = await _ask(executor, tmp_path, epic, "w1", ["./tests/test_a.py"], call_id="tu-1")
    assert again == answer
    # Asking for what the bead has already is granted with nothing added.
    same, err = await _ask(executor, tmp_path, epic, "w1", ["src/a.py"])
    assert not err and same["granted"] is True and same["added"] == []


async def test_another_workers_files_are_refused_naming_it(nc, epic, executor: ToolExecutor, tmp_path: Path) -> None:
    answer, err = await _ask(executor, tmp_path, epic, "w1", ["src/b.py"])
    assert err and answer["success"] is False and answer["granted"] is False, answer
    assert answer["held_by"] == ["w2"] and "src/b.py held by w2" in answer["error"]
    assert answer["bead_files"] == ["src/a.py"]
    assert await _bead_files(nc, epic, "b1") == ["src/a.py"]


async def test_a_request_waits_for_a_release(nc, epic, leases: LeaseTable, executor: ToolExecutor,
                                             tmp_path: Path) -> None:
    # Someone outside the swarm holds docs/**; the request waits for its release and is then granted.
    assert isinstance(await leases.acquire(epic, "ReviewerRuth", ["docs/**"], ttl=60), LeaseGrant)
    reached = asyncio.Event()  # a copy of the request, seen on its subject: the coordinator has it too

    async def seen(_msg: Msg) -> None:
        reached.set()

    spy = await nc.subscribe(subjects.request("orchestrator", REQUEST_SCOPE_VERB), cb=seen)
    asking = asyncio.create_task(_ask(executor, tmp_path, epic, "w1", ["docs/a.md"], wait_seconds=30))
    await asyncio.wait_for(reached.wait(), 10)
    await spy.unsubscribe()
    assert not asking.done()
    await leases.release(epic, "ReviewerRuth")
    answer, err = await asyncio.wait_for(asking, timeout=20)
    assert not err and answer["added"] == ["docs/a.md"], answer
    # Without waiting, a held file is refused at once.
    assert isinstance(await leases.acquire(epic, "ReviewerRuth", ["notes/**"], ttl=60), LeaseGrant)
    refused, err = await _ask(executor, tmp_path, epic, "w1", ["notes/x.md"])
    assert err and refused["held_by"] == ["ReviewerRuth"]


async def test_bad_requests_change_nothing(nc, epic, executor: ToolExecutor, tmp_path: Path) -> None:
    # Not a swarm worker: no epic or no registered name.
    answer, err = await _ask(executor, tmp_path, None, None, ["src/x.py"])
    assert err and answer == {"success": False, "error": answer["error"]} and "Only swarm workers" in answer["error"]
    # A path leaving the worktree.
    answer, err = await _ask(executor, tmp_path, epic, "w1", ["../outside.py"])
    assert err and "Invalid path '../outside.py'" in answer["error"] and "Nothing was requested" in answer["error"]
    # A worker with no bead in progress has no scope to widen.
    answer, err = await _ask(executor, tmp_path, epic, "w3", ["src/x.py"])
    assert err and "w3 has no bead in progress" in answer["error"], answer
    # The swarm's own files are never a bead's.
    answer, err = await _ask(executor, tmp_path, epic, "w1", [".pulse/STATE.md"])
    assert err and answer["granted"] is False and "the swarm's own files" in answer["error"]
    # Arguments outside the tool's schema (no paths, a wait too long) are refused before anything is asked.
    for arguments in ({"paths": [], "why": "x"}, {"paths": ["a"], "why": "x", "wait_seconds": 500}):
        result = await executor.call(ToolCall(session_id="s-w1", tool_call_id=uuid.uuid4().hex, role="pulsing",
                                              root=str(tmp_path), tool="request_scope", run_id=epic,
                                              lease_holder="w1", arguments={"reason": "r", **arguments}))
        assert result.is_error
    assert await _bead_files(nc, epic, "b1") == ["src/a.py"]


# --- reservations and the ranked ready work -----------------------------------------------------------------


async def _tool(executor: ToolExecutor, root: Path, tool: str, arguments: dict[str, Any], *, epic: str | None,
                holder: str | None) -> tuple[dict[str, Any], bool]:
    result = await executor.call(ToolCall(session_id=f"s-{holder}", tool_call_id=uuid.uuid4().hex, role="pulsing",
                                          root=str(root), tool=tool, run_id=epic, lease_holder=holder,
                                          arguments={"reason": "Working bead b1", **arguments}))
    return json.loads(result.content), result.is_error


async def test_reservations_meet_the_coordinators_leases_in_one_table(
        epic, leases: LeaseTable, executor: ToolExecutor, tmp_path: Path) -> None:
    got, err = await _tool(executor, tmp_path, "file_reservation_paths",
                           {"paths": ["docs/**"], "ttl_seconds": 120, "project_key": str(tmp_path),
                            "agent_name": "w1"}, epic=epic, holder="w1")
    assert not err and got["success"] is True, got
    assert [(g["path_pattern"], g["exclusive"], g["origin"]) for g in got["granted"]] == [("docs/**", True, "worker")]
    assert any(lease.holder == "w1" and lease.pattern == "docs/**" and lease.origin == "worker"
               for lease in await leases.leases(epic))
    # Another worker (and the coordinator, for a bead) meets it: all or nothing, the holder named.
    got, err = await _tool(executor, tmp_path, "file_reservation_paths", {"paths": ["docs/api.md", "lib/x.py"]},
                           epic=epic, holder="w2")
    assert err and got["success"] is False and got["granted"] == [], got
    assert [(c["holder"], c["path_pattern"]) for c in got["conflicts"]] == [("w1", "docs/**")]
    assert "'docs/**' held by w1 (exclusive)" in got["error"]
    assert not any(lease.pattern == "lib/x.py" for lease in await leases.leases(epic))
    # The coordinator's bead file of w2 cannot be reserved by w1 either.
    got, err = await _tool(executor, tmp_path, "file_reservation_paths", {"paths": ["src/b.py"], "exclusive": False},
                           epic=epic, holder="w1")
    assert err and got["conflicts"][0]["bead_id"] == "b2" and got["conflicts"][0]["origin"] == "coordinator"

    # Release: only the worker's own reservations go; its bead's files stay until the bead lands.
    got, err = await _tool(executor, tmp_path, "release_file_reservations", {"paths": ["docs/**", "src/a.py"]},
                           epic=epic, holder="w1")
    assert not err and got["released"] == ["docs/**"] and got["kept"] == ["src/a.py"], got
    live = {(lease.holder, lease.pattern) for lease in await leases.leases(epic)}
    assert ("w1", "docs/**") not in live and ("w1", "src/a.py") in live
    got, err = await _tool(executor, tmp_path, "release_file_reservations", {}, epic=epic, holder="w1")
    assert not err and got["released"] == []


async def test_shared_reservations_are_granted_to_readers_and_keep_writers_off(
        epic, leases: LeaseTable, executor: ToolExecutor, tmp_path: Path) -> None:
    for reader in ("w1", "w2"):
        got, err = await _tool(executor, tmp_path, "file_reservation_paths",
                               {"paths": ["docs/api.md"], "exclusive": False}, epic=epic, holder=reader)
        assert not err and got["granted"][0]["exclusive"] is False, got
    shared = sorted(lease.holder for lease in await leases.leases(epic) if lease.pattern == "docs/api.md")
    assert shared == ["w1", "w2"]
    got, err = await _tool(executor, tmp_path, "file_reservation_paths", {"paths": ["docs/*.md"]}, epic=epic,
                           holder="w3")
    assert err and sorted(c["holder"] for c in got["conflicts"]) == ["w1", "w2"]


async def test_reservation_errors_change_nothing(epic, leases: LeaseTable, executor: ToolExecutor,
                                                 tmp_path: Path) -> None:
    before = await leases.leases(epic)
    cases: list[tuple[dict[str, Any], str | None, str | None, str]] = [
        ({"paths": ["a.py"]}, None, None, "only available to swarm workers"),
        ({"paths": ["a.py"], "agent_name": "w2"}, epic, "w1", "You can only reserve as yourself"),
        ({"paths": ["a.py"], "project_key": str(uuid.uuid4())}, epic, "w1", "names another epic"),
        ({"paths": ["../a.py"]}, epic, "w1", "Invalid path '../a.py'"),
    ]
    for arguments, scope, holder, expected in cases:
        got, err = await _tool(executor, tmp_path, "file_reservation_paths", arguments, epic=scope, holder=holder)
        assert err and got["success"] is False and expected in got["error"], (arguments, got)
    got, err = await _tool(executor, tmp_path, "release_file_reservations", {"agent_name": "w2"}, epic=epic,
                           holder="w1")
    assert err and "only reserve as yourself" in got["error"]
    for arguments in ({"paths": []}, {"paths": ["a"], "ttl_seconds": 1}, {"paths": ["a"], "ttl_seconds": 7200}):
        _, err = await _tool(executor, tmp_path, "file_reservation_paths", arguments, epic=epic, holder="w1")
        assert err, arguments
    assert await leases.leases(epic) == before


async def test_robot_priority_ranks_the_ready_beads_with_each_part(epic, executor: ToolExecutor,
                                                                   tmp_path: Path) -> None:
    got, err = await _tool(executor, tmp_path, "robot_priority", {"limit": 5}, epic=epic, holder="w3")
    assert not err and got["epic_id"] == epic, got
    assert [b["bead_id"] for b in got["ready"]] == ["b3"]  # b1, b2 are in progress
    top = got["ready"][0]
    assert top["rank"] == 1 and set(top) >= {"score", "pagerank", "betweenness", "blocker_ratio", "staleness",
                                             "priority", "on_critical_path", "unblocks"}
    got, err = await _tool(executor, tmp_path, "robot_priority", {}, epic=None, holder=None)
    assert err and "only available to swarm workers" in got["error"]
    got, err = await _tool(executor, tmp_path, "robot_priority", {}, epic=str(uuid.uuid4()), holder="w1")
    assert err and "no beads yet" in got["error"], got
