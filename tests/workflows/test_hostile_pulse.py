"""A hostile pulse, end to end: its first tool call tries every escape the sandbox must stop, from inside a real
pulse of a real workflow (every service a process, the scripted model). Each attempt fails with a clear error, the
pulse goes on to make its commit, and the hooks planted in the user's repository never run.

Then issue 32's audit of the host-side readers of a worktree, each input left by a pulse's shell command: odd
entries and drivers (one workflow, its diff asked through the gateway while the worktree holds them), and a huge
file, a crowd of files and deep nesting (another). The module's workflows share the package's one system."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from autarch.runtime.worktree_files import remove_tree
from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System
from tests.tools.helpers import processes_with

from . import scenarios
from .conftest import Client, approve_stages, branch_log, finish, git, start

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


@dataclass
class HostileRun:
    """One workflow whose first pulse left a hostile worktree, and what was seen of it."""

    client: Client
    wid: str
    repo: Path
    view: dict[str, Any]
    ran: Path
    secret: str
    outside: Path
    diffs: dict[str, httpx.Response] = field(default_factory=dict)
    """The gateway's diff routes, asked while the hostile worktree was still there (the review stage)."""
    seconds: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module")
def hostile_run(system: System, model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[HostileRun]:
    """The pulse's shell leaves links out, a FIFO, a socket, ``.GIT``, a nested repository, a ``.gitattributes``
    naming a filter and a diff driver (textconv) of the repository's config, a ``.gitmodules`` with an ``ext::``
    url and odd names (a newline, invalid UTF-8, a leading ``-``, case-colliding)."""
    tmp_path = tmp_path_factory.mktemp("hostile")
    client = Client(system)
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
        "printf 'notes.txt filter=evil diff=evil\\n' > .gitattributes && echo kept > notes.txt",
        f"printf '[submodule \"x\"]\\n\\tpath = x\\n\\turl = ext::sh -c touch%% {ran}\\n' > .gitmodules",
        "echo odd > \"$(printf 'new\\nline.txt')\" && echo odd > ./-rf && echo odd > Case.txt && echo odd > case.txt",
        "echo odd > \"$(printf 'bad-\\377.txt')\"",
        "echo made",
    ])
    scenario = scenarios.base()
    scenario["scripts"]["pulsing"].insert(0, scenarios.tool("shell", reason="Leave things", command=command))
    wid, repo = start(client, model, tmp_path, scenario)
    with open(repo / ".git" / "config", "a") as config:  # the repository's own drivers, named by the agent's file
        config.write(f'[filter "evil"]\n\tclean = touch {ran}; cat\n\tsmudge = touch {ran}; cat\n'
                     f'[diff "evil"]\n\ttextconv = touch {ran}; cat\n\tcommand = touch {ran}\n')
    approve_stages(client, wid)
    worktree = Path(client.wait_awaiting(wid, "review", timeout=90)["worktree_path"])
    assert os.path.islink(worktree / "leak") and stat.S_ISFIFO(os.lstat(worktree / "pipe").st_mode)
    run = HostileRun(client=client, wid=wid, repo=repo, view={}, ran=ran, secret=secret, outside=outside)
    for name, path in (("workflow", f"/api/workflows/{wid}/diff"),
                       ("pulse", f"/api/workflows/{wid}/pulses/pulse-1/diff"),
                       ("pulse_page", f"/api/workflows/{wid}/pulses/pulse-1/diff?offset=0&limit=200"),
                       ("no_pulse", f"/api/workflows/{wid}/pulses/pulse-9/diff")):
        began = time.monotonic()
        run.diffs[name] = client.http.get(path, timeout=30)
        run.seconds[name] = time.monotonic() - began
    client.approve(wid)
    run.view = client.wait(wid, lambda v: v["status"] == "done" and v["worktree_path"] is None, "done")
    yield run
    client.http.close()


