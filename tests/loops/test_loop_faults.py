"""Faults: a service SIGKILLed in the middle of an iteration; the session ends as an undisturbed one does, and
its notifications reach the webhook once each.

``autarch up``'s supervisor restarts the killed service. Each run kills one service while iteration 2's turn
streams (slowly, so the kill lands inside it), then checks the branch, the iterations and the stream: the same
three commits, three iterations, and every ``loop:*`` event exactly once.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from autarch.contracts.loops import NotifyTarget
from tests.workflows.faults.harness import kill

from .conftest import FILES, iteration, text, write
from .webhook import Webhook

SLOW = " ".join(["Thinking it through carefully."] * 40)


def scripts(name: str) -> dict:
    return {
        f"loop:{name}.i1": iteration([write("one.txt", "1\n")], "feat(shop): one\n<signal>CONTINUE</signal>"),
        f"loop:{name}.i2": [{"content": [text(SLOW), write("two.txt", "2\n")], "delay_ms": 40},
                            "feat(shop): two\n<signal>CONTINUE</signal>"],
        f"loop:{name}.i3": iteration([write("three.txt", "3\n")], "feat(shop): three\n<signal>COMPLETE</signal>"),
    }


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    hook = Webhook().start()
    yield hook
    hook.stop()


VICTIMS = ["orchestrator", "agent_runner", "notifier"] * 2


@pytest.mark.parametrize(("victim", "run"), [(v, n) for n, v in enumerate(VICTIMS)])
def test_a_kill_mid_iteration_changes_nothing(model, loops, webhook, victim, run):
    name = f"kill-{victim.replace('_', '-')}-{run}"
    model.use({"files": FILES, "scripts": scripts(name)})
    repo = loops.repo(name)
    started = loops.start(repo, name, notify=[NotifyTarget(kind="webhook", url=webhook.url(name))])
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
    # Every notification once (a resend keeps its Idempotency-Key), in the seed's wording.
    assert webhook.wait(name, 3) == ["📍 Iteration 1/5: feat(shop): one. Continuing...",
                                     "📍 Iteration 2/5: feat(shop): two. Continuing...",
                                     "✅ Session complete (3 iterations, 3 commits)"]


def test_notifications_reach_a_receiver_that_was_down_for_a_while(model, loops):
    name = "late-receiver"
    model.use({"files": FILES, "scripts": scripts(name)})
    hook = Webhook()  # not started: every delivery fails until it is
    try:
        started = loops.start(loops.repo(name), name, notify=[NotifyTarget(kind="webhook", url=hook.url(name))])
        loops.wait_status(started.id, "complete", timeout=60)
        hook.start()
        assert hook.wait(name, 3) == ["📍 Iteration 1/5: feat(shop): one. Continuing...",
                                      "📍 Iteration 2/5: feat(shop): two. Continuing...",
                                      "✅ Session complete (3 iterations, 3 commits)"]
    finally:
        hook.stop()
