"""``watch_children_with_pidfds``: a service's subprocesses are reaped through the loop, without a thread each."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import warnings
from collections.abc import Iterator

import pytest

from autarch.runtime.process import watch_children_with_pidfds

pytestmark = pytest.mark.skipif(
    sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"),
    reason="Python 3.12+ chooses the pidfd watcher itself; without pidfd_open the default stays",
)


@pytest.fixture
def default_watcher() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        watcher = asyncio.get_event_loop_policy().get_child_watcher()
        watcher.close()
        asyncio.set_child_watcher(None)  # type: ignore[arg-type]  # None is the documented reset; the next subprocess of the test session gets the default again


@pytest.mark.usefixtures("default_watcher")
async def test_exit_codes_arrive_and_no_waiter_thread_is_started():
    watch_children_with_pidfds()
    assert isinstance(asyncio.get_event_loop_policy().get_child_watcher(), asyncio.PidfdChildWatcher)
    threads_before = {t.ident for t in threading.enumerate()}

    procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", f"raise SystemExit({code})")
             for code in (0, 3, 7)]
    codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), timeout=30)

    assert codes == [0, 3, 7]
    # The default watcher starts one "waitpid-N" thread per subprocess.
    assert not [t.name for t in threading.enumerate() if t.ident not in threads_before and t.name.startswith("waitpid")]


@pytest.mark.usefixtures("default_watcher")
async def test_a_killed_command_reports_its_signal():
    watch_children_with_pidfds()
    proc = await asyncio.create_subprocess_exec("sleep", "30")
    proc.kill()
    assert await asyncio.wait_for(proc.wait(), timeout=30) == -9
