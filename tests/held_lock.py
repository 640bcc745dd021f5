"""Prove a command's processes are all gone, instead of sleeping and hoping they would have shown by then.

A command that starts with :data:`HOLD` takes a shared ``flock`` on ``held`` in its working directory, on a
descriptor every process it starts inherits. The lock is released only when the last of them has exited, so
once :func:`until_released` gets the lock exclusively, nothing of the command is left to write anything later.
"""

from __future__ import annotations

import asyncio
import fcntl
from pathlib import Path

__all__ = ["HOLD", "until_released"]

HOLD = "exec 9>held && flock -s 9 && "
"""Prefix of a shell command: its processes hold ``held`` (shared) until every one of them has exited."""


async def until_released(root: Path, *, timeout: float = 30.0) -> None:
    """Return once no process of the command started with :data:`HOLD` in ``root`` is alive."""
    deadline = asyncio.get_running_loop().time() + timeout
    with (root / "held").open("a") as held:
        while True:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if asyncio.get_running_loop().time() > deadline:
                    message = f"a process of the command in {root} is still alive after {timeout:g}s"
                    raise AssertionError(message) from None
                await asyncio.sleep(0.01)
                continue
            fcntl.flock(held, fcntl.LOCK_UN)
            return
