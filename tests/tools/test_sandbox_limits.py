"""Resource limits of a sandboxed command, tried as a runaway or hostile command would: each is stopped, the result
names the limit and its value, and the service (this process) keeps answering.

Every test runs twice: with the cgroups this machine lets the tools service make (skipped where there are none),
and with the per-process fallbacks alone, as on a machine without cgroup write access. Limits are lowered through
the settings to stay fast; the allocation and the write are the sizes of the issue (30 GiB, 20 GiB), and each
runs only after a smaller one showed the limit in place, so a limit that failed cannot take the machine down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import resource
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.contracts import subjects
from autarch.contracts.tools import LIST_TOOLS, ListTools, ToolCall, ToolDefinitions, ToolResult
from autarch.runtime.requests import request
from autarch.runtime.settings import SettingsError
from autarch.services.tools import sandbox, sandbox_limits
from autarch.services.tools.commands import limit_report
from autarch.services.tools.service import start
from autarch.services.tools.shell import LimitHit

from .helpers import Tools, processes_with, wait_gone
from .test_sandbox import Layout, tools_for

pytestmark = pytest.mark.skipif(
    sandbox.capabilities().landlock_abi < 1 or not sandbox.capabilities().namespaces,
    reason="this kernel offers no Landlock or no user namespaces (test_sandbox_refusal.py still runs)",
)

MIB = 1024 * 1024
GIB = 1024 * MIB
# bytearray() fills its memory with zeros, so every page is really used.
ALLOCATE = ("python3 -c 'import sys, time; a = [bytearray(64 << 20) for _ in range(int(sys.argv[1]))]; "
            "time.sleep(5); print(\"kept\")' {}")
"""Allocate N times 64 MiB, and hold on to all of it for 5 s (long enough for a poll to see it)."""
SPREAD = "for i in 1 2 3 4; do " + ALLOCATE + " & done; wait"
"""Four processes allocating N times 64 MiB each."""


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


@pytest.fixture(params=["cgroups", "fallback"])
def mechanism(request: pytest.FixtureRequest) -> str:
    if request.param == "cgroups" and sandbox_limits.cgroup_layout() is None:
        pytest.skip("this machine gives the tools service no cgroup of its own (the fallback variant runs)")
    return request.param


def limited(layout: Layout, mechanism: str, **settings: object) -> Iterator[Tools]:
    """Tools whose commands run under ``settings``; the fallback variant as if no cgroup could be made."""
    for tools in tools_for(layout, **settings):
        if mechanism == "fallback":
            executor = tools.executor
            policy = dataclasses.replace(executor.settings.sandbox, cgroups=False)
            executor.settings = dataclasses.replace(executor.settings, sandbox=policy)
        yield tools


async def sh(tools: Tools, command: str, timeout: float = 60) -> dict:
    return await tools("shell", {"command": command, "timeoutSeconds": timeout})


def stopped_at(value: dict, name: str, amount: int, unit: str, setting: str) -> None:
    """The seed's error shape, plus the limit: which one, its value, the setting that raises it."""
    assert value["success"] is False, value
    assert value["limit"] == {"name": name, "value": amount, "unit": unit, "setting": setting}, value
    assert f"{amount} {unit} (setting {setting})" in value["error"], value["error"]
    assert {"stdout", "stderr", "exit_code"} <= set(value)


async def still_answers(tools: Tools) -> None:
    value = await sh(tools, "echo still here")
    assert value == {"success": True, "exit_code": 0, "stdout": "still here\n", "stderr": ""}


