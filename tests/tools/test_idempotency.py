"""A repeated call (same session and tool-call id) returns the recorded result; a mutating tool never runs twice."""

from __future__ import annotations

import asyncio
import json

import pytest

from autarch.runtime.errors import ServiceFailure
from autarch.services.tools.executor import _OWNER
from autarch.services.tools.service import build_executor


async def test_repeated_shell_call_runs_once(tools, worktree):
    first = await tools.result("shell", {"command": "echo ran >> log; cat log"}, call_id="call-1")
    again = await tools.result("shell", {"command": "echo ran >> log; cat log"}, call_id="call-1")
    assert (worktree / "log").read_text() == "ran\n"
    assert again.replayed and not first.replayed
    assert again.content == first.content
    other = await tools.result("shell", {"command": "echo ran >> log; cat log"}, call_id="call-2")
    assert not other.replayed and (worktree / "log").read_text() == "ran\nran\n"


async def test_repeated_write_does_not_overwrite_later_changes(tools, worktree):
    await tools("write_file", {"path": "a.txt", "content": "from the model"}, call_id="w-1")
    (worktree / "a.txt").write_text("changed since")
    replay = await tools.result("write_file", {"path": "a.txt", "content": "from the model"}, call_id="w-1")
    assert replay.replayed and json.loads(replay.content)["success"] is True
    assert (worktree / "a.txt").read_text() == "changed since"


async def test_concurrent_duplicates_run_once(tools, worktree):
    results = await asyncio.gather(
        *(tools.result("shell", {"command": "echo x >> log; sleep 0.3"}, call_id="same") for _ in range(5))
    )
    assert (worktree / "log").read_text() == "x\n"
    assert sum(not r.replayed for r in results) == 1


async def test_same_call_id_with_other_arguments_is_a_conflict(tools):
    await tools("shell", {"command": "true"}, call_id="dup")
    with pytest.raises(ServiceFailure) as conflict:
        await tools("shell", {"command": "rm -rf ."}, call_id="dup")
    assert conflict.value.code == "conflict"


async def test_recorded_results_survive_a_restart(tools, worktree, tool_settings):
    await tools("shell", {"command": "echo once >> log"}, call_id="persist")
    restarted = build_executor(tool_settings, grep_workers=0)
    try:
        replay = await type(tools)(restarted, worktree).result(
            "shell", {"command": "echo once >> log"}, call_id="persist"
        )
    finally:
        restarted.close()
    assert replay.replayed and (worktree / "log").read_text() == "once\n"


async def test_a_call_whose_process_died_is_run_again_once(tools, worktree, executor):
    # A claim by a process that no longer exists (pid 2**22 + 1 is above Linux's pid_max default): its commands
    # died with it, so the caller's retry runs the call again, and a further repeat replays that run.
    dead_owner = _OWNER.split(":")[0] + ":4194305:deadbeef"
    arguments = {"reason": "test", "command": "echo ran >> log"}
    import hashlib

    import msgspec

    digest = hashlib.sha256(b"shell\0" + msgspec.json.encode(arguments, order="sorted")).hexdigest()
    executor.store.claim("session-1", "crashed", "shell", digest, dead_owner)
    first = await tools.result("shell", {"command": "echo ran >> log"}, call_id="crashed")
    assert not first.is_error and not first.replayed
    assert (worktree / "log").read_text() == "ran\n"
    again = await tools.result("shell", {"command": "echo ran >> log"}, call_id="crashed")
    assert again.replayed and again.content == first.content
    assert (worktree / "log").read_text() == "ran\n"


async def test_read_only_tools_are_not_recorded(tools, worktree):
    (worktree / "a.txt").write_text("one\n")
    first = await tools("read_file", {"path": "a.txt"}, call_id="r")
    (worktree / "a.txt").write_text("two\n")
    second = await tools.result("read_file", {"path": "a.txt"}, call_id="r")
    assert first == "     1\tone" and second.content == "     1\ttwo" and not second.replayed
