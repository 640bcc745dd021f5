"""The sandbox, tried as a hostile agent would: every escape fails with a clear error; normal work still works.

Each test runs a real ``shell`` tool call through the real executor, with the layout ``autarch up`` makes: the
token in the data dir, the pulse's worktree a linked git worktree under ``<data dir>/worktrees/``, the user's
repository elsewhere.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.runtime.settings import Settings
from autarch.services.tools import sandbox
from autarch.services.tools.executor import ToolExecutor
from autarch.services.tools.service import build_executor, sandbox_warning

from .helpers import Tools, git, make_repo, wait_gone

pytestmark = pytest.mark.skipif(
    sandbox.capabilities().landlock_abi < 1 or not sandbox.capabilities().namespaces,
    reason="this kernel offers no Landlock or no user namespaces (test_sandbox_refusal.py still runs)",
)


class Layout:
    """The data dir with its token, the user's repository, and a pulse worktree linked to it."""

    def __init__(self, tmp: Path) -> None:
        self.data = tmp / "data"
        self.data.mkdir()
        self.token = self.data / "token"
        self.token.write_text("gateway-token-planted-4711\n")
        self.repo = make_repo(tmp / "user-repo", {"src/app.py": "def add(a, b):\n    return a + b\n",
                                                  "README.md": "app\n"})
        self.worktree = self.data / "worktrees" / "wf-1"
        self.worktree.parent.mkdir()
        git(self.repo, "worktree", "add", "-q", "-b", "autarch/wf-1", str(self.worktree))
        self.other = self.data / "worktrees" / "wf-2"
        self.other.mkdir()
        (self.other / "secret.txt").write_text("another workflow's file\n")

    def settings(self, **overrides: object) -> Settings:
        return Settings(data_dir=str(self.data), request_timeout=5.0, restart_grace=0.5, **overrides)  # type: ignore[arg-type]  # overrides are Settings fields


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def tools_for(layout: Layout, **overrides: object) -> Iterator[Tools]:
    executor: ToolExecutor = build_executor(layout.settings(**overrides), grep_workers=0)
    # The worktree's repository from a record (as `autarch tools call --repository` gives it), never its .git file.
    executor.git_records.trust_repository(str(layout.repo))
    try:
        yield Tools(executor, layout.worktree)
    finally:
        executor.close()


@pytest.fixture
def tools(layout: Layout) -> Iterator[Tools]:
    yield from tools_for(layout)


async def sh(tools: Tools, command: str, **kwargs: object) -> dict:
    return await tools("shell", {"command": command, **kwargs})


def refusals(stderr: str) -> int:
    """Lines saying a path is out of reach: denied by Landlock, or not there at all in the command's mounts."""
    return sum(1 for line in stderr.splitlines() if "Permission denied" in line or "No such file" in line)


async def test_normal_work_builds_tests_and_reads_git(tools: Tools, layout: Layout):
    value = await sh(tools, (
        "set -e; echo 'def test_add():\n    from src.app import add\n    assert add(2, 3) == 5' > test_app.py; "
        "python3 -c 'from src.app import add; print(add(2, 3))'; "
        "python3 -m pytest -q -p no:cacheprovider test_app.py | tail -1; "
        "git status --short; git log --oneline | wc -l; git diff --stat HEAD | tail -1; "
        "mkdir -p build && cc --version >/dev/null 2>&1; echo tmp=$(mktemp) > build/out.txt; cat build/out.txt"
    ))
    assert value["exit_code"] == 0, value
    out = value["stdout"]
    assert out.startswith("5\n") and "1 passed" in out and "?? test_app.py" in out
    assert "tmp=/tmp/autarch-sandbox-" in out
    assert (layout.worktree / "build" / "out.txt").is_file()


async def test_the_gateway_token_in_the_data_dir_cannot_be_read(tools: Tools, layout: Layout):
    value = await sh(tools, f"cat ../../token; cat {layout.token}; ls {layout.data}")
    assert "gateway-token-planted" not in value["stdout"]
    assert refusals(value["stderr"]) == 3, value["stderr"]


