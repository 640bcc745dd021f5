"""One system per data dir: the lock ``autarch up`` holds on ``<data dir>/system.lock`` for the system's life.

A data dir holds the event stores, the worktrees, the token and the JetStream store of one system; two systems
on it would be two orchestrators, runners and relays writing the same stores with nobody coordinating them.
``autarch up`` takes an exclusive ``flock`` on the file before it starts anything and keeps the descriptor open
until it has stopped everything. The kernel drops the lock when the process ends however it ends (a crash, a
SIGKILL), so no stale lock outlives its holder; the descriptor is not inherited by the children. The file
names the holder (its pid, gateway and NATS), so that the next ``autarch up`` can say who has the data dir.

Per system, not per process: ``autarch up --cluster`` runs several instances of every service on one data dir by
design, all under its single supervisor's lock. Nothing else takes it, so the other commands (``autarch status``,
``workflow``, ``replay`` …) keep working against the live system.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["DataDirInUse", "SystemLock"]


class DataDirInUse(RuntimeError):
    """Another live system holds the data dir; ``holder`` is what its lock file says about it."""

    def __init__(self, data_dir: Path, holder: dict[str, Any]) -> None:
        self.data_dir = data_dir
        self.holder = holder
        pid = holder.get("pid", "?")
        where = ", ".join(f"{label} {holder[key]}" for key, label in (("gateway", "gateway"), ("nats", "NATS"))
                          if holder.get(key))
        super().__init__(
            f"the data dir {data_dir} is in use by the Autarch system of pid {pid}"
            f"{f' ({where})' if where else ''}: one system per data dir. Stop it first, or start this one with "
            f"another --data-dir; the other commands (autarch status, workflow, watch, …) work against the "
            f"running one.")


class SystemLock:
    """The exclusive lock on ``<data dir>/system.lock`` (see the module's docstring)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / "system.lock"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, holder: dict[str, Any]) -> None:
        """Take the lock and write ``holder`` (with this pid) into it, or raise :class:`DataDirInUse`."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # No O_TRUNC: the file is emptied only once the lock is ours, never under a live holder's feet.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirInUse(self.data_dir, self._holder()) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.update(holder)

    def update(self, holder: dict[str, Any]) -> None:
        """Rewrite what the lock file says about its holder (the lock stays held)."""
        assert self._fd is not None, "not held"
        data = json.dumps({"pid": os.getpid(), **holder}, indent=2).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Drop the lock. The file stays as it is: removing it could race with the next holder's open, and what
        it says counts only while its lock is held."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        os.close(fd)

    def _holder(self, wait: float = 1.0) -> dict[str, Any]:
        """What the live holder wrote; it writes right after taking the lock, so an empty file is read again."""
        deadline = time.monotonic() + wait
        while True:
            try:
                found = json.loads(self.path.read_text())
                if isinstance(found, dict):
                    return found
            except (OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                return {}
            time.sleep(0.02)
