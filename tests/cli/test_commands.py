"""The CLI against a real system (``autarch up``: orchestrator, tools, git, agent runner; the scripted model)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from autarch.cli.local.natsserver import free_port
from tests.system import System

from .conftest import Cli

pytestmark = pytest.mark.slow


def _ctrl_c_as_from_a_terminal() -> None:
    # A suite started in the background of a non-interactive shell (``cmd &``) runs with SIGINT ignored, and a
    # child inherits that: Python then never raises KeyboardInterrupt. The watch must meet Ctrl-C as a user's does.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def watch(system: System, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "autarch.cli.main", "watch", *argv],
                            env=system.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_as_from_a_terminal)


def wait_output(proc: subprocess.Popen[str], seen: list[str], text: str, timeout: float = 30) -> None:
    """Wait until the process printed a line containing ``text`` (its lines are collected in ``seen``)."""
    deadline = time.monotonic() + timeout
    while not any(text in line for line in seen):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise AssertionError(f"watch did not print {text!r}:\n{''.join(seen)}")
        time.sleep(0.05)


def collect(proc: subprocess.Popen[str]) -> tuple[list[str], threading.Thread]:
    """Read the process's stdout line by line in a thread."""
    seen: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return seen, reader


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"watch did not exit\nstdout: {out}\nstderr: {err}") from None
    return proc.returncode, out, err


def test_a_workflow_from_request_to_done_with_watch(cli: Cli, system: System, repo: Path):
    out = cli("workflow", "new", "--repo", str(repo), "--title", "Greet the world", "--branch", "autarch/world",
              "Make", "greet()", "greet", "the", "world", "when", "the", "name", "is", "empty")
    wid, stage = out.splitlines()[0].split()
    assert stage == "scoping" and uuid.UUID(wid)
    watcher = watch(system, wid[:8], "--from-start")

    view = cli.wait_awaiting(wid, "scoping")
    shown = cli("workflow", "show", wid[:13])
    assert "stage     scoping, awaiting approval" in shown and "scope     scope “" in shown
    assert f"→ autarch workflow approve {wid} [--path quick|full]" in shown
    assert wid in cli("workflow", "list")
    listed = json.loads(cli("workflow", "list", "--json"))
    assert wid in [w["id"] for w in listed["items"]]

    assert "stage research" in cli("workflow", "approve", wid)
    for stage in ("research", "planning"):
        cli.wait_awaiting(wid, stage)
        cli("workflow", "approve", wid)
    view = cli.wait_awaiting(wid, "review", timeout=120)
    shown = cli("workflow", "show", wid)
    assert "pulses    pulse-1" in shown and "succeeded" in shown and "→ branch autarch/world" in shown
    assert "review    review: recommends approve" in shown
    # What the review card is about: the branch's diff, and each pulse's.
    diff = cli("workflow", "diff", wid[:8])
    assert diff.startswith("diff --git ") and '+        name = "world"' in diff
    stat = cli("workflow", "diff", wid, "--pulse", "pulse-1", "--stat")
    assert stat.endswith("1 files changed, +2 -0\n"), stat
    assert cli("workflow", "diff", wid, "--pulse", "pulse-9", code=1).startswith("autarch: not_found: ")
    cli("workflow", "approve", wid)
    code, out, err = finish(watcher)
    assert code == 0, err
    for part in (
        "watching “Greet the world”",
        "created “Greet the world”",
        "session ", " assigned to scoping (scoping)",
        "[scoping] read_file path=",
        "[scoping] turn done (block submit_scope)",
        "APPROVAL NEEDED — scope “",
        "stage scoping → research (path full)",
        "APPROVAL NEEDED — research: ",
        "APPROVAL NEEDED — plan: ",
        "preflight started: branch autarch/world",
        "preflight completed: ",
        "pulse pulse-1 started: ",
        "pulse pulse-1 succeeded: commit ",
        "stage execution → review",
        "review comment [",
        "APPROVAL NEEDED — review: recommends approve",
        "workflow completed",
    ):
        assert part in out, (part, out)
    assert out.rstrip().splitlines()[-1].startswith("total: ")
    assert " tokens, $" in out.rstrip().splitlines()[-1]

    view = cli.view(wid)
    assert view["stage"] == "done"
    # A finished workflow takes no controls: 409 "finished", printed with its code.
    for argv in (("stop", wid), ("resume", wid), ("approve-extension", wid), ("answer", wid, "x")):
        assert cli("workflow", *argv, code=1).startswith("autarch: finished: "), argv
    # Watching a finished workflow (new events only) ends at once.
    code, out, err = finish(watch(system, wid), timeout=30)
    assert code == 0 and "workflow already ended" in out, err


