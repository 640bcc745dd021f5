"""Which share of the workflows, epics and loop sessions one orchestrator partition owns.

With ``orchestrator_partitions`` P above 1, every workflow (with its epic and mailbox, which share its id) and
every loop session belongs to partition ``crc32(id) % P`` (``subjects.partition_of``). A partition is served by
whichever orchestrator instance holds its lease (``runtime/standby.partitioned``): its endpoints answer on
``autarch.svc.orchestrator.p<k>.<verb>``, its read model and drivers hold only what it owns, and its turn
consumer hands on only its own turns. All partitions share one event store; one relay between them publishes
it (``runtime/relay_leader``). With P = 1 nothing of this shows: subjects, consumers and leases keep their
unpartitioned names.
"""

from __future__ import annotations

from dataclasses import dataclass

from autarch.contracts import subjects

__all__ = ["WHOLE", "Partition"]


@dataclass(frozen=True)
class Partition:
    """Partition ``index`` of ``count``."""

    index: int = 0
    count: int = 1

    @property
    def split(self) -> bool:
        """Whether the orchestrator is partitioned at all (more than one partition)."""
        return self.count > 1

    @property
    def suffix(self) -> str:
        """What this partition adds to the names it has of its own (consumers, lease holders); empty unsplit."""
        return f"-p{self.index}" if self.split else ""

    def owns(self, key: str) -> bool:
        """Whether the workflow, epic or loop session ``key`` belongs here."""
        return subjects.partition_of(key, self.count) == self.index

    def subject(self, verb: str) -> str:
        """The subject this partition serves ``verb`` on."""
        return subjects.orchestrator_partition(verb, self.index, self.count)


WHOLE = Partition()
"""The orchestrator unsplit: partition 0 of 1."""