async def test_other_worktrees_home_and_tmp_are_out_of_reach(tools: Tools, layout: Layout):
    home = os.path.realpath(os.path.expanduser("~"))
    escape = f"/tmp/escape-{uuid.uuid4().hex}"
    value = await sh(tools, f"cat {layout.other}/secret.txt; ls {home}; ls /tmp; echo x > {escape}")
    assert "another workflow" not in value["stdout"]
    assert refusals(value["stderr"]) == 4, value["stderr"]


async def test_no_hook_can_be_written_into_the_users_repository(tools: Tools, layout: Layout):
    hook = layout.repo / ".git" / "hooks" / "pre-commit"
    value = await sh(tools, (
        "gitdir=$(sed 's/^gitdir: //' .git); common=$gitdir/$(cat $gitdir/commondir); "
        "printf '#!/bin/sh\\necho pwned > /tmp/pwned\\n' > $common/hooks/pre-commit; "
        "chmod +x $common/hooks/pre-commit; echo '[core]\\n\\thooksPath = /tmp' >> $common/config; "
        "git add -A"
    ))
    assert value["exit_code"] != 0
    assert "Permission denied" in value["stderr"]
    assert not hook.exists()
    assert "hooksPath" not in (layout.repo / ".git" / "config").read_text()


async def test_a_repository_checked_out_in_the_root_keeps_its_git_dir_read_only(layout: Layout):
    for tools in tools_for(layout):
        value = await tools("shell", {"command": (
            "git status --short; echo bad > .git/hooks/pre-commit; "
            "git -c user.name=a -c user.email=a@b commit -q --allow-empty -m sneaky"
        )}, root=layout.repo)
    assert value["exit_code"] != 0
    assert "Read-only file system" in value["stderr"]
    assert not (layout.repo / ".git" / "hooks" / "pre-commit").exists()
    assert git(layout.repo, "log", "--oneline").count("\n") == 1


async def test_the_services_environment_cannot_be_read_from_proc(tools: Tools, monkeypatch):
    secret = "planted-proc-secret-9137"
    monkeypatch.setenv("AUTARCH_ANTHROPIC_API_KEY", secret)
    value = await sh(tools, (
        "cat /proc/$PPID/environ | base64 -w0; echo; cat /proc/1/environ | base64 -w0; echo; "
        f"cat /proc/{os.getpid()}/environ | base64 -w0; echo; ls /proc | grep -c '^[0-9]'"
    ))
    encoded = base64.b64encode(secret.encode()).decode()
    assert secret not in value["stdout"] and encoded[:16] not in value["stdout"]
    assert int(value["stdout"].split()[-1]) <= 8  # only the sandbox's own processes are visible


async def test_only_allow_listed_variables_are_inherited(layout: Layout, monkeypatch):
    planted = {"DB_PASS": "planted-0001", "ANTHROPIC_API_KEY": "sk-ant-planted-0002", "HARMLESS": "planted-0003",
               "AUTARCH_DATA_DIR": "/planted/0004", "SOME_CONFIG": "kept-0005"}
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    for tools in tools_for(layout, sandbox_env=("SOME_CONFIG",)):
        value = await tools("shell", {"command": "env"})
    stdout: str = value["stdout"]  # type: ignore[index]  # the last loop's result
    names = {line.split("=", 1)[0] for line in stdout.splitlines()}
    assert "SOME_CONFIG=kept-0005" in stdout
    assert not names & {"DB_PASS", "ANTHROPIC_API_KEY", "HARMLESS", "AUTARCH_DATA_DIR"}
    set_by_the_sandbox = {"HOME", "TMPDIR", "TMP", "TEMP", "GIT_TERMINAL_PROMPT", "GIT_PAGER", "PAGER",
                          "PYTHONDONTWRITEBYTECODE", "AUTARCH_SANDBOX"}
    set_by_bash = {"PWD", "SHLVL", "_", "OLDPWD"}
    locale = {n for n in names if n.startswith("LC_")}
    assert names <= {*sandbox.PASSED_VARIABLES, "SOME_CONFIG", *set_by_the_sandbox, *set_by_bash, *locale}


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on loopback standing in for the gateway and NATS."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


