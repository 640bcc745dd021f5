"""Workflows halted for lack of space (``disk_full``), and carried on by themselves once there is room again.

A workflow halts ``disk_full``, naming the path, when its work cannot be written: the agent runner says a turn of
it waits for space (a :class:`StorageNotice` on ``autarch.storage.<service>``), or one of the driver's steps failed
for lack of space (a service's ``storage_full`` error, or this service's own store). The halt is recorded even on a
full disk: the orchestrator's store gives up its reserve (``runtime.storage.Reserve``) to record it.

The halt is lifted (``Resumed``, as by ``resume``) when the runner says the turn goes on, or when this process
sees room again on the path (checked every ``interval`` seconds, for a path on this machine); the driver then
retries the step that failed, and the runner runs the interrupted turn again from what it recorded. ``resume``
lifts it too (a step that still finds no space halts again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from autarch.contracts import subjects
from autarch.contracts.storage import StorageNotice
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.storage import STORAGE, Reserve, StorageFull, StorageState

from ..partition import WHOLE, Partition
from . import controls
from .book import WorkflowBook
from .model import Workflow
from .state import HaltDetails
from .steps import current_step

__all__ = ["SpaceHalts", "halt_for_space", "lift_space_halt"]

log = logging.getLogger("orchestrator.space")

_NOTICE = msgspec.json.Decoder(StorageNotice)


def halt_for_space(wf: Workflow, path: str, message: str) -> bool:
    """Halt ``wf`` for lack of space at ``path``, unless it is finished or halted already; whether it halted."""
    if wf.halt is not None or wf.abandoned or wf.stage == "done":
        return False
    run = wf.running_run()
    wf.halt_for("disk_full", message, pulse_id=run.id if run else None,
                details=HaltDetails(step=current_step(wf), path=path))
    return True


def lift_space_halt(wf: Workflow, path: str | None = None) -> bool:
    """Lift ``wf``'s ``disk_full`` halt (for ``path``, when given); whether it was lifted."""
    halt = wf.halt
    if halt is None or halt.reason != "disk_full" or (path is not None and halt.details.path != path):
        return False
    controls.resume(wf, None)
    return True


def _local(path: str) -> bool:
    """Whether ``path`` is on this machine (a file or directory whose parent exists here), so its room can be
    checked here; a PostgreSQL server or another machine's volume is not."""
    return "://" not in path and Path(path).parent.exists()


class SpaceHalts:
    """Halts this partition's workflows whose work waits for space, and lifts those halts once there is room."""

    def __init__(self, *, nc: Client, book: WorkflowBook, partition: Partition = WHOLE,
                 storage: StorageState = STORAGE, reserve: Reserve | None = None, interval: float = 2.0) -> None:
        self.nc = nc
        self.book = book
        self.partition = partition
        self.storage = storage
        self.reserve = reserve
        """The orchestrator store's reserve, made again here once the disk has room."""
        self.interval = interval
        self._sub: Subscription | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.reserve is not None:
            await asyncio.to_thread(self.reserve.ensure)
        self._sub = await self.nc.subscribe(subjects.storage("*"), cb=self._on_notice)
        self._task = asyncio.create_task(self._watch(), name="orchestrator-space-halts")

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def halt(self, workflow_id: str, full: StorageFull) -> None:
        """Record that ``workflow_id`` waits for space at ``full.path`` (nothing when it is halted already)."""
        path = full.path
        if not path:
            # A service said it had no space without saying where: the workflow's worktree, else its repository.
            wf = await self.book.read(workflow_id)
            path = wf.execution.worktree_path if wf.execution is not None else wf.repo
            full = StorageFull(path, full.detail)
        message = str(full)
        _, halted = await self.book.change(workflow_id, lambda wf: halt_for_space(wf, path, message))
        if halted:
            log.error("workflow %s halts: %s", workflow_id, message)

    async def lift(self, workflow_id: str, path: str | None = None) -> None:
        _, lifted = await self.book.change(workflow_id, lambda wf: lift_space_halt(wf, path))
        if lifted:
            log.warning("workflow %s goes on: %s has room again", workflow_id, path or "its path")

    async def _on_notice(self, msg: Msg) -> None:
        try:
            notice = _NOTICE.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        for workflow_id in notice.workflow_ids:
            if not self.partition.owns(workflow_id) or workflow_id not in self.book.views:
                continue  # another partition's, or a loop session's
            try:
                if notice.problem is not None:
                    detail = notice.problem.message.removeprefix("no space left on device: ")
                    await self.halt(workflow_id, StorageFull(notice.path, f"{notice.service}: {detail}"))
                else:
                    await self.lift(workflow_id, notice.path)
            except (ServiceFailure, StorageFull) as exc:
                log.warning("workflow %s: storage notice of %s not recorded (%s); its next one will be", workflow_id,
                            notice.service, exc)
            except Exception:
                log.exception("workflow %s: storage notice of %s failed", workflow_id, notice.service)

    async def _watch(self) -> None:
        """Lift each ``disk_full`` halt whose path (on this machine) has room again; make the reserve again."""
        while True:
            await asyncio.sleep(self.interval)
            if self.reserve is not None:
                await asyncio.to_thread(self.reserve.ensure)
            for workflow_id, view in list(self.book.views.items()):
                halt = view.halt
                if halt is None or halt.reason != "disk_full":
                    continue
                path = str(halt.details.get("path") or "")
                if not path or not _local(path) or not self.storage.has_room(path):
                    continue
                try:
                    await self.lift(workflow_id, path)
                except Exception as exc:
                    log.warning("workflow %s: disk_full halt not lifted yet (%s)", workflow_id, exc)
