"""Where no sandbox can be made the shell refuses, and where the user turned it off it runs unconfined; both are
said at every start. These run on any kernel (the confinement itself is tested in test_sandbox.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autarch.services.tools import landlock, sandbox
from autarch.services.tools.service import sandbox_warning

from .test_sandbox import Layout, tools_for


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


async def test_without_landlock_the_shell_refuses_and_up_warns(layout: Layout, monkeypatch):
    monkeypatch.setattr(landlock, "abi_version", lambda: 0)
    sandbox.capabilities.cache_clear()
    try:
        for tools in tools_for(layout):
            value = await tools("shell", {"command": "echo ran > ran.txt"})
        assert value == {"success": False, "error": value["error"]}
        assert value["error"].startswith("Command refused: no sandbox is available")
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
