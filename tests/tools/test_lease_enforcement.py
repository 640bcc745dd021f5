"""File leases enforced by the real tools service over NATS: another holder's files are never changed."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.tools import ToolCall, ToolResult
from autarch.runtime.leases import LeaseGrant, LeaseTable
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.tools.executor import ToolExecutor
from autarch.services.tools.service import start

from .helpers import git, make_repo

SUBJECT = subjects.request("tools", "call")


@pytest.fixture
async def tools_service(nc: Client, tmp_path: Path) -> AsyncIterator[None]:
    settings = Settings(data_dir=str(tmp_path / "data"), tools_grep_workers=0)
    stop = await start(nc, settings)
    yield
    await stop()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {"src/app.py": "app = 1\n", "src/mine.py": "mine = 1\n", "run.sh": "#!/bin/sh\necho run\n"},
    )


@pytest.fixture
async def leased(nc: Client) -> tuple[LeaseTable, str]:
    """A workflow in which w2 holds src/app.py (bead b2) and w1 holds src/mine.py."""
    table = await LeaseTable.open(nc)
    scope = str(uuid.uuid4())
    assert isinstance(await table.acquire(scope, "w2", ["src/app.py", "run.sh"], bead_id="b2", ttl=60), LeaseGrant)
    assert isinstance(await table.acquire(scope, "w1", ["src/mine.py"], bead_id="b1", ttl=60), LeaseGrant)
    return table, scope


async def _call(
    nc: Client, root: Path, tool: str, arguments: dict[str, Any], *, holder: str | None, scope: str | None,
    session: str = "s1",
) -> tuple[ToolResult, Any]:
    call = ToolCall(
        session_id=session,
        tool_call_id=uuid.uuid4().hex,
        role="pulsing",
        root=str(root),
        tool=tool,
        arguments={"reason": "test", **arguments},
        run_id=scope,
        lease_holder=holder,
    )
    result = await request(nc, SUBJECT, call, ToolResult, timeout=30)
    return result, json.loads(result.content) if result.is_json else result.content


async def _write(nc: Client, root: Path, path: str, content: str, *, holder: str | None, scope: str) -> ToolResult:
    result, _ = await _call(nc, root, "write_file", {"path": path, "content": content}, holder=holder, scope=scope,
                            session=holder or "plain")
    return result


async def test_write_and_edit_of_another_holders_file_are_refused(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    _, scope = leased
    result, body = await _call(nc, repo, "write_file", {"path": "src/app.py", "content": "x"}, holder="w1", scope=scope)
    assert result.is_error and body["success"] is False
    assert "w2" in body["error"] and "'src/app.py'" in body["error"] and "bead b2" in body["error"]
    assert "until 20" in body["error"]
    assert body["lease"]["holder"] == "w2" and body["lease"]["bead_id"] == "b2"
    assert (repo / "src/app.py").read_text() == "app = 1\n"

    await _call(nc, repo, "read_file", {"path": "src/app.py"}, holder="w1", scope=scope)
    for tool, args in [
        ("edit_file", {"path": "src/app.py", "oldString": "app", "newString": "x"}),
        ("multi_edit", {"path": "./src/app.py", "edits": [{"oldString": "app", "newString": "x"}]}),
    ]:
        result, body = await _call(nc, repo, tool, args, holder="w1", scope=scope)  # type: ignore[arg-type]  # dicts
        assert result.is_error and "w2" in body["error"] and body["lease"]["pattern"] == "src/app.py", body
        assert (repo / "src/app.py").read_text() == "app = 1\n"


async def test_holder_itself_its_bead_files_and_sessions_without_holder_may_write(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    _, scope = leased
    assert not (await _write(nc, repo, "src/app.py", "by w2\n", holder="w2", scope=scope)).is_error
    assert not (await _write(nc, repo, "src/mine.py", "w1\n", holder="w1", scope=scope)).is_error
    # A session that is not a swarm worker is not subject to leases at all.
    assert not (await _write(nc, repo, "src/app.py", "plain\n", holder=None, scope=scope)).is_error
    assert (repo / "src/app.py").read_text() == "plain\n"


async def test_shell_changes_to_leased_files_are_put_back(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    _, scope = leased
    (repo / "src/app.py").write_text("dirty before\n")  # already differing from HEAD: its bytes come back
    os.chmod(repo / "run.sh", 0o755)
    git(repo, "add", "run.sh")
    git(repo, "commit", "-q", "-m", "exec")
    command = (
        "echo clobbered > src/app.py; echo gone > run.sh; chmod 644 run.sh; "
        "echo w1 > src/mine.py; echo new > notes.txt"
    )
    result, body = await _call(nc, repo, "shell", {"command": command}, holder="w1", scope=scope)
    assert result.is_error and body["success"] is False, body
    assert "w2" in body["error"] and "src/app.py" in body["error"] and "run.sh" in body["error"]
    assert sorted(conflict["path"] for conflict in body["lease_conflicts"]) == ["run.sh", "src/app.py"]
    assert all(conflict["holder"] == "w2" and conflict["bead_id"] == "b2" for conflict in body["lease_conflicts"])
    assert sorted(body["restored"]) == ["run.sh", "src/app.py"]
    assert (repo / "src/app.py").read_text() == "dirty before\n"
    assert (repo / "run.sh").read_text() == "#!/bin/sh\necho run\n" and os.access(repo / "run.sh", os.X_OK)
    # The worker's own changes stand; the file outside its bead (notes.txt, leased by nobody) is put back too.
    assert (repo / "src/mine.py").read_text() == "w1\n"
    assert not (repo / "notes.txt").exists()
    assert body["outside_scope"]["paths"] == ["notes.txt"] and body["outside_scope"]["bead_files"] == ["src/mine.py"]


async def test_shell_creating_a_file_under_another_holders_glob_is_undone(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    table, scope = leased
    assert isinstance(await table.acquire(scope, "w2", ["docs/**"], bead_id="b2", ttl=60), LeaseGrant)
    result, body = await _call(nc, repo, "shell", {"command": "mkdir -p docs && echo x > docs/new.md"},
                               holder="w1", scope=scope)
    assert result.is_error and body["restored"] == ["docs/new.md"], body
    assert not (repo / "docs/new.md").exists()


async def test_shell_of_the_holder_and_of_plain_sessions_is_untouched(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    _, scope = leased
    result, body = await _call(nc, repo, "shell", {"command": "echo w2 > src/app.py"}, holder="w2", scope=scope)
    assert not result.is_error, body
    assert (repo / "src/app.py").read_text() == "w2\n"
    result, body = await _call(nc, repo, "shell", {"command": "echo plain > src/app.py"}, holder=None, scope=None)
    assert not result.is_error, body
    assert (repo / "src/app.py").read_text() == "plain\n"


async def test_a_lapsed_lease_no_longer_blocks(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    table, scope = leased
    await table.release(scope, "w2")
    # Free now, but still outside w1's bead until the coordinator gives it the file.
    assert (await _write(nc, repo, "src/app.py", "now\n", holder="w1", scope=scope)).is_error
    assert isinstance(await table.acquire(scope, "w1", ["src/app.py"], bead_id="b1", ttl=60), LeaseGrant)
    assert not (await _write(nc, repo, "src/app.py", "now\n", holder="w1", scope=scope)).is_error


# --- the bead's files are its scope --------------------------------------------------------------------------


async def test_writes_and_edits_outside_the_beads_files_are_refused_naming_them(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    _, scope = leased
    for tool, args in [
        ("write_file", {"path": "src/new.py", "content": "free\n"}),
        ("write_file", {"path": "README.md", "content": "x"}),
        ("edit_file", {"path": "src/app.py", "oldString": "app", "newString": "x"}),
    ]:
        result, body = await _call(nc, repo, tool, args, holder="w1", scope=scope)  # dicts
        if args["path"] == "src/app.py":
            assert result.is_error and "w2" in body["error"], body  # another holder's file: the lease error first
            continue
        assert result.is_error and body["code"] == "outside_bead_scope", body
        assert body["bead_files"] == ["src/mine.py"] and body["bead_id"] == "b1"
        assert "outside your bead's files (src/mine.py)" in body["error"] and "request_scope" in body["error"]
    assert not (repo / "src/new.py").exists() and not (repo / "README.md").exists()


async def test_a_workers_own_reservation_does_not_widen_its_bead(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    table, scope = leased
    assert isinstance(await table.acquire(scope, "w1", ["docs/**"], origin="worker", ttl=60), LeaseGrant)
    result, body = await _call(nc, repo, "write_file", {"path": "docs/a.md", "content": "x"}, holder="w1",
                               scope=scope)
    assert result.is_error and body["code"] == "outside_bead_scope" and body["bead_files"] == ["src/mine.py"]
    # Reserving its own bead file keeps it in scope (the coordinator's entry stays).
    assert isinstance(await table.acquire(scope, "w1", ["src/mine.py"], origin="worker", ttl=60), LeaseGrant)
    assert not (await _write(nc, repo, "src/mine.py", "still mine\n", holder="w1", scope=scope)).is_error


async def test_a_glob_bead_covers_new_files_beneath_it(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    table, scope = leased
    assert isinstance(await table.acquire(scope, "w3", ["pkg/**/*.py"], bead_id="b3", ttl=60), LeaseGrant)
    assert not (await _write(nc, repo, "pkg/deep/x.py", "x\n", holder="w3", scope=scope)).is_error
    assert (await _write(nc, repo, "pkg/deep/x.txt", "x\n", holder="w3", scope=scope)).is_error


async def test_a_worker_without_bead_leases_changes_nothing(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    _, scope = leased
    result, body = await _call(nc, repo, "write_file", {"path": "free.txt", "content": "x"}, holder="w9",
                               scope=scope)
    assert result.is_error and body["bead_files"] == [] and "you hold no bead's files" in body["error"], body


async def test_a_commands_changes_outside_the_bead_are_put_back_and_reported(
    nc: Client, tools_service: None, repo: Path, leased: tuple[LeaseTable, str]
) -> None:
    _, scope = leased
    command = "echo w1 > src/mine.py; echo stray > src/new.py; echo changed > src/app.py.bak; rm run.sh"
    result, body = await _call(nc, repo, "shell", {"command": command}, holder="w1", scope=scope)
    # run.sh is w2's: that is the lease error; the rest outside w1's bead is put back and listed beside it.
    assert body["restored"] == ["run.sh"] and (repo / "run.sh").exists(), body
    report = body["outside_scope"]
    assert report["code"] == "outside_bead_scope" and report["bead_files"] == ["src/mine.py"]
    assert report["paths"] == ["src/app.py.bak", "src/new.py"] and report["restored"] == report["paths"]
    assert not (repo / "src/new.py").exists() and not (repo / "src/app.py.bak").exists()
    assert (repo / "src/mine.py").read_text() == "w1\n"
    # Outside the bead only (no other holder's file): put back and reported, the command itself succeeded.
    result, body = await _call(nc, repo, "shell", {"command": "echo cache > .cache-file; echo ok"}, holder="w1",
                               scope=scope)
    assert not result.is_error and body["success"] is True and body["stdout"].strip() == "ok", body
    assert body["outside_scope"]["paths"] == [".cache-file"] and not (repo / ".cache-file").exists()


async def test_a_holders_write_fails_closed_without_a_lease_table(executor: ToolExecutor, worktree: Path) -> None:
    call = ToolCall(
        session_id="s1", tool_call_id="c1", role="pulsing", root=str(worktree), tool="write_file",
        arguments={"reason": "test", "path": "a.py", "content": "x"}, run_id=str(uuid.uuid4()), lease_holder="w1",
    )
    result = await executor.call(call)
    assert result.is_error and "leases cannot be checked" in json.loads(result.content)["error"]
    assert not (worktree / "a.py").exists()
