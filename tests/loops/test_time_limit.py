"""An iteration that runs past ``loop_iteration_timeout`` ends ``timeout``: its turn is cancelled, its work kept on
the pulse branch, and the session blocks with the reason (a resume starts the next iteration)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autarch.contracts.loops import LoopView, ResumeLoop
from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System
from tests.workflows.conftest import scripted_system

from .conftest import FILES, Loops, iteration, text, write


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    yield from scripted_system(tmp_path_factory, model, "loops-limit", AUTARCH_REQUEST_TIMEOUT="30",
                               AUTARCH_LOOP_ITERATION_TIMEOUT="2")


def test_an_iteration_past_its_time_limit_times_out_and_blocks(model, limited, tmp_path):
    model.use({"files": FILES, "scripts": {
        "loop:slow.i1": [{"content": [write("wip.txt", "half\n")]},
                         {"content": [text("Still working " * 200)], "delay_ms": 100},
                         "never reached"],
        "loop:slow.i2": iteration([write("done.txt", "ok\n")], "chore(shop): finish\n<signal>COMPLETE</signal>"),
    }})
    loops = Loops(limited, tmp_path)
    try:
        started = loops.start(loops.repo("slow"), "slow")
        view = loops.wait_status(started.id, "blocked", timeout=30)
        first = view.iterations[0]
        assert first.status == "timeout" and first.signal == "BLOCKED" and first.signal_source == "limit"
        assert view.status_reason == "iteration 1 ran past its time limit (2s)" and first.commit_hash is None
        loops.ask("resume_loop", ResumeLoop(session_id=started.id), LoopView)
        view = loops.wait_status(started.id, "complete", timeout=30)
        assert view.current_iteration == 2 and view.total_commits == 1
        assert "ended timeout: iteration 1 ran past its time limit" in view.iterations[1].task_content
    finally:
        loops.close()
