"""Loop sessions end to end: every service a process, the scripted model, a real repository."""

from __future__ import annotations

import subprocess

from autarch.contracts.loops import AbortLoop, LoopView, PauseLoop, ResumeLoop

from .conftest import FILES, iteration, text, write


def git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_a_session_iterates_commits_each_step_and_ends_complete(model, loops):
    health = "def health():\n    return 'ok'\n"
    routes = "from .health import health\n\nROUTES = {'/health': health}\n"
    check = "from shop.health import health\n\n\ndef test_health():\n    assert health() == 'ok'\n"
    model.use({"files": FILES, "scripts": {
        "loop:done.i1": iteration([text("Adding the route module."), write("shop/health.py", health)],
                                  "feat(shop): add a health function\n\nThe route comes next.\n"
                                  "<signal>CONTINUE</signal>"),
        "loop:done.i2": iteration([write("shop/routes.py", routes)],
                                  "feat(shop): route /health\n\nCreated file shop/routes.py; the next step is a test."),
        "loop:done.i3": iteration([write("tests/test_health.py", check)],
                                  "test(shop): cover the health route\n\nAll tasks are complete."),
    }})
    repo = loops.repo("done")
    before = git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")
    started = loops.start(repo, "done")
    assert started.status == "pending" and started.branch_name == f"autarch/loop-{started.id[:8]}"
    view = loops.wait_status(started.id, "complete")
    assert [it.signal for it in view.iterations] == ["CONTINUE", "CONTINUE", "COMPLETE"]
    assert [it.signal_source for it in view.iterations] == ["explicit", "inferred", "inferred"]
    assert [it.status for it in view.iterations] == ["complete"] * 3
    assert view.current_iteration == 3 and view.total_commits == 3 and view.last_signal == "COMPLETE"
    assert view.status_reason == "the agent signalled COMPLETE"
    assert [it.files_changed for it in view.iterations] == [["shop/health.py"], ["shop/routes.py"],
                                                            ["tests/test_health.py"]]
    # One commit per iteration on the session's branch, with the agent's Conventional Commit subjects.
    log = git(repo, "log", "--format=%H %s", f"main..{view.branch_name}").splitlines()
    assert [line.split(" ", 1)[1] for line in reversed(log)] == [
        "feat(shop): add a health function", "feat(shop): route /health", "test(shop): cover the health route"]
    assert [line.split(" ", 1)[0] for line in reversed(log)] == [it.commit_hash for it in view.iterations]
    assert [p.summary for p in view.progress_log] == [it.output_summary for it in view.iterations]
    # The user's checkout is never touched.
    assert (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")) == before
    # Iteration 2's prompt tells it what iteration 1 did.
    assert "iteration 1 (CONTINUE" in view.iterations[1].task_content


def test_blocked_then_resumed_with_a_message(model, loops):
    model.use({"files": FILES, "scripts": {
        "loop:blk.i1": iteration("I cannot go on.\n<signal>BLOCKED: Need API key for Stripe integration</signal>"),
        "loop:blk.i2": iteration([write("shop/pay.py", "KEY_ENV = 'STRIPE_KEY'\n")],
                                 "feat(shop): read the Stripe key from the environment\n<signal>COMPLETE</signal>"),
    }})
    repo = loops.repo("blk")
    started = loops.start(repo, "blk")
    view = loops.wait_status(started.id, "blocked")
    assert view.status_reason == "Need API key for Stripe integration" and view.total_commits == 0
    assert view.iterations[0].commit_hash is None and view.iterations[0].files_changed == []
    resumed = loops.ask("resume_loop", ResumeLoop(session_id=started.id, message="Use STRIPE_KEY from the env"),
                        LoopView)
    assert resumed.status == "running"
    view = loops.wait_status(started.id, "complete")
    assert "Use STRIPE_KEY from the env" in view.iterations[1].task_content
    assert view.total_commits == 1


def test_no_signal_and_no_pattern_blocks_safely(model, loops):
    model.use({"files": FILES, "scripts": {"loop:quiet.i1": iteration("Hmm.")}})
    started = loops.start(loops.repo("quiet"), "quiet")
    view = loops.wait_status(started.id, "blocked")
    assert view.iterations[0].signal == "BLOCKED" and view.iterations[0].signal_source == "default"


def test_max_iterations_completes_with_that_reason(model, loops):
    model.use({"files": FILES, "scripts": {
        f"loop:cap.i{n}": iteration([write(f"step{n}.txt", f"{n}\n")],
                                    f"chore(shop): step {n}\n<signal>CONTINUE</signal>")
        for n in (1, 2)}})
    started = loops.start(loops.repo("cap"), "cap", max_iterations=2)
    view = loops.wait_status(started.id, "complete")
    assert view.status_reason == "max iterations reached (2)" and view.current_iteration == 2
    assert view.total_commits == 2


def test_the_no_progress_breaker_blocks_a_spinning_loop(model, loops):
    model.use({"files": FILES, "scripts": {
        f"loop:spin.i{n}": iteration("Still thinking about it.\n<signal>CONTINUE</signal>") for n in (1, 2, 3)}})
    started = loops.start(loops.repo("spin"), "spin", max_iterations=10)
    view = loops.wait_status(started.id, "blocked")
    assert view.current_iteration == 3 and view.status_reason == "no progress: 3 iterations in a row committed nothing"


def test_pause_after_the_current_iteration_then_resume(model, loops):
    model.use({"files": FILES, "scripts": {
        "loop:pause.i1": [{"content": [write("a.txt", "a\n")], "delay_ms": 300},
                          "chore(shop): a\n<signal>CONTINUE</signal>"],
        "loop:pause.i2": iteration([write("b.txt", "b\n")], "chore(shop): b\n<signal>COMPLETE</signal>"),
    }})
    started = loops.start(loops.repo("pause"), "pause")
    loops.wait(started.id, lambda v: bool(v.iterations) and v.iterations[0].status == "running", "iteration running")
    paused = loops.ask("pause_loop", PauseLoop(session_id=started.id), LoopView)
    assert paused.pause_requested and paused.status == "running"
    view = loops.wait_status(started.id, "paused")
    assert view.current_iteration == 1 and view.iterations[0].status == "complete"
    loops.ask("resume_loop", ResumeLoop(session_id=started.id), LoopView)
    assert loops.wait_status(started.id, "complete").total_commits == 2


def test_pause_between_iterations_pauses_at_once_and_resume_starts_the_next(model, loops):
    model.use({"files": FILES, "scripts": {
        "loop:idle.i1": iteration([write("a.txt", "a\n")], "chore(shop): a\n<signal>BLOCKED: which port?</signal>"),
        "loop:idle.i2": iteration("<signal>COMPLETE</signal>"),
    }})
    started = loops.start(loops.repo("idle"), "idle")
    loops.wait_status(started.id, "blocked")
    refused = loops.ask_error("pause_loop", PauseLoop(session_id=started.id))
    assert refused.code == "loop_not_running"
    loops.ask("resume_loop", ResumeLoop(session_id=started.id, message="8080"), LoopView)
    view = loops.wait_status(started.id, "complete")
    assert view.current_iteration == 2 and "8080" in view.iterations[1].task_content
    refused = loops.ask_error("resume_loop", ResumeLoop(session_id=started.id))
    assert refused.code == "loop_finished"


def test_abort_mid_turn_stops_at_once_and_keeps_the_work(model, loops):
    model.use({"files": FILES, "scripts": {
        "loop:abort.i1": [{"content": [write("wip.txt", "half\n")]},
                          {"content": [text("Thinking long about the next step...")], "delay_ms": 20000},
                          "never reached"],
    }})
    repo = loops.repo("abort")
    started = loops.start(repo, "abort")
    loops.wait(started.id, lambda v: bool(v.iterations) and v.iterations[0].status == "running", "iteration running")
    aborted = loops.ask("abort_loop", AbortLoop(session_id=started.id, reason="changed my mind"), LoopView)
    assert aborted.status == "aborted" and aborted.status_reason == "changed my mind"
    view = loops.wait(started.id, lambda v: v.iterations[0].ended_at is not None and v.worktree_path is None,
                      "iteration ended and worktree removed", timeout=20)
    assert view.iterations[0].status == "failed" and view.total_commits == 0
    # The work in progress is kept as a recovery commit on the iteration's pulse branch.
    branches = git(repo, "branch", "--list", f"{view.branch_name}.pulse-i1")
    assert branches, "the recovery branch is kept"


def test_a_spent_token_budget_blocks_the_session(model, loops):
    model.use({"files": FILES, "scripts": {
        f"loop:budget.i{n}": iteration([write(f"s{n}.txt", "x\n")], f"chore(shop): s{n}\n<signal>CONTINUE</signal>")
        for n in (1, 2, 3)}})
    started = loops.start(loops.repo("budget"), "budget", max_tokens=1)
    view = loops.wait_status(started.id, "blocked")
    assert view.current_iteration == 1 and view.max_tokens == 1
    assert view.status_reason.startswith("token budget spent (") and view.total_tokens_used > 1


def test_a_restarted_orchestrator_rebuilds_every_session_as_it_was(model, loops):
    from autarch.contracts.loops import ListLoops, LoopList
    from tests.workflows.faults.harness import kill

    model.use({"files": FILES, "scripts": {
        "loop:replay.i1": iteration([write("r.txt", "r\n")], "chore(shop): r\n<signal>CONTINUE</signal>"),
        "loop:replay.i2": iteration("<signal>BLOCKED: which colour?</signal>"),
    }})
    started = loops.start(loops.repo("replay"), "replay")
    live = loops.wait_status(started.id, "blocked")
    every = loops.ask("list_loops", ListLoops(), LoopList)
    assert kill(loops.system, "orchestrator") is not None
    # The next answer comes from a new process that rebuilt its read model from the event store alone.
    rebuilt = loops.get(started.id)
    assert rebuilt == live
    assert loops.ask("list_loops", ListLoops(), LoopList) == every
    blocked = loops.ask("list_loops", ListLoops(status="blocked"), LoopList)
    assert started.id in {s.id for s in blocked.items} and all(s.status == "blocked" for s in blocked.items)
