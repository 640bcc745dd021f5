"""Where no sandbox can be made the shell refuses, and where the user turned it off it runs unconfined; both are
said at every start. These run on any kernel (the confinement itself is tested in test_sandbox.py)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.services.tools import landlock, sandbox
from autarch.services.tools.service import sandbox_warning

from .helpers import wait_gone
from .test_sandbox import Layout, tools_for


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


@pytest.fixture
def no_landlock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A kernel without Landlock, as the probe would find it."""
    monkeypatch.setattr(landlock, "abi_version", lambda: 0)
    sandbox.capabilities.cache_clear()
    yield
    sandbox.capabilities.cache_clear()


async def test_without_landlock_or_bubblewrap_the_shell_refuses_and_up_warns(layout: Layout, monkeypatch,
                                                                            no_landlock):
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name, *a, **k))
    sandbox.capabilities.cache_clear()
    try:
        for tools in tools_for(layout):
            value = await tools("shell", {"command": "echo ran > ran.txt"})
        assert value == {"success": False, "error": value["error"]}
        assert value["error"].startswith("Command refused: no sandbox is available: this kernel has no Landlock and "
                                         "bubblewrap (bwrap) is not installed")
        assert 'sandbox = "off"' in value["error"]
        assert not (layout.worktree / "ran.txt").exists()
        assert "no sandbox is available" in (sandbox_warning(layout.settings()) or "")
    finally:
        sandbox.capabilities.cache_clear()


async def test_sandbox_off_runs_unconfined_with_a_warning(layout: Layout):
    settings = layout.settings(sandbox="off")
    assert "UNCONFINED" in (sandbox_warning(settings) or "")
    for tools in tools_for(layout, sandbox="off"):
        value = await tools("shell", {"command": "cat ../../token"})
    assert value["stdout"] == "gateway-token-planted-4711\n"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed here")
async def test_without_landlock_bubblewrap_confines_the_command(layout: Layout, no_landlock):
    marker = f"{time.time_ns() % 10**6 + 6000}.{os.getpid()}"
    for tools in tools_for(layout):
        work = await tools("shell", {"command": "echo built > out.txt; cat out.txt; git log --oneline | wc -l"})
        escapes = await tools("shell", {"command": (
            f"cat ../../token; echo home: $(ls -A {Path.home()}); "
            "printf x > $(git rev-parse --git-common-dir)/hooks/pre-commit; "
            "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)' 2>&1 | tail -1; "
            f"(setsid sleep {marker} &); env | grep -c ANTHROPIC"
        )})
    assert work["stdout"] == "built\n1\n", work
    assert "gateway-token-planted" not in escapes["stdout"]
    assert "cat: ../../token: No such file or directory" in escapes["stderr"]  # the data dir is not even there
    # Of the home directory, only the way to this Python's installation (when it lives there) is mounted.
    home = next(line for line in escapes["stdout"].splitlines() if line.startswith("home:")).split()[1:]
    python_dirs = {Path(p).relative_to(Path.home()).parts[0] for p in (sys.prefix, sys.base_prefix)
                   if Path(p).is_relative_to(Path.home())}
    assert set(home) <= python_dirs
    assert "Read-only file system" in escapes["stderr"]
    assert "Network is unreachable" in escapes["stdout"]
    assert escapes["stdout"].endswith("0\n")
    assert "confined by bubblewrap" in (sandbox_warning(layout.settings()) or "")
    assert not (layout.repo / ".git" / "hooks" / "pre-commit").exists()
    assert not wait_gone(marker)
