"""``autarch tools call`` and ``autarch tools list`` as a person (or a script) runs them."""

from __future__ import annotations

import json
import subprocess
import sys


def autarch(*args: str, data_dir=None) -> subprocess.CompletedProcess[str]:
    extra = ["--data-dir", str(data_dir)] if data_dir is not None else []
    return subprocess.run(
        [sys.executable, "-m", "autarch.cli.main", *args, *extra], capture_output=True, text=True, timeout=60
    )


def test_call_prints_the_json_result_and_keeps_read_before_edit_across_runs(worktree, tmp_path):
    (worktree / "a.py").write_text("x = 1\n")
    data = tmp_path / "data"
    read = autarch(
        "tools", "call", "read_file", "--root", str(worktree), '{"reason": "r", "path": "a.py"}', data_dir=data
    )
    assert read.returncode == 0 and json.loads(read.stdout) == "     1\tx = 1"
    edit = autarch(
        "tools", "call", "edit_file", "--root", str(worktree), "--session", "cli",
        '{"reason": "r", "path": "a.py", "oldString": "1", "newString": "2"}', data_dir=data,
    )  # fmt: skip
    assert edit.returncode == 0 and json.loads(edit.stdout) == {"success": True}
    assert (worktree / "a.py").read_text() == "x = 2\n"
    missing = autarch(
        "tools", "call", "read_file", "--root", str(worktree), '{"reason": "r", "path": "b"}', data_dir=data
    )
    assert missing.returncode == 1 and json.loads(missing.stdout) == {"error": "File not found: b"}
    denied = autarch(
        "tools", "call", "write_file", "--root", str(worktree), "--role", "plan",
        '{"reason": "r", "path": "c", "content": "x"}', data_dir=data,
    )  # fmt: skip
    assert denied.returncode == 1 and "not available to the plan agent" in denied.stdout
    bad = autarch("tools", "call", "read_file", "--root", str(worktree), "not json", data_dir=data)
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr


def test_list_prints_a_roles_definitions(tmp_path):
    listed = autarch("tools", "list", "--role", "preflight")
    assert listed.returncode == 0
    assert [d["name"] for d in json.loads(listed.stdout)][-2:] == ["shell", "record_baseline"]