async def test_a_bounded_fork_bomb_is_stopped_at_the_process_limit(layout: Layout, mechanism: str):
    marker = f"5.{time.time_ns() % 10**6:06d}{os.getpid() % 1000}"
    # Each level forks two copies of itself: 2047 processes at depth 10 if nothing stopped it.
    bomb = f"f() {{ if [ $1 -gt 0 ]; then f $(($1-1)) & f $(($1-1)) & wait; else sleep {marker}; fi; }}; f 10"
    # Only the process limit: it must hold, and be noticed, without the polled ones.
    for tools in limited(layout, mechanism, sandbox_processes=64, sandbox_write_mib=0, sandbox_cpu_seconds=0,
                         sandbox_memory_mib=0):
        started = time.monotonic()
        value = await sh(tools, bomb, timeout=120)
        assert time.monotonic() - started < 60
        stopped_at(value, "processes", 64, "processes and threads", "sandbox_processes")
        assert "Command stopped: it reached the sandbox's limit of 64 processes and threads" in value["error"]
        await still_answers(tools)
    assert not wait_gone(marker)


async def test_a_30_gib_allocation_is_stopped_at_the_memory_limit(layout: Layout, mechanism: str):
    for tools in limited(layout, mechanism, sandbox_memory_mib=256):
        # Four processes of 256 MiB each: over the limit together, none over it (or its fallback bound) alone.
        probe = await sh(tools, SPREAD.format(4))
        stopped_at(probe, "memory", 256, "MiB", "sandbox_memory_mib")
        assert "kept" not in probe["stdout"]
        # The limit holds: now the 30 GiB, in one process (this machine has 24 GiB).
        value = await sh(tools, ALLOCATE.format(30 * 1024 // 64))
        assert "kept" not in value["stdout"], value
        if mechanism == "cgroups" or "limit" in value:
            stopped_at(value, "memory", 256, "MiB", "sandbox_memory_mib")
            assert value["error"].startswith("Command stopped: its processes reached the sandbox's memory limit")
        else:  # the fallback's per-process bound refused the allocation before the poll saw it grow
            assert value["exit_code"] != 0 and "MemoryError" in value["stderr"], value
        await still_answers(tools)


async def test_a_20_gib_write_is_stopped_at_the_write_limit(layout: Layout, mechanism: str):
    for tools in limited(layout, mechanism, sandbox_write_mib=256, sandbox_file_size_mib=0):
        try:
            probe = await sh(tools, "head -c 2G /dev/zero > probe; echo wrote")
            stopped_at(probe, "write", 256, "MiB", "sandbox_write_mib")
            assert (layout.worktree / "probe").stat().st_size < 2 * GIB and "wrote" not in probe["stdout"]
            # The limit holds: now the 20 GiB, in files of 1 GiB.
            value = await sh(tools, "for i in $(seq 20); do head -c 1G /dev/zero > big$i; done; echo wrote")
            stopped_at(value, "write", 256, "MiB", "sandbox_write_mib")
            assert "Command stopped: it wrote" in value["error"] and "wrote" not in value["stdout"]
            written = sum(path.stat().st_size for path in layout.worktree.glob("big*"))
            assert 256 * MIB <= written < 2 * GIB, written
            await still_answers(tools)
        finally:
            for path in [*layout.worktree.glob("big*"), layout.worktree / "probe"]:
                path.unlink(missing_ok=True)


async def test_a_20_gib_file_is_cut_at_the_file_size_limit(layout: Layout, mechanism: str):
    for tools in limited(layout, mechanism, sandbox_file_size_mib=64):
        try:
            value = await sh(tools, "head -c 20G /dev/zero > big")
            stopped_at(value, "file_size", 64, "MiB", "sandbox_file_size_mib")
            assert value["exit_code"] == 128 + signal.SIGXFSZ and "File size limit exceeded" in value["stderr"]
            assert value["error"].startswith("A process of the command was killed (SIGXFSZ)")
            assert (layout.worktree / "big").stat().st_size == 64 * MIB
            await still_answers(tools)
        finally:
            (layout.worktree / "big").unlink(missing_ok=True)


async def test_a_busy_loop_is_stopped_at_the_cpu_limit(layout: Layout, mechanism: str):
    for tools in limited(layout, mechanism, sandbox_cpu_seconds=1):
        started = time.monotonic()
        value = await sh(tools, "(while :; do :; done) & (while :; do :; done) & wait; echo finished", timeout=120)
        assert time.monotonic() - started < 60
        stopped_at(value, "cpu", 1, "seconds", "sandbox_cpu_seconds")
        assert "Command stopped: its processes used" in value["error"] and "finished" not in value["stdout"]
        await still_answers(tools)


async def test_real_work_passes_under_the_default_limits(layout: Layout, mechanism: str):
    # An npm install (from a local package: no network here) and node, which reserves far more address space
    # than it uses (a test run under the defaults: test_sandbox.py's normal work).
    command = (
        "set -e; mkdir dep; echo '{\"name\": \"dep\", \"version\": \"1.0.0\"}' > dep/package.json; "
        "echo 'module.exports = () => 42' > dep/index.js; "
        "echo '{\"name\": \"app\", \"version\": \"1.0.0\"}' > package.json; "
        "npm install ./dep --offline --no-audit --no-fund >/dev/null; node -e 'console.log(require(\"dep\")())'"
    )
    for tools in limited(layout, mechanism):
        value = await sh(tools, command, timeout=240)
    assert value == {"success": True, "exit_code": 0, "stdout": "42\n", "stderr": value["stderr"]}, value


async def test_a_pipe_closed_early_ends_the_writer_quietly(layout: Layout):
    # The launcher is Python, which ignores SIGPIPE and SIGXFSZ; a command must get their default action back,
    # or `yes | head` complains of a broken pipe and a writer past the file size limit is never stopped.
    for tools in tools_for(layout):
        value = await sh(tools, "yes | head -1; grep '^SigIgn' /proc/self/status")
    assert value == {"success": True, "exit_code": 0, "stdout": "y\nSigIgn:\t0000000000000000\n", "stderr": ""}


async def test_limits_bound_the_command_never_the_service(layout: Layout, mechanism: str):
    # The service runs in this process here: its cgroups and resource limits stay what they were.
    kinds = (resource.RLIMIT_FSIZE, resource.RLIMIT_CPU, resource.RLIMIT_DATA, resource.RLIMIT_NPROC)
    own = Path("/proc/self/cgroup").read_text(), [resource.getrlimit(kind) for kind in kinds]
    for tools in limited(layout, mechanism, sandbox_memory_mib=128, sandbox_file_size_mib=1, sandbox_cpu_seconds=5):
        value = await sh(tools, SPREAD.format(2))
        assert value["success"] is False and value["limit"]["name"] == "memory"
        limits = await sh(tools, "ulimit -f; ulimit -t")
        assert limits["stdout"] == "1024\n7\n"  # KiB; the CPU backstop is two seconds over the poll's limit
        assert (Path("/proc/self/cgroup").read_text(), [resource.getrlimit(kind) for kind in kinds]) == own
        await still_answers(tools)


async def test_the_launch_server_removes_its_cgroups_and_a_new_one_sweeps_a_dead_ones(layout: Layout):
    cgroups = sandbox_limits.cgroup_layout()
    if cgroups is None:
        pytest.skip("this machine gives the tools service no cgroup of its own")

    def leftovers(pid: int) -> list[str]:
        return [name for parent in set(cgroups.dirs.values()) for name in os.listdir(parent)
                if name.startswith(f"autarch-sandbox-{pid}-")]

    for tools in tools_for(layout):
        await still_answers(tools)
        server: int = tools.executor.launcher.pid  # type: ignore[assignment]  # a running launcher has one
        assert server is not None and leftovers(server)  # the pool's cgroups (and the spare's)
    assert not leftovers(server)  # closed cleanly: all removed

    for tools in tools_for(layout):
        await still_answers(tools)
        killed: int = tools.executor.launcher.pid  # type: ignore[assignment]  # a running launcher has one
        os.kill(killed, signal.SIGKILL)  # no chance to clean up
        while os.waitpid(killed, os.WNOHANG) == (0, 0):
            await asyncio.sleep(0.01)
        deadline = time.monotonic() + 10
        while any(Path(parent, name, "cgroup.procs").read_text().strip()
                  for parent in set(cgroups.dirs.values()) for name in leftovers(killed)):
            assert time.monotonic() < deadline, "the dead server's commands are still there"
            await asyncio.sleep(0.05)
        assert leftovers(killed)
        await still_answers(tools)  # a new server, started for this command, swept the dead one's
        assert not leftovers(killed)


def test_a_limit_passed_just_before_the_command_ended_is_still_reported():
    # Between two polls a command may pass a polled limit and end by itself: its result says so, as a failure.
    sentence, field = limit_report(LimitHit("write", 256 * MIB, 300 * MIB, stopped=False))
    assert sentence == ("Command exceeded the sandbox's limit on bytes written to files of 256 MiB (setting "
                        "sandbox_write_mib): it wrote 300 MiB to files before it ended by itself")
    assert field == {"name": "write", "value": 256, "unit": "MiB", "setting": "sandbox_write_mib"}
    sentence, _ = limit_report(LimitHit("cpu", 2, 2.04, stopped=False))
    assert sentence.endswith("its processes used 2.04 s of CPU time before it ended by itself")


def test_negative_limits_are_refused_with_the_setting_named(layout: Layout):
    with pytest.raises(SettingsError, match="sandbox_memory_mib must be 0 \\(no limit\\) or more, got -1"):
        layout.settings(sandbox_memory_mib=-1)


# --- over NATS: the real tools service ----------------------------------------------------------------------


async def test_the_tools_service_keeps_answering_when_a_command_runs_out_of_memory(nc, layout: Layout):
    settings = layout.settings(sandbox_memory_mib=256, tools_grep_workers=0)
    stop = await start(nc, settings)
    try:
        call = ToolCall(session_id="s", tool_call_id="oom", role="pulsing", root=str(layout.worktree), tool="shell",
                        arguments={"reason": "test", "command": ALLOCATE.format(30 * 1024 // 64)})
        result = await request(nc, subjects.request("tools", "call"), call, ToolResult, timeout=60)
        assert result.is_error and '"name":"memory"' in result.content, result.content
        listed = await request(nc, subjects.request("tools", LIST_TOOLS), ListTools(role="pulsing"), ToolDefinitions)
        assert any(tool.name == "shell" for tool in listed.tools)
        after = ToolCall(session_id="s", tool_call_id="after", role="pulsing", root=str(layout.worktree),
                         tool="shell", arguments={"reason": "test", "command": "echo still here"})
        answer = await request(nc, subjects.request("tools", "call"), after, ToolResult, timeout=30)
        assert not answer.is_error and "still here" in answer.content
    finally:
        await stop()


async def test_a_launch_server_that_dies_takes_its_commands_with_it_and_is_started_again(layout: Layout):
    marker = f"7.{time.time_ns() % 10**6:06d}{os.getpid() % 1000}"
    for tools in tools_for(layout):
        await still_answers(tools)
        server: int = tools.executor.launcher.pid  # type: ignore[assignment]  # a running launcher has one
        call = asyncio.create_task(sh(tools, f"(setsid sleep {marker} &); sleep {marker}; echo never"))
        while not processes_with(marker):
            assert not call.done(), call.result()
            await asyncio.sleep(0.02)
        os.kill(server, signal.SIGKILL)
        value = await asyncio.wait_for(call, 30)
        assert value["success"] is False and "never" not in value.get("stdout", ""), value
        assert value["error"] == ("The sandbox's launch server stopped while the command ran, and the command was "
                                  "killed with it: it may have done part of its work. Check the current state "
                                  "before running it again")
        assert not wait_gone(marker)  # the launcher, the init and the command (setsid or not) died with it
        await still_answers(tools)
        assert tools.executor.launcher.pid not in (None, server)
