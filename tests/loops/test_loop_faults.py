"""Faults: a service SIGKILLed in the middle of an iteration; the session ends as an undisturbed one does.

``autarch up``'s supervisor restarts the killed service. Each run kills one service while iteration 2's turn
streams (slowly, so the kill lands inside it), then checks the branch, the iterations and the stream: the same
three commits, three iterations, and every ``loop:*`` event exactly once.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.workflow_faults.harness import kill

from .conftest import FILES, iteration, text, write

SLOW = " ".join(["Thinking it through carefully."] * 40)


def scripts(name: str) -> dict:
    return {
        f"loop:{name}.i1": iteration([write("one.txt", "1\n")], "feat(shop): one\n<signal>CONTINUE</signal>"),
        f"loop:{name}.i2": [{"content": [text(SLOW), write("two.txt", "2\n")], "delay_ms": 40},
                            "feat(shop): two\n<signal>CONTINUE</signal>"],
        f"loop:{name}.i3": iteration([write("three.txt", "3\n")], "feat(shop): three\n<signal>COMPLETE</signal>"),
    }


@pytest.mark.parametrize("victim", ["orchestrator", "agent_runner", "orchestrator", "agent_runner"])
def test_a_kill_mid_iteration_changes_nothing(model, loops, victim):
    name = f"kill-{victim.replace('_', '-')}"
    model.use({"files": FILES, "scripts": scripts(name)})
    repo = loops.repo(name)
    started = loops.start(repo, name)
    loops.wait(started.id, lambda v: len(v.iterations) == 2 and v.iterations[1].status == "running",
               "iteration 2 running")
    assert kill(loops.system, victim) is not None
    view = loops.wait_status(started.id, "complete", timeout=120)
    assert [it.signal for it in view.iterations] == ["CONTINUE", "CONTINUE", "COMPLETE"]
    assert view.total_commits == 3
    subjects = subprocess.run(["git", "-C", str(repo), "log", "--format=%s", f"main..{view.branch_name}"],
                              check=True, capture_output=True, text=True).stdout.split("\n")[:3]
    assert subjects == ["feat(shop): three", "feat(shop): two", "feat(shop): one"]
    seen = loops.events(started.id)
    assert seen.count("loop:iteration_started") == 3 and seen.count("loop:iteration_completed") == 3, seen
    assert seen.count("loop:started") == 1 and seen.count("loop:completed") == 1, seen