def test_a_pulse_that_leaves_a_hostile_worktree_commits_correctly_and_runs_nothing(hostile_run: HostileRun) -> None:
    """Issue 32's audit end to end: the checkpoint, the guards and the diff take the hostile entries in their
    stride, the workflow ends done, nothing outside the worktree enters the branch and no filter or url ever
    runs."""
    client, wid, repo, view = hostile_run.client, hostile_run.wid, hostile_run.repo, hostile_run.view
    assert client.get(wid)["status"] == "done"
    assert branch_log(repo, view["branch"]) == [TEST, FEAT]
    outputs = [e["output"] for e in client.events(wid) if e["type"] == "turn:tool_completed" and e["tool"] == "shell"]
    assert any("made" in out and "\"exit_code\":0" in out and "\"stderr\":\"\"" in out for out in outputs), outputs
    tree = subprocess.run(["git", "ls-tree", "-r", "-z", "--name-only", view["branch"]], cwd=repo,
                          capture_output=True, check=True).stdout.split(b"\0")
    for kept in (b"leak", b"leakdir", b"loop", b"notes.txt", b".gitmodules", b"new\nline.txt", b"-rf", b"Case.txt",
                 b"case.txt", b"bad-\xff.txt"):
        assert kept in tree, kept
    for left_out in (b"pipe", b"sock", b".GIT/config", b"vendor/lib/lib.txt", b"leakdir/secret.txt"):
        assert left_out not in tree, left_out
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo, capture_output=True,
                             check=True).stdout
    assert hostile_run.secret.encode() not in objects
    assert not hostile_run.ran.exists(), "a filter, a diff driver or an ext:: url ran"


def test_the_gateway_diff_routes_show_a_hostile_pulse_as_git_would_and_run_nothing(hostile_run: HostileRun) -> None:
    """The diff routes of the gateway's HTTP API, asked while the pulse's worktree held a FIFO, a socket, links out,
    a non-UTF-8 name and a ``.gitattributes`` naming a textconv driver of the repository's config: each answers at
    once with the diff git itself prints for the same commits (links as links, names quoted, content as stored),
    or with a typed 404; nothing from outside the worktree appears and no driver runs."""
    run, repo = hostile_run, hostile_run.repo
    for name, reply in run.diffs.items():
        assert run.seconds[name] < 10, (name, run.seconds[name])
        if name == "no_pulse":
            assert reply.status_code == 404 and reply.json()["code"] == "not_found", reply.text
            continue
        assert reply.status_code == 200, (name, reply.text)
    workflow, pulse = run.diffs["workflow"].json(), run.diffs["pulse"].json()
    assert workflow["next_offset"] is None and pulse["next_offset"] is None
    page = run.diffs["pulse_page"].json()
    assert page["diff"] == pulse["diff"][:200] and page["next_offset"] == 200
    # git's own diff of the same commits, textconv and external drivers off: what the routes must show.
    expected = subprocess.run(
        ["git", "-c", "core.quotePath=true", "diff", "--no-ext-diff", "--no-textconv", "--binary", "--full-index",
         "--no-renames", f"{pulse['ref']['from_commit']}..{pulse['ref']['to_commit']}"],
        cwd=repo, capture_output=True, check=True).stdout.decode("utf-8", "backslashreplace")
    for diff in (pulse["diff"], workflow["diff"]):
        for line in ("diff --git a/leak b/leak", "new file mode 120000", f"+{run.outside / 'secret.txt'}",
                     'diff --git "a/bad-\\377.txt" "b/bad-\\377.txt"', 'diff --git "a/new\\nline.txt"',
                     "diff --git a/-rf b/-rf", "+notes.txt filter=evil diff=evil", "diff --git a/notes.txt"):
            assert line in diff, line
        for absent in (run.secret, "pipe", "sock", ".GIT/config", "vendor/lib"):
            assert absent not in diff, absent
    notes = pulse["diff"].split("diff --git a/notes.txt b/notes.txt\n", 1)[1].split("diff --git", 1)[0]
    assert notes.endswith("+kept\n"), notes  # as stored: no textconv ran on it
    assert sorted(_files(pulse["diff"])) == sorted(_files(expected))
    assert not run.ran.exists(), "a textconv or diff command ran"


CROWD = 5_000
"""Files the crowded pulse adds: 50 directories of 100. The suite's count; the benchmark
(``tests/benchmarks/hostile_worktree.py --pulse``) runs the same pulse with 100,000."""


def crowd_command(files: int) -> str:
    """A shell command leaving ``files`` small files in ``many/``, 100 a directory."""
    script = (f"import os\nfor n in range({files}):\n d = 'many/%04d' % (n // 100)\n os.makedirs(d, exist_ok=True)\n"
              " open(d + '/%03d.txt' % (n % 100), 'w').write('file %d\\n' % n)")
    return f'python3 -c "{script}"'


def nest_command(top: str, levels: int) -> str:
    """A shell command leaving ``top/d/d/…/bottom.txt``, ``levels`` directories below ``top`` (a loop: no recursion,
    and each ``mkdir`` a short path)."""
    return (f"python3 -c \"import os\nos.mkdir('{top}'); os.chdir('{top}')\nfor _ in range({levels}):\n"
            f" os.mkdir('d'); os.chdir('d')\nopen('bottom.txt', 'w').write('bottom\\n')\"")


