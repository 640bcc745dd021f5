"""Where the registry forwarder lives in the launch server's sandbox: in the preflight command's namespaces as the
init's child, gone with the command, and never in a pulse's sandbox, not even one started by the spare launcher
made right after a preflight call.

Real ``shell`` calls through the real executor (its launch server included), against a local registry.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.runtime.settings import Settings
from autarch.services.tools import sandbox
from autarch.services.tools.egress import PROXY_PORT
from autarch.services.tools.service import build_executor

from .helpers import Tools, make_repo
from .test_egress import Registry, fetch, registry  # noqa: F401  (the registry fixture)

pytestmark = pytest.mark.skipif(
    sandbox.capabilities().landlock_abi < 1 or not sandbox.capabilities().namespaces,
    reason="the registry proxy needs Landlock and user namespaces (a network namespace per command)",
)

LIST_NAMESPACE = (
    # Builtins only, so the shell has no child of its own while it looks: every process but the init (1) and
    # the shell itself is printed as "pid ppid".
    'read -r kids < /proc/$$/task/$$/children; echo "shell children: [$kids]"; '
    "for dir in /proc/[0-9]*; do pid=${dir#/proc/}; [ $pid = 1 ] || [ $pid = $$ ] && continue; "
    'read -r stat < $dir/stat 2>/dev/null || continue; rest=${stat##*) }; set -- $rest; echo "other: $pid $2"; '
    "done; "
)


@pytest.fixture
def tools(tmp_path: Path, registry: Registry) -> Iterator[Tools]:  # noqa: F811
    worktree = make_repo(tmp_path / "project", {"README.md": "project\n"})
    settings = Settings(
        data_dir=str(tmp_path / "data"), request_timeout=5.0, restart_grace=0.5,
        sandbox_registry_hosts=(f"registry.test:{registry.port}",),
        sandbox_registry_resolve=("registry.test=127.0.0.1",),
    )
    executor = build_executor(settings, grep_workers=0)
    yield Tools(executor, worktree)
    executor.close()


def _live_children(pid: int) -> list[int]:
    """The children of ``pid`` that still run (an ended one not yet reaped is left out)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue  # gone meanwhile
            if state != "Z":
                found.append(int(child))
    return found


def _in_namespace(namespace: str) -> list[int]:
    """Live processes of this machine in the PID namespace ``namespace`` (``pid:[inode]``)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == namespace:
                    found.append(int(name))
            except OSError:
                continue
    return found


async def test_the_forwarder_is_the_inits_child_and_ends_with_the_command(tools: Tools, registry: Registry):  # noqa: F811
    value = await tools("shell", {"command": (
        "readlink /proc/self/ns/pid; " + LIST_NAMESPACE + fetch("registry.test", registry.port, tunnel=True)
    )}, role="preflight")
    assert value["exit_code"] == 0, value
    namespace, children, *others, fetched = value["stdout"].splitlines()
    # One process beside the init and the shell: the forwarder, a child of the init, not of the shell.
    assert children == "shell children: []", value
    assert len(others) == 1 and others[0].startswith("other: ") and others[0].endswith(" 1"), value
    assert fetched == "served by the registry"
    assert namespace.startswith("pid:[") and _in_namespace(namespace) == []  # gone with the command


async def test_a_pulse_after_a_preflight_call_has_no_forwarder(tools: Tools, registry: Registry):  # noqa: F811
    preflight = await tools("shell", {"command": LIST_NAMESPACE}, role="preflight")
    assert len([line for line in preflight["stdout"].splitlines() if line.startswith("other: ")]) == 1, preflight
    # The launch server readies its spare launcher (a child of its own, waiting), which the pulse then gets.
    server = tools.executor.launcher.pid
    assert server is not None, "the preflight call started no launch server"
    async with asyncio.timeout(10):
        while not _live_children(server):
            await asyncio.sleep(0.01)
    pulse = await tools("shell", {"command": LIST_NAMESPACE + fetch(
        "registry.test", registry.port, tunnel=True, proxy=f"'http://127.0.0.1:{PROXY_PORT}'")})
    assert pulse["stdout"] == "shell children: []\n", pulse
    assert "Connection refused" in pulse["stderr"], pulse
    assert len(registry.requests) == 0
