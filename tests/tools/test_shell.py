"""shell: timeouts that kill the whole process tree, an allow-listed environment, truncation, the preflight guard."""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgspec
import pytest

from autarch.contracts.tool_args import ShellArgs
from autarch.services.tools.service import build_executor
from autarch.services.tools.shell import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    OUTPUT_TRUNCATION_CHARS,
    effective_timeout,
    truncate_output,
)

from .helpers import Tools, git, make_repo, processes_with, wait_gone


def test_timeout_default_and_cap_are_the_seeds():
    assert DEFAULT_TIMEOUT_SECONDS == 60 and MAX_TIMEOUT_SECONDS == 300
    assert ShellArgs(reason="r", command="true").timeout_seconds == 60
    assert effective_timeout(None) == 60
    assert effective_timeout(5) == 5
    assert effective_timeout(301) == 300
    assert effective_timeout(10_000) == 300


def test_truncation_threshold_is_512_characters():
    assert OUTPUT_TRUNCATION_CHARS == 512
    assert truncate_output("x" * 512) == "x" * 512
    text = "H" * 128 + "m" * 10_000 + "T" * 384
    cut = truncate_output(text)
    assert cut.startswith("H" * 128 + "\n... [10000 characters omitted] ...\n") and cut.endswith("T" * 384)


async def test_success_shape_and_exit_code(tools, worktree):
    result = await tools.result("shell", {"command": "echo out; echo err >&2; pwd"})
    value = __import__("json").loads(result.content)
    assert value == {"success": True, "exit_code": 0, "stdout": f"out\n{worktree}\n", "stderr": "err\n"}
    assert not result.is_error
    failed = await tools.result("shell", {"command": "exit 3"})
    assert failed.is_error and '"exit_code":3' in failed.content


async def test_output_is_truncated(tools):
    value = await tools(
        "shell", {"command": "head -c 5000 /dev/zero | tr '\\0' a; echo; head -c 700 /dev/zero | tr '\\0' b >&2"}
    )
    assert value["stdout"].startswith("a" * 128 + "\n... [") and value["stdout"].endswith("a" * 383 + "\n")
    assert "characters omitted" in value["stderr"] and len(value["stderr"]) < 600


async def test_timeout_response_kills_every_child_and_grandchild(tools, worktree):
    marker = f"{time.time_ns() % 10**6 + 3000}.{os.getpid()}"
    command = (
        f"sleep {marker} & "
        f"(sleep {marker} & sleep {marker}) & "
        f"set -m; sleep {marker} & "  # job control: its own process group, same session
        "echo started; wait"
    )
    started = time.monotonic()
    value = await tools("shell", {"command": command, "timeoutSeconds": 1})
    assert time.monotonic() - started < 20
    assert value["success"] is False
    assert value["error"] == "Command timed out after 1 seconds"
    assert value["stdout"] == "started\n" and value["stderr"] == ""
    assert not wait_gone(marker)


async def test_unconfined_a_timeout_still_ends_a_job_control_child(tool_settings, worktree):
    # No PID namespace here: the command's own session is what finds a child that left its process group.
    executor = build_executor(msgspec.structs.replace(tool_settings, sandbox="off"), grep_workers=0)
    marker = f"{time.time_ns() % 10**6 + 3500}.{os.getpid()}"
    try:
        value = await Tools(executor, worktree)("shell", {
            "command": f"set -m; sleep {marker} & sleep {marker} & echo started; wait", "timeoutSeconds": 1})
    finally:
        executor.close()
    assert value["error"] == "Command timed out after 1 seconds" and value["stdout"] == "started\n"
    assert not wait_gone(marker)


async def test_background_processes_do_not_outlive_the_command(tools, worktree):
    marker = f"{time.time_ns() % 10**6 + 4000}.{os.getpid()}"
    value = await tools("shell", {"command": f"sleep {marker} & echo done"})
    assert value == {"success": True, "exit_code": 0, "stdout": "done\n", "stderr": ""}
    assert not wait_gone(marker)


