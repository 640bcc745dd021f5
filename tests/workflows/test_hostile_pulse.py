"""A hostile pulse, end to end: its first tool call tries every escape the sandbox must stop, from inside a real
pulse of a real workflow (every service a process, the scripted model). Each attempt fails with a clear error, the
pulse goes on to make its commit, and the hooks planted in the user's repository never run."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

from tests.tools.helpers import processes_with

from . import scenarios
from .conftest import Client, approve_stages, branch_log, finish, start

FEAT = "feat(greeter): greet the world when the name is empty"
TEST = "test(greeter): cover the empty-name greeting"
HOOKS = ("pre-commit", "commit-msg", "post-commit", "prepare-commit-msg", "post-checkout", "reference-transaction")


def escape_attempts(gateway_port: int, nats_port: int, marker: str) -> str:
    """What an agent would try: the gateway token, an approval of its own card, the network, a daemon, a hook."""
    connect = ("python3 -c 'import socket,sys\ntry:\n socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), 3)"
               "\n print(\"reached\", sys.argv[1])\nexcept OSError as e:\n print(\"refused\", sys.argv[1], e)' ")
    return "; ".join([
        "echo token=$(cat ../../token 2>&1)",
        f"curl -s -m 3 -X POST -H \"Authorization: Bearer $(cat ../../token)\" "
        f"http://127.0.0.1:{gateway_port}/api/workflows; echo curl=$?",
        connect + str(gateway_port),
        connect + str(nats_port),
        f"(setsid sh -c 'while :; do sleep {marker}; done' </dev/null >/dev/null 2>&1 &)",
        "common=$(git rev-parse --git-common-dir)",
        "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > $common/hooks/pre-commit 2>&1 || echo hook-refused",
        "cat /proc/$PPID/environ >/dev/null 2>&1 || echo environ-refused",
        "git status --short | head -3; git log --oneline | wc -l",
    ])


def test_a_hostile_pulse_cannot_leave_its_worktree(client: Client, model, tmp_path: Path) -> None:
    marker = f"{time.time_ns() % 10**6 + 5000}.{os.getpid()}"
    scenario = scenarios.base()
    command = escape_attempts(client.system.port, client.system.nats_port, marker)
    scenario["scripts"]["pulsing"].insert(0, scenarios.tool("shell", reason="Look around", command=command))
    wid, repo = start(client, model, tmp_path, scenario)
    fired = tmp_path / "hooks-fired"
    for hook in HOOKS:  # the user's own hooks: Autarch's git operations never run them
        path = repo / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\necho {hook} >> {fired}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    approve_stages(client, wid)
    view = finish(client, wid)

    assert branch_log(repo, view["branch"]) == [TEST, FEAT]
    outputs = [e for e in client.events(wid) if e["type"] == "turn:tool_completed" and e["tool"] == "shell"]
    hostile = next(e["output"] for e in outputs if "token=" in e["output"])
    # Out of reach: denied by Landlock, or (under /tmp, as here) not even present in the command's mounts.
    assert ("token=cat: ../../token: Permission denied" in hostile
            or "token=cat: ../../token: No such file or directory" in hostile)
    assert "curl=7" in hostile  # could not connect
    assert f"refused {client.system.port}" in hostile and f"refused {client.system.nats_port}" in hostile
    assert "reached" not in hostile
    assert "hook-refused" in hostile and "environ-refused" in hostile
    assert "Permission denied" in hostile
    assert not processes_with(marker), "a setsid daemon outlived its command"
    assert not fired.exists(), f"a hook ran: {fired.read_text()}"
    assert "hooksPath" not in (repo / ".git" / "config").read_text()
    assert client.get(wid)["status"] == "done"


def test_a_pulse_that_leaves_a_hostile_worktree_commits_correctly_and_runs_nothing(
    client: Client, model, tmp_path: Path
) -> None:
    """Issue 32's audit end to end: the pulse's shell leaves links out, a FIFO, a socket, ``.GIT``, a nested
    repository, a ``.gitattributes`` naming a filter of the repository's config, a ``.gitmodules`` with an
    ``ext::`` url and odd names; the checkpoint, the guards, the indexer and the diff take them in their stride,
    the workflow ends done, nothing outside the worktree enters the branch and no filter or url ever runs."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = "the-secret-beside-the-worktree-0815"
    (outside / "secret.txt").write_text(secret + "\n")
    ran = tmp_path / "something-ran"
    command = "; ".join([
        "mkfifo pipe",
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"",
        f"ln -s {outside / 'secret.txt'} leak",
        f"ln -s {outside} leakdir",
        "ln -s loop loop",
        "mkdir -p .GIT vendor/lib/.git && echo '[core]' > .GIT/config && echo 'x' > vendor/lib/lib.txt",
        "printf 'ref: refs/heads/main\\n' > vendor/lib/.git/HEAD",
        "printf 'notes.txt filter=evil\\n' > .gitattributes && echo kept > notes.txt",
        f"printf '[submodule \"x\"]\\n\\tpath = x\\n\\turl = ext::sh -c touch%% {ran}\\n' > .gitmodules",
        "echo odd > \"$(printf 'new\\nline.txt')\" && echo odd > ./-rf && echo odd > Case.txt && echo odd > case.txt",
        "echo made",
    ])
    scenario = scenarios.base()
    scenario["scripts"]["pulsing"].insert(0, scenarios.tool("shell", reason="Leave things", command=command))
    wid, repo = start(client, model, tmp_path, scenario)
    with open(repo / ".git" / "config", "a") as config:  # the repository's own driver, named by the agent's file
        config.write(f'[filter "evil"]\n\tclean = touch {ran}; cat\n\tsmudge = touch {ran}; cat\n')
    approve_stages(client, wid)
    view = finish(client, wid)

    assert client.get(wid)["status"] == "done"
    assert branch_log(repo, view["branch"]) == [TEST, FEAT]
    outputs = [e["output"] for e in client.events(wid) if e["type"] == "turn:tool_completed" and e["tool"] == "shell"]
    assert any("made" in out and "\"exit_code\":0" in out and "\"stderr\":\"\"" in out for out in outputs), outputs
    tree = subprocess.run(["git", "ls-tree", "-r", "-z", "--name-only", view["branch"]], cwd=repo,
                          capture_output=True, check=True).stdout.split(b"\0")
    for kept in (b"leak", b"leakdir", b"loop", b"notes.txt", b".gitmodules", b"new\nline.txt", b"-rf", b"Case.txt",
                 b"case.txt"):
        assert kept in tree, kept
    for left_out in (b"pipe", b"sock", b".GIT/config", b"vendor/lib/lib.txt", b"leakdir/secret.txt"):
        assert left_out not in tree, left_out
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo, capture_output=True,
                             check=True).stdout
    assert secret.encode() not in objects
    assert not ran.exists(), "a filter or an ext:: url ran"
