"""``runtime.startup.yielding``: a start-up's load in a thread of its own that yields the CPU to other processes."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from autarch.runtime.startup import YIELDING_NICENESS, yielding


async def test_the_work_runs_in_its_own_thread_at_a_lower_priority_and_its_result_comes_back() -> None:
    def work() -> tuple[str, int, int]:
        tid = threading.get_native_id()
        return threading.current_thread().name, tid, os.getpriority(os.PRIO_PROCESS, tid)

    name, tid, priority = await yielding(work, name="load-test")
    assert name == "load-test" and tid != threading.get_native_id()
    if sys.platform == "linux":
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert priority == min(own + YIELDING_NICENESS, 19)
    # This thread's own priority is untouched: only the work's thread yields.
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == os.getpriority(os.PRIO_PROCESS, 0)


async def test_the_works_failure_is_raised_to_the_caller() -> None:
    def work() -> None:
        raise LookupError("the store could not be read")

    with pytest.raises(LookupError, match="could not be read"):
        await yielding(work, name="load-test")