async def test_environment_is_scrubbed_of_secrets(tools, monkeypatch):
    planted = {
        "ANTHROPIC_API_KEY": "sk-ant-planted-0001",
        "AWS_SECRET_ACCESS_KEY": "planted-aws-0002",
        "AUTARCH_DATA_DIR": "/planted/0003",
        "GITHUB_TOKEN": "planted-gh-0004",
        "MY_SERVICE_API_KEY": "planted-0005",
        "DB_PASSWORD": "planted-0006",
        "CLIENT_SECRET": "planted-0007",
        "OPENAI_API_KEY": "planted-0008",
        "DB_PASS": "planted-0009",
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    value = await tools("shell", {"command": "env"})
    for name, secret in planted.items():
        assert name not in value["stdout"] and secret not in value["stdout"]
    env = await tools("shell", {"command": 'echo $LANG; test -n "$PATH" && echo path'})
    assert env["stdout"] == "C.UTF-8\npath\n"


async def test_a_command_that_cannot_start_is_an_error(tools, worktree):
    value = await tools("shell", {"command": "definitely-not-a-command-xyz"})
    assert value["success"] is True and value["exit_code"] == 127
    assert "not found" in value["stderr"]


@pytest.fixture
def repo(worktree):
    return make_repo(worktree, {"tracked.txt": "v1\n", "src/lib.py": "x = 1\n", "dirty.txt": "d\n"})


async def test_preflight_may_create_untracked_artifacts(tools, repo):
    value = await tools(
        "shell", {"command": "mkdir -p node_modules/x && echo y > node_modules/x/i.js"}, role="preflight"
    )
    assert value == {"success": True, "exit_code": 0, "stdout": "", "stderr": ""}


async def test_preflight_reports_modified_tracked_files_as_failure(tools, repo):
    value = await tools("shell", {"command": "echo v2 >> tracked.txt; rm src/lib.py"}, role="preflight")
    assert value["success"] is False
    assert value["error"] == (
        "Preflight must not modify tracked files; this command left modified: src/lib.py, tracked.txt"
    )
    assert value["exit_code"] == 0
    result = await tools.result("shell", {"command": "true"}, role="preflight")
    assert not result.is_error  # already-modified files that the command leaves alone are not its doing


async def test_preflight_sees_changes_to_an_already_dirty_file(tools, repo):
    (repo / "dirty.txt").write_text("local edit\n")
    value = await tools("shell", {"command": "echo more >> dirty.txt"}, role="preflight")
    assert value["success"] is False and value["error"].endswith("left modified: dirty.txt")


SNEAKY_COMMIT = "git -c user.name=a -c user.email=a@b commit -q --allow-empty -m sneaky"


async def test_preflight_cannot_commit_in_the_sandbox(tools, repo):
    value = await tools("shell", {"command": SNEAKY_COMMIT}, role="preflight")
    assert value["success"] is True and value["exit_code"] != 0 and "Read-only file system" in value["stderr"]
    assert git(repo, "log", "--oneline").count("\n") == 1


async def test_unconfined_preflight_that_commits_is_caught(tool_settings, repo):
    executor = build_executor(msgspec.structs.replace(tool_settings, sandbox="off"), grep_workers=0)
    try:
        value = await Tools(executor, repo)("shell", {"command": SNEAKY_COMMIT}, role="preflight")
    finally:
        executor.close()
    assert value["success"] is False and value["error"].endswith("left modified: HEAD")


async def test_pulsing_shell_has_no_tracked_file_guard(tools, repo):
    value = await tools("shell", {"command": "echo v2 >> tracked.txt"}, role="pulsing")
    assert value["success"] is True


async def test_preflight_outside_a_git_worktree_is_an_error(tools, worktree):
    value = await tools("shell", {"command": "true"}, role="preflight")
    assert value["success"] is False
    assert value["error"].startswith("Preflight commands must run in a git worktree:")


def test_the_process_finder_sees_this_process():
    # This process's own command line (pytest's, or a parallel worker's): whatever runs the tests, it is found.
    marker = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().split(b"\0")[0].decode()
    assert os.getpid() in processes_with(marker)
