"""The latest recorded state of each workflow, kept between commands and checked against the store on every read.

The driver reads a workflow several times per event it handles (each ``_advance`` pass, each action) and every
command reads it again before changing it. Rebuilding it from its events each time was the orchestrator's
largest cost under 20 concurrent workflows (the replay's SQLite read and decoding, and the hop to a worker
thread for it). Here the last state read or saved is kept, and a read asks the store only whether anything was
recorded after that version (one indexed lookup): another writer of the same store (a second orchestrator, a
tool run against the database) is seen at once, and the workflow is then rebuilt from the store as before.
Measured with ``tests/benchmarks/workflows.py`` (20 workflows, three runs each, alternated): the orchestrator
spent 1.15-1.4 CPU seconds per run instead of 2.0-2.2.

A kept workflow is shared by every reader and never changed in place: :meth:`LatestWorkflows.copy_for_change`
gives a command its own copy, and only a copy whose events were saved replaces the kept one. A kept workflow
found changed anyway (its version is not the one it was kept at: a reader called a command on it) is dropped
and rebuilt from the store, so such a slip cannot leak unsaved state into later reads.
"""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from uuid import UUID

from .application import WorkflowApplication
from .domainmodel import Workflow

__all__ = ["LatestWorkflows"]


@dataclass
class LatestWorkflows:
    """The latest state of up to ``capacity`` workflows (least recently read dropped first)."""

    app: WorkflowApplication
    capacity: int = 1024
    _kept: OrderedDict[str, tuple[int, Workflow]] = field(default_factory=OrderedDict)
    # Reads of a networked store run in worker threads: the dictionary's check-then-update steps are guarded.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, workflow_id: str) -> Workflow:
        """The workflow as the store holds it now; shared, so read it only (``AggregateNotFoundError``)."""
        with self._lock:
            entry = self._kept.get(workflow_id)
        if entry is not None:
            version, workflow = entry
            if workflow.version == version and not self.app.recorder.select_events(UUID(workflow_id), gt=version,
                                                                                    limit=1):
                with self._lock:
                    if workflow_id in self._kept:
                        self._kept.move_to_end(workflow_id)
                return workflow
        workflow = self.app.get_workflow(workflow_id)
        self.keep(workflow)
        return workflow

    def keep(self, workflow: Workflow) -> None:
        """Remember ``workflow`` as the latest state: just rebuilt from the store, or its events just saved."""
        workflow_id = str(workflow.id)
        with self._lock:
            entry = self._kept.get(workflow_id)
            if entry is not None and entry[0] > workflow.version:
                return  # a later state was kept meanwhile (a slower read of an older one finishing last)
            self._kept[workflow_id] = (workflow.version, workflow)
            self._kept.move_to_end(workflow_id)
            while len(self._kept) > self.capacity:
                self._kept.popitem(last=False)

    @staticmethod
    def copy_for_change(workflow: Workflow) -> Workflow:
        """A private copy a command may change (a pickle round trip: a third of the cost of ``deepcopy``)."""
        return pickle.loads(pickle.dumps(workflow, pickle.HIGHEST_PROTOCOL))