def test_a_huge_file_deep_nesting_and_a_crowd_of_files_halt_typed_then_commit(
    client: Client, model: ScriptedModelServer, tmp_path: Path
) -> None:
    """Issue 32's audit at size, as a real pulse: its shell tries a 5 GiB sparse file (the sandbox's file size
    limit, 4 GiB, stops it and the tool result says so), leaves a 4,000 MiB sparse file (under that limit, over
    ``git_max_file_bytes``), 5,000 files, a directory 400 levels deep and one 1,500 levels deep. The checkpoint
    halts the workflow with ``file_too_large`` and ``path_too_deep`` (typed, naming the path, nothing committed),
    the diff routes keep answering, and once the user removes each the workflow resumes and commits the rest."""
    command = "; ".join([
        "truncate -s 4000M huge; echo four=$?",
        crowd_command(CROWD),
        nest_command("deep", 400),
        nest_command("deeper", 1500),
        "echo left",
    ])
    # Tried twice, as an agent would: the first run is stopped by the limit, the second finds the file (cut at 0
    # bytes) and succeeds, which puts the failed call right (a pulse ends only with no tool failure unresolved).
    five = "test -e huge-5g || truncate -s 5G huge-5g"
    scenario = scenarios.base()
    scenario["scripts"]["pulsing"][:0] = [scenarios.tool("shell", reason="Make a huge file", command=five)] * 2 + [
        scenarios.tool("shell", reason="Leave a lot", command=command)]
    wid, repo = start(client, model, tmp_path, scenario)
    try:
        _halt_typed_then_commit(client, wid, repo)
    finally:  # pytest's own clean-up (shutil.rmtree) fails on a tree 1,500 levels deep, even a failed test's
        for deeper in (client.system.data_dir / "worktrees").glob("*/deeper"):
            remove_tree(deeper)


def _halt_typed_then_commit(client: Client, wid: str, repo: Path) -> None:
    approve_stages(client, wid)
    halts: dict[str, str] = {}
    for _ in range(2):
        view = client.wait_halted(wid, "error", timeout=120)
        message = view["halt"]["message"]
        code = next((c for c in ("file_too_large", "path_too_deep") if f": {c}: " in message), None)
        assert code is not None and code not in halts, message
        halts[code] = message
        assert branch_log(repo, view["branch"]) == []  # nothing committed
        worktree = Path(view["worktree_path"])
        for path in (f"/api/workflows/{wid}/diff", f"/api/workflows/{wid}/pulses/pulse-1/diff"):
            reply = client.http.get(path, timeout=30)  # the worktree holds all of it: the routes never read it
            assert reply.status_code in (200, 404), reply.text
            if reply.status_code == 404:
                assert reply.json()["code"] == "no_diff", reply.text
        if code == "file_too_large":
            assert "huge is 4194304000 bytes" in message and "git_max_file_bytes" in message, message
            os.unlink(worktree / "huge")
        else:
            assert "deeper/d/d/" in message and "500" in message, message
            remove_tree(worktree / "deeper")
        assert client.post(wid, "resume").status_code == 200
    view = finish(client, wid)

    assert branch_log(repo, view["branch"]) == [TEST, FEAT]
    outputs = [e["output"] for e in client.events(wid) if e["type"] == "turn:tool_completed" and e["tool"] == "shell"]
    huge = next(out for out in outputs if "SIGXFSZ" in out)
    assert "SIGXFSZ" in huge and "sandbox_file_size_mib" in huge and "\"exit_code\":153" in huge, huge
    left = next(out for out in outputs if "left" in out)
    assert "four=0" in left and "\"exit_code\":0" in left, left
    tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", view["branch"]], cwd=repo, capture_output=True,
                          check=True, text=True).stdout.splitlines()
    assert sum(path.startswith("many/") for path in tree) == CROWD
    assert "deep/" + "d/" * 400 + "bottom.txt" in tree
    assert not any(path.startswith(("huge", "deeper/")) for path in tree if path != "huge-5g")
    assert git(repo, "cat-file", "-s", f"{view['branch']}~1:huge-5g").strip() == "0"  # cut at the limit
    shown = subprocess.run(["git", "show", f"{view['branch']}~1:many/0049/099.txt"], cwd=repo, capture_output=True,
                           check=True, text=True).stdout
    assert shown == "file 4999\n"


def _files(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line.startswith("diff --git ")]