CONNECT = ("python3 -c 'import socket,sys; socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), 3); "
           "print(\"connected\")' {port}")


async def test_the_network_is_off_but_loopback_inside_works(tools: Tools, listener: int):
    value = await sh(tools, CONNECT.format(port=listener))
    assert "connected" not in value["stdout"] and "Connection refused" in value["stderr"]
    inside = await sh(tools, (
        # Connect once the server listens (it takes a while to start on a busy machine): up to 10 s.
        "python3 -m http.server 18080 --bind 127.0.0.1 >/dev/null 2>&1 & "
        "for _ in $(seq 100); do " + CONNECT.format(port=18080) + " 2>/dev/null && break; sleep 0.1; done"
    ))
    assert inside["stdout"].strip() == "connected", inside


async def test_with_network_on_the_gateway_and_nats_ports_stay_closed(layout: Layout, listener: int):
    for tools in tools_for(layout, sandbox_network=True, sandbox_network_ports=(443,)):
        value = await tools("shell", {"command": CONNECT.format(port=listener)})
    assert "connected" not in value["stdout"] and "Permission denied" in value["stderr"]


async def test_a_setsid_daemon_ends_with_the_command(tools: Tools):
    marker = f"{time.time_ns() % 10**6 + 1000}.{os.getpid()}"
    value = await sh(tools, f"setsid sh -c 'while :; do sleep {marker}; done' </dev/null >/dev/null 2>&1 & "
                            f"(setsid sleep {marker}x &) ; nohup sleep {marker}y >/dev/null 2>&1 & echo started")
    assert value["stdout"] == "started\n"
    assert not wait_gone(marker)


async def test_a_timeout_ends_every_process_setsid_included(tools: Tools):
    marker = f"{time.time_ns() % 10**6 + 2000}.{os.getpid()}"
    started = time.monotonic()
    value = await sh(tools, f"(setsid sleep {marker} &); sleep {marker} & sleep {marker} & wait", timeoutSeconds=1)
    assert time.monotonic() - started < 10
    assert value["error"] == "Command timed out after 1 seconds"
    assert not wait_gone(marker)


async def test_processes_outside_cannot_be_signalled(tools: Tools):
    value = await sh(tools, f"kill -0 {os.getpid()}; kill -TERM 1; kill -KILL 1; echo alive")
    assert value["stdout"] == "alive\n"
    assert "No such process" in value["stderr"] and value["stderr"].count("Operation not permitted") == 2


def test_where_commands_are_confined_up_says_nothing(layout: Layout):
    assert sandbox_warning(layout.settings()) is None


async def test_settings_that_would_expose_the_data_dir_are_refused(layout: Layout):
    for tools in tools_for(layout, sandbox_read_paths=(str(layout.data.parent),)):
        value = await tools("shell", {"command": "cat ../../token"})
    assert value["success"] is False
    assert value["error"].startswith("Command refused: the sandbox would expose Autarch's data dir")


async def test_user_paths_widen_the_sandbox(layout: Layout, tmp_path: Path):
    tools_dir = tmp_path / "toolchain"
    (tools_dir / "bin").mkdir(parents=True)
    (tools_dir / "bin" / "mytool").write_text("#!/bin/sh\necho mytool ran\n")
    (tools_dir / "bin" / "mytool").chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    for tools in tools_for(layout, sandbox_read_paths=(str(tools_dir),), sandbox_write_paths=(str(cache),)):
        command = f"{tools_dir}/bin/mytool; echo c > {cache}/x; echo no > {tools_dir}/y"
        value = await tools("shell", {"command": command})
    assert value["stdout"] == "mytool ran\n" and (cache / "x").read_text() == "c\n"
    assert "Permission denied" in value["stderr"] and not (tools_dir / "y").exists()


