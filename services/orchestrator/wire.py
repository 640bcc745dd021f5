"""What the relay publishes: the wire event of each event the orchestrator's store records.

Each context translates its own aggregate's events (its ``views`` module). Some need a fact the event does not
carry (a loop session's iteration limit and notification targets, an epic's workflow), fixed when the aggregate
was made: it is read from the store the first time and kept.
"""

from __future__ import annotations

from eventsourcing.domain import DomainEvent

from autarch.contracts.events import Event
from autarch.contracts.loops import NotifyTarget

from .application import WorkflowApplication
from .loop.model import LoopSession
from .loop.views import loop_to_contract
from .mail.model import Mailbox
from .mail.views import mail_to_contract
from .swarm.model import Swarm
from .swarm.views import swarm_to_contract
from .workflow.views import to_contract

__all__ = ["WireEvents"]


class WireEvents:
    """The relay's ``to_contract``: a stored event's wire event, or None for one that is not distributed."""

    def __init__(self, app: WorkflowApplication) -> None:
        self.app = app
        self._settled: dict[str, tuple[int, list[NotifyTarget]]] = {}
        self._epics: dict[str, str] = {}
        self._workers: dict[tuple[str, str, int], str] = {}
        """(swarm, bead, attempt) → the worker its claim named, for the attempts claimed and not ended yet among
        the events translated so far (they come in order: a claim before its merge)."""

    def __call__(self, domain_event: DomainEvent) -> Event | None:
        if isinstance(domain_event, LoopSession.Event):
            return loop_to_contract(domain_event, self.settled_of)
        if isinstance(domain_event, Swarm.Event):
            self._remember_worker(domain_event)
            return swarm_to_contract(domain_event, self.epic_of, self.at_event, self.worker_of)
        if isinstance(domain_event, Mailbox.Event):
            return mail_to_contract(domain_event)
        return to_contract(domain_event)

    def settled_of(self, session_id: str) -> tuple[int, list[NotifyTarget]]:
        """A loop session's (max iterations, notification targets): fixed at its start."""
        known = self._settled.get(session_id)
        if known is None:
            session = self.app.get_loop(session_id)
            known = self._settled[session_id] = (session.max_iterations, list(session.notify))
        return known

    def epic_of(self, swarm_id: str) -> str:
        """The workflow (epic id) of a swarm aggregate."""
        known = self._epics.get(swarm_id)
        if known is None:
            known = self._epics[swarm_id] = self.app.get_swarm_by_id(swarm_id).workflow_id
        return known

    def _remember_worker(self, e: DomainEvent) -> None:
        swarm_id = str(e.originator_id)
        if isinstance(e, Swarm.BeadClaimed):
            self._workers[(swarm_id, e.bead_id, e.attempt)] = e.worker
        elif isinstance(e, Swarm.BeadReopened | Swarm.BeadStopped):
            self._workers.pop((swarm_id, e.bead_id, e.attempt), None)
        elif isinstance(e, Swarm.Finished):
            for key in [k for k in self._workers if k[0] == swarm_id]:
                del self._workers[key]

    def worker_of(self, e: DomainEvent) -> str:
        """The worker of a merged bead's attempt: the one its claim named, seen earlier in the same run; else read
        from the swarm as of the event (a relay that started after the claim). Rebuilding the swarm for every merge
        cost the orchestrator more per bead the larger the epic."""
        key = (str(e.originator_id), e.bead_id, e.attempt)  # type: ignore[attr-defined]  # a BeadMerged
        known = self._workers.pop(key, None)
        return known if known is not None else self.at_event(e).attempts[key[1:]].worker

    def at_event(self, e: DomainEvent) -> Swarm:
        """The swarm as of one of its events (for the events whose wire form is the bead after the change)."""
        return self.app.swarm_at(e.originator_id, e.originator_version)