def test_answer_approve_extension_stop_and_resume(cli: Cli, system: System, repo: Path):
    wid = cli("workflow", "new", "--repo", str(repo), "--title", "Controls", "--script", "controls",
              "greet", "the", "world").split()[0]
    watcher = watch(system, wid, "--from-start")

    cli.wait_halted(wid, "questions")
    shown = cli("workflow", "show", wid)
    assert "halted    questions: " in shown and "1. Greet whom on an empty name? [world / nobody]" in shown
    assert f"→ autarch workflow answer {wid} ANSWER..." in shown
    # Not what it waits for: the orchestrator's codes come through, and the CLI exits 1.
    assert cli("workflow", "approve", wid, code=1).startswith("autarch: not_awaiting_approval: ")
    assert cli("workflow", "resume", wid, code=1).startswith("autarch: wrong_halt: ")
    assert cli("workflow", "approve-extension", wid, code=1).startswith("autarch: wrong_halt: ")
    assert cli("workflow", "stop", wid, code=1).startswith("autarch: not_running: ")
    out = cli("workflow", "answer", wid, "world")
    assert f"{wid}  stage scoping, active" in out

    cli.wait_awaiting(wid, "scoping")
    assert cli("workflow", "answer", wid, "again", code=1).startswith("autarch: not_halted: ")
    cli("workflow", "approve", wid, "--path", "full")
    cli.wait_halted(wid, "extension_requested")
    assert "approve-extension" in cli("workflow", "show", wid)
    cli("workflow", "approve-extension", wid, "--message", "take your time")
    cli.wait_awaiting(wid, "research")
    cli("workflow", "approve", wid)

    # The planner thinks slowly: stop it, then let it go on.
    cli.wait(wid, lambda v: v["stage"] == "planning" and "planning" in v["sessions"], "the planning session")
    out = cli("workflow", "stop", wid, "--reason", "wrong approach")
    assert f"{wid}  stage planning, halted (stopped): wrong approach" in out
    assert f"→ autarch workflow resume {wid} [--message TEXT]" in out
    view = cli.view(wid)
    assert (view["status"], view["halt"]["reason"]) == ("halted", "stopped")
    assert cli("workflow", "stop", wid, code=1).startswith("autarch: not_running: ")
    assert "stage planning, active" in cli("workflow", "resume", wid, "--message", "keep it simple")

    # The watch shows it all live; Ctrl-C ends it (130).
    seen, reader = collect(watcher)
    wait_output(watcher, seen, "resumed (stopped): keep it simple")
    watcher.send_signal(signal.SIGINT)
    code = watcher.wait(20)
    reader.join(5)
    out = "".join(seen)
    assert code == 130, watcher.stderr.read() if watcher.stderr else ""
    for part in (
        "HALTED (questions): ", "1. Greet whom on an empty name? [world / nobody] (single_select)",
        f"→ autarch workflow answer {wid} ANSWER...", "resumed (questions): world",
        "HALTED (extension_requested): ", f"→ autarch workflow approve-extension {wid}",
        "resumed (extension_requested): take your time",
        "HALTED (stopped): wrong approach", f"→ autarch workflow resume {wid}",
        "resumed (stopped): keep it simple",
    ):
        assert part in out, (part, out)


def test_errors_are_typed_and_usage_errors_exit_2(cli: Cli, tmp_path: Path):
    missing = str(uuid.uuid4())
    assert cli("workflow", "show", missing, code=1) == f"autarch: not_found: no workflow {missing}\n"
    assert cli("workflow", "approve", missing, code=1).startswith("autarch: not_found: ")
    assert cli("workflow", "resume", missing, code=1).startswith("autarch: not_found: ")
    assert cli("watch", missing, code=1).startswith("autarch: not_found: ")
    err = cli("workflow", "new", "--repo", str(tmp_path / "nowhere"), "--title", "t", "r", code=1)
    assert err.startswith("autarch: bad_request: repo ") and "is not a directory" in err
    with pytest.raises(SystemExit) as exit_:
        cli("workflow", "approve", missing, "--path", "sideways")
    assert exit_.value.code == 2
    wrong = tmp_path / "wrong-token"
    wrong.write_text("nope")
    assert cli("workflow", "list", "--token-file", str(wrong), code=1).startswith("autarch: unauthorized: ")


def test_a_gateway_that_is_not_running(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "token").write_text("t")
    stopped = System(data_dir=data, port=free_port(), nats_port=free_port(), services="orchestrator")
    done = stopped.cli("workflow", "list")
    assert done.returncode == 1
    assert done.stderr.startswith(f"autarch: cannot reach the gateway at http://127.0.0.1:{stopped.port} (")
    assert done.stderr.endswith("Connection refused): is `autarch up` running?\n")
