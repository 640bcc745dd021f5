"""``autarch demo`` as a user runs it: a fresh process, no API key, no ``AUTARCH_*`` settings, no network."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autarch.cli.demo_cmd import demo_scenario
from autarch.services.scripted_model.scenario import load_scenario
from tests.system import pid_alive

COMMITS = ["test(greeter): cover the empty-name greeting", "feat(greeter): greet the world when the name is empty"]
BEADS = ["base", "square", "circle", "summary", "units", "naming"]
"""The beads of the bundled ``swarm`` scenario's plan: a diamond (base → square, circle → summary) and two notes."""


def clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AUTARCH_"))}
    env["TMPDIR"] = str(tmp)  # where the demo's data directory goes, so the test can find and check it
    return env


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def run_demo(tmp_path: Path, *args: str, stdin: str = "", cwd: Path | None = None, timeout: float = 120,
             env: dict[str, str] | None = None) -> tuple[int, str, str, list[int]]:
    """Run the demo; also return the pids ``run.json`` listed while the system ran (supervisor, children, nats)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    # Files, not pipes: nobody reads a pipe while the loop below watches run.json.
    run = time.monotonic_ns()
    answers, stdout, stderr = (tmp_path / f"{name}-{run}.txt" for name in ("stdin", "stdout", "stderr"))
    answers.write_text(stdin)
    with open(answers) as given, open(stdout, "w") as out_file, open(stderr, "w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "autarch.cli.main", "demo", *args],
                                env={**clean_env(tmp), **(env or {})}, cwd=cwd or tmp_path, stdin=given,
                                stdout=out_file, stderr=err_file)
    pids: set[int] = set()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        for run_file in tmp.glob("autarch-demo-data-*/run.json"):
            try:
                info = json.loads(run_file.read_text())
            except (OSError, ValueError):
                continue
            pids.update(p for p in [info.get("pid"), info.get("nats_pid"), *info.get("children", {}).values()] if p)
        time.sleep(0.02)
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        printed = f"{stdout.read_text()}\n{stderr.read_text()}"
        raise AssertionError(f"the demo did not finish in {timeout}s:\n{printed}") from None
    return proc.returncode, stdout.read_text(), stderr.read_text(), sorted(pids)


def assert_no_leftovers(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if pid_alive(p)], "processes of the demo's system are still running"


def test_demo_runs_the_whole_workflow_offline_and_leaves_the_branch(tmp_path: Path) -> None:
    repo = tmp_path / "demo"
    code, out, err, pids = run_demo(tmp_path, "--dir", str(repo))
    assert code == 0, f"{out}\n{err}"

    # What it printed: live progress, the branch with its commits, the verdict, where the repository is.
    for expected in ("APPROVAL NEEDED — scope", "stage scoping → research", "pulse pulse-1 succeeded: commit",
                     "pulse pulse-2 succeeded: commit", "workflow completed", "tokens, $"):
        assert expected in out, expected
    assert "Branch autarch/demo: 2 commits on top of main" in out
    for subject in COMMITS:
        assert subject in out
    assert "recommendation: approve" in out
    assert "summary: The change matches the scope" in out
    assert "comment [Low style] greeter/core.py:3-4" in out
    assert f"The sample repository stays at {repo}" in out
    assert "API key is set" not in out

    # The repository: main untouched (one commit of the scenario's files), one commit per pulse on the branch.
    assert git(repo, "log", "--format=%s", "main..autarch/demo").splitlines() == COMMITS
    assert len(git(repo, "rev-list", "main").split()) == 1
    assert sorted(git(repo, "ls-tree", "-r", "--name-only", "main").split()) == sorted(load_scenario("demo").files)
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(repo, "status", "--porcelain") == ""
    assert 'name = "world"' in git(repo, "show", "autarch/demo:greeter/core.py")
    assert git(repo, "worktree", "list").count("\n") == 1  # only the repository itself

    # Everything it started has stopped, and its data directory is gone (no --keep).
    assert len(pids) >= 6, pids  # supervisor, nats-server, four services, gateway
    assert_no_leftovers(pids)
    assert not list((tmp_path / "tmp").glob("autarch-demo-data-*"))


def test_interactive_demo_asks_and_sends_a_card_back(tmp_path: Path) -> None:
    # Default directory (./autarch-demo-<id>), a change request at the scope, then approvals; --keep.
    answers = "r\nAlso cover a name of only spaces\na\na\na\na\n"
    code, out, err, pids = run_demo(tmp_path, "--interactive", "--keep", stdin=answers)
    assert code == 0, f"{out}\n{err}"
    assert "The scoping card:" in out and "[a]pprove, [r]equest changes, [q]uit?" in out
    assert "changes requested for scoping: Also cover a name of only spaces" in out
    assert "(revised after your feedback, #1)" in out
    assert "The review card:" in out
    repos = list(tmp_path.glob("autarch-demo-*"))
    assert len(repos) == 1 and repos[0].name != "tmp"
    assert git(repos[0], "log", "--format=%s", "main..autarch/demo").splitlines() == COMMITS
    kept = list((tmp_path / "tmp").glob("autarch-demo-data-*"))
    assert len(kept) == 1 and (kept[0] / "orchestrator").is_dir() and f"Data directory kept: {kept[0]}" in out
    assert not (kept[0] / "run.json").exists()
    assert_no_leftovers(pids)


def test_quitting_at_a_card_stops_everything_with_exit_code_1(tmp_path: Path) -> None:
    # A real key in the environment changes nothing but one line: the demo stays on the scripted model.
    code, out, err, pids = run_demo(tmp_path, "--interactive", "--dir", str(tmp_path / "demo"), stdin="q\n",
                                    env={"ANTHROPIC_API_KEY": "sk-ant-not-used"})
    assert code == 1, f"{out}\n{err}"
    assert "`autarch workflow new` runs the same flow on a real model" in out
    assert "demo stopped: you quit at the scoping card" in out
    assert "stage scoping, status awaiting_approval" in out
    assert git(tmp_path / "demo", "branch", "--list", "autarch/demo") == ""
    assert_no_leftovers(pids)


def test_a_non_empty_dir_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    code, out, err, pids = run_demo(tmp_path, "--dir", str(target), timeout=30)
    assert code == 2, f"{out}\n{err}"
    assert f"autarch demo: {target} exists and is not empty" in err
    assert "choose a new or empty directory with --dir" in err
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    assert pids == []


def test_swarm_is_not_an_option_of_the_loop_demo(tmp_path: Path) -> None:
    code, out, err, pids = run_demo(tmp_path, "loop", "--swarm", "--dir", str(tmp_path / "loop"), timeout=30)
    assert code == 2, f"{out}\n{err}"
    assert "autarch demo: --swarm runs a workflow's execution as a swarm; the loop demo has none" in err
    assert not (tmp_path / "loop").exists() and pids == []


def failing_preflight(scenario: dict) -> None:
    scenario["scripts"]["preflight"][1] = {"content": [{"type": "tool_use", "name": "complete_preflight", "input": {
        "summary": "The package does not import.", "setupCommands": ["python3 -c 'import greeter.core'"],
        "buildSuccess": False, "baselinesRecorded": 0}}]}


def research_without_a_card(scenario: dict) -> None:
    scenario["scripts"]["research"] = ["I found nothing to say."] * 4


@pytest.mark.parametrize(("change", "message"), [
    (failing_preflight, "demo failed: the workflow was abandoned: preflight failed: The package does not import."),
    (research_without_a_card, "demo failed: the workflow halted (error): the research agent ended its turn "
                              "without submit_research 3 times"),
])
def test_a_workflow_that_does_not_finish_fails_the_demo_with_its_reason(tmp_path: Path, change, message) -> None:
    scenario = demo_scenario()
    change(scenario)
    (tmp_path / "scenario.json").write_text(json.dumps(scenario))
    repo = tmp_path / "demo"
    code, out, err, pids = run_demo(tmp_path, "--dir", str(repo), "--scenario", str(tmp_path / "scenario.json"))
    assert code == 1, f"{out}\n{err}"
    assert message in out
    assert "Branch autarch/demo" not in out and f"The sample repository stays at {repo}" in out
    if git(repo, "branch", "--list", "autarch/demo"):  # created at preflight: no pulse ran, so no commit
        assert git(repo, "log", "--format=%s", "main..autarch/demo") == ""
    assert git(repo, "worktree", "list").count("\n") == 1
    assert_no_leftovers(pids)
    assert not list((tmp_path / "tmp").glob("autarch-demo-data-*"))


def test_demo_loop_iterates_to_complete_with_a_chained_anchor(tmp_path: Path) -> None:
    repo = tmp_path / "loop"
    code, out, err, pids = run_demo(tmp_path, "loop", "--dir", str(repo))
    assert code == 0, f"{out}\n{err}"
    for expected in ("iteration 1/5 started", "iteration 3/5 started (anchor: chained)",
                     "loop complete (3 iterations, 3 commits): the agent signalled COMPLETE"):
        assert expected in out, expected
    branch = next(line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("Branch "))
    assert git(repo, "log", "--format=%s", f"main..{branch}").splitlines() == [
        "docs(notes): describe search in the README", "test(notes): cover search",
        "feat(notes): add a case-insensitive search"]
    assert git(repo, "status", "--porcelain") == "" and len(git(repo, "rev-list", "main").split()) == 1
    assert "search(word)" in git(repo, "show", f"{branch}:README.md")
    assert len(pids) >= 7, pids  # supervisor, nats-server, five services, gateway
    assert_no_leftovers(pids)


def test_demo_swarm_runs_a_bead_plan_on_three_workers_one_commit_per_bead(tmp_path: Path) -> None:
    repo = tmp_path / "shapes"
    code, out, err, pids = run_demo(tmp_path, "--swarm", "--dir", str(repo), timeout=180)
    assert code == 0, f"{out}\n{err}"

    # The swarm, live, as `autarch watch` shows it: three workers, a claim, a lease and a close per bead.
    assert "swarm started: 6 beads, 3 workers (mode swarm)" in out
    assert len(re.findall(r"\] joined \(worktree ", out)) == 3
    for bead in BEADS:
        assert re.search(rf"\[w\d \w+\] claimed {bead} \(attempt \d\)", out), bead
        assert re.search(rf"\[w\d \w+\] leased \S.* for {bead}", out), bead
        assert re.search(rf"\[w\d \w+\] closed {bead}: commit [0-9a-f]{{8}} — ", out), bead
    # Each worker's own acknowledgment, and a worker's own (shared) reservation and its release, as it made them.
    assert len(re.findall(r"mail \[w\d \w+ → coordinator\] \[STARTUP\] w\d / \w+", out)) >= 3, out
    assert re.search(r"\[w\d \w+\].*file_reservation_paths .*shapes/base\.py", out), out
    assert re.search(r"\[w\d \w+\].*release_file_reservations .*shapes/base\.py", out), out
    assert "[6/6 beads closed]" in out
    merged = re.search(r"swarm finished: 6 beads merged, in order (.+)", out)
    assert merged is not None, out
    assert "workflow completed (review recommended approve)" in out

    # It ends with the branch's log: one commit per bead, in the order the swarm merged them.
    assert "Branch autarch/shapes: 6 commits on top of main (one per bead; main is untouched)" in out
    printed = re.findall(r"^  [0-9a-f]{7,} feat\(([\w-]+)\): ", out, flags=re.MULTILINE)
    assert sorted(printed) == sorted(BEADS), printed
    subjects = git(repo, "log", "--format=%s", "main..autarch/shapes").splitlines()
    landed = [subject.split("(", 1)[1].split(")", 1)[0] for subject in reversed(subjects)]
    assert sorted(landed) == sorted(BEADS) and all(s.startswith("feat(") for s in subjects), subjects
    assert landed == merged.group(1).split(" → ")
    for bead, needs in {"square": ["base"], "circle": ["base"], "summary": ["square", "circle"]}.items():
        assert all(landed.index(n) < landed.index(bead) for n in needs), landed
    registry = git(repo, "show", "autarch/shapes:shapes/registry.py")
    assert '"square"' in registry and '"circle"' in registry

    # main untouched, no worktree left registered (the workers' included), nothing left running.
    assert len(git(repo, "rev-list", "main").split()) == 1
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "worktree", "list").count("\n") == 1
    assert f"The sample repository stays at {repo}" in out
    assert len(pids) >= 6, pids
    assert_no_leftovers(pids)
    assert not list((tmp_path / "tmp").glob("autarch-demo-data-*"))