async def test_the_private_temp_dir_is_removed_after_the_call(tools: Tools):
    value = await sh(tools, "echo $TMPDIR; touch $TMPDIR/left-behind")
    temp_dir = Path(value["stdout"].strip())
    assert temp_dir.name.startswith("autarch-sandbox-") and not temp_dir.exists()


async def test_unix_sockets_outside_are_out_of_reach(tools: Tools, tmp_path: Path):
    path = tmp_path / "db.sock"  # a database's or a container engine's socket, as /run and /tmp hold them
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    try:
        value = await sh(tools, (
            "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
            f"print(\"reached\")' {path}; ls -A /run | wc -l"
        ))
    finally:
        server.close()
    assert "reached" not in value["stdout"] and "No such file or directory" in value["stderr"]
    assert value["stdout"].strip() == "0"


def test_a_launch_that_fails_says_why_with_its_own_exit_code(layout: Layout):
    launch = sandbox.prepare_launch(sandbox.SandboxPolicy(data_dir=str(layout.data)), "true", root=str(layout.worktree))
    try:
        spec = sandbox.decode_spec(launch.argv[-1])
        spec["argv"] = ["/nonexistent/shell", "-c", "true"]
        done = subprocess.run([*launch.argv[:-1], sandbox.encode_spec(spec)], env=launch.env, capture_output=True,
                              text=True)
    finally:
        launch.cleanup()
    assert done.returncode == sandbox.LAUNCH_FAILED
    assert done.stderr.startswith("autarch-sandbox: [Errno 2] No such file or directory")


@pytest.fixture
def landlock_alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine that forbids user namespaces (some hardened distributions): Landlock is all there is."""
    abi = sandbox.capabilities().landlock_abi
    monkeypatch.setattr(sandbox, "capabilities", lambda: sandbox.Capabilities(abi, False, "forbidden here"))
    yield


async def test_landlock_alone_still_confines_files_and_tcp(layout: Layout, listener: int, landlock_alone):
    for tools in tools_for(layout):
        work = await tools("shell", {"command": "echo built > out.txt && cat out.txt && git status --short"})
        escapes = await tools("shell", {"command": f"cat ../../token; {CONNECT.format(port=listener)}"})
        refused = await tools("shell", {"command": "true"}, root=layout.repo)
    assert work["stdout"] == "built\n?? out.txt\n", work
    assert "gateway-token-planted" not in escapes["stdout"] and "connected" not in escapes["stdout"]
    assert escapes["stderr"].count("Permission denied") == 2, escapes["stderr"]
    assert refused["success"] is False and "holds its own .git" in refused["error"]


def _autogroup(process: Path) -> str:
    """The autogroup line of a process; empty where the kernel has none or groups it by cgroup instead."""
    try:
        return (process / "autogroup").read_text().strip()
    except FileNotFoundError:
        return ""


def _host_view(argv: bytes) -> tuple[int, str] | None:
    """The session id and autogroup line, seen from outside the sandbox, of the process running ``argv``."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == argv:
                fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
                return int(fields[3]), _autogroup(entry)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return None


async def test_commands_share_the_services_scheduling_group(tools: Tools):
    # A session of its own would be a CPU share of its own where the kernel groups by session (autogroup): twenty
    # commands would crowd out the whole control plane (see services/tools/shell.py). Confined, a command stays in
    # the tools service's session (the service runs in this process here), so it shares the service's share.
    # Seen from the host: inside the sandbox's PID namespace the session's leader has no number at all.
    seconds = f"1.{uuid.uuid4().int % 10**6:06d}"
    call = asyncio.create_task(sh(tools, f"sleep {seconds}; true"))
    while (seen := _host_view(b"sleep\0" + seconds.encode() + b"\0")) is None and not call.done():
        await asyncio.sleep(0.02)
    assert (await call)["exit_code"] == 0  # the command ends on its own: nothing left running after the test
    assert seen is not None, "the command never showed up in /proc"
    # Where autogroups are in effect (a process outside a cpu cgroup of its own) the file names the group; inside
    # one (as in many CI containers) the kernel prints nothing for either.
    assert seen == (os.getsid(0), _autogroup(Path("/proc/self"))), seen
