"""The hash chain of every aggregate's events, and the checkpoints of its heads (``docs/audit.md``).

Each stored event gets a digest: SHA-256 over the previous event's digest (of the same aggregate; 32 zero bytes
for its first chained event) and the event's aggregate id, version, topic and stored state bytes, exactly as
recorded. The application recorder writes each link with its event, in the same transaction: on SQLite in a
``digest`` column of the event's own row (``runtime/sqlite_store.py``), on PostgreSQL in a table beside the events
keyed by aggregate id and version (``runtime/postgres_store.py``). An event is never recorded without its link.
Only the previous digest of the aggregate is needed, kept per aggregate after each commit, so chaining costs one
hash per event (and a read of the previous digest only when the aggregate is not in the kept set).

A checkpoint records the chain heads (aggregate → last version and digest) changed since the previous
checkpoint, up to a position of the notification log, itself chained to the previous checkpoint. The relay
records one after publishing, at most once per ``checkpoint_interval``; ``autarch audit verify`` then notices a
removed last event, which the chain alone cannot show.

``cli/audit_verify.py`` (the standalone verifier, stdlib only) computes the same digests; a test keeps the two
equal.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from eventsourcing.persistence import StoredEvent

__all__ = ["GENESIS", "ChainedRecorder", "Chainer", "Checkpoint", "checkpoint_digest", "id_text", "link"]

GENESIS = bytes(32)
"""The "previous digest" of an aggregate's first chained event."""
_EVENT_DOMAIN = b"autarch-chain/1\n"
_CHECKPOINT_DOMAIN = b"autarch-checkpoint/1\n"


def id_text(originator_id: UUID | str) -> str:
    """The aggregate id as the digest covers it: a UUID in its dashed form, any other id as it is."""
    return str(originator_id)


def link(prev: bytes, originator_id: str, version: int, topic: str, state: bytes) -> bytes:
    """The digest of one event, chained to ``prev`` (each field length-prefixed, so no two inputs collide)."""
    h = hashlib.sha256(_EVENT_DOMAIN)
    h.update(prev)
    for part in (originator_id.encode(), str(version).encode(), topic.encode(), bytes(state)):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


@dataclass(frozen=True)
class Checkpoint:
    """Chain heads recorded at one position of the notification log."""

    seq: int
    position: int
    """Last notification id the checkpoint covers."""
    taken_at: str
    heads: dict[str, tuple[int, str]]
    """Aggregate id → (version, hex digest) of every aggregate that recorded events since the previous checkpoint."""
    prev: bytes
    digest: bytes

    def payload(self) -> bytes:
        return checkpoint_payload(self.seq, self.position, self.taken_at, self.heads)


def checkpoint_payload(seq: int, position: int, taken_at: str, heads: dict[str, tuple[int, str]]) -> bytes:
    body = {"seq": seq, "position": position, "taken_at": taken_at,
            "heads": {k: [v, d] for k, (v, d) in sorted(heads.items())}}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def checkpoint_digest(prev: bytes, payload: bytes) -> bytes:
    return hashlib.sha256(_CHECKPOINT_DOMAIN + prev + payload).digest()


def new_checkpoint(previous: Checkpoint | None, position: int, heads: dict[str, tuple[int, str]]) -> Checkpoint:
    seq = previous.seq + 1 if previous else 1
    prev = previous.digest if previous else GENESIS
    taken_at = datetime.now(UTC).isoformat(timespec="milliseconds")
    digest = checkpoint_digest(prev, checkpoint_payload(seq, position, taken_at, heads))
    return Checkpoint(seq=seq, position=position, taken_at=taken_at, heads=heads, prev=prev, digest=digest)


Links = list[tuple[UUID | str, int, bytes]]
Pending = dict[UUID | str, tuple[int, bytes]]


class Chainer:
    """Computes the links of events about to be inserted, keeping each aggregate's last committed digest.

    ``read_prev(cursor, originator_id, version)`` reads a recorded digest (None when that event is unchained or
    absent) inside the inserting transaction. The kept digests change only after the transaction committed
    (:meth:`committed`): a rolled-back insert (another writer won the version) leaves them as they were.
    """

    def __init__(self, read_prev: Callable[[Any, UUID | str, int], bytes | None], *, keep: int = 65_536) -> None:
        self._read_prev = read_prev
        self._keep = keep
        self._heads: OrderedDict[UUID | str, tuple[int, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def links(self, cursor: Any, stored_events: Sequence[StoredEvent]) -> tuple[Links, Pending]:
        pending: Pending = {}
        links: Links = []
        for event in stored_events:
            oid, version = event.originator_id, event.originator_version
            known = pending.get(oid)
            if known is None:
                with self._lock:
                    known = self._heads.get(oid)
            if version == 1:
                prev = GENESIS
            elif known is not None and known[0] == version - 1:
                prev = known[1]
            else:
                # Not kept (evicted, or written by another process): one indexed read. An unchained predecessor
                # (recorded before chaining existed) starts the chain afresh.
                prev = self._read_prev(cursor, oid, version - 1) or GENESIS
            digest = link(prev, id_text(oid), version, event.topic, event.state)
            pending[oid] = (version, digest)
            links.append((oid, version, digest))
        return links, pending

    def committed(self, pending: Pending) -> None:
        with self._lock:
            for oid, head in pending.items():
                self._heads[oid] = head
                self._heads.move_to_end(oid)
            while len(self._heads) > self._keep:
                self._heads.popitem(last=False)


@runtime_checkable
class ChainedRecorder(Protocol):
    """What an application recorder that chains its events offers the relay and ``autarch audit``."""

    def chain_of(self, originator_id: UUID | str) -> dict[int, bytes]:
        """Version → digest of every link recorded for one aggregate (on PostgreSQL a link may outlive its event)."""

    def chained_ids(self) -> list[str]:
        """Every aggregate id with a recorded event or link."""

    def links_between(self, first: int, last: int) -> dict[int, tuple[str, int, bytes]]:
        """Notification id → (aggregate id, version, digest) of the chained events in ``first..last``."""

    def heads_between(self, after: int, upto: int) -> dict[str, tuple[int, str]]:
        """Aggregate id → (version, hex digest) of the last chained event of each aggregate in ``after+1..upto``."""

    def checkpoints(self) -> list[Checkpoint]:
        """Every recorded checkpoint, in order."""

    def last_checkpoint(self) -> Checkpoint | None:
        """The latest checkpoint (None: none yet)."""

    def insert_checkpoint(self, checkpoint: Checkpoint) -> None: ...


def record_checkpoint(recorder: ChainedRecorder, position: int) -> Checkpoint | None:
    """Record the chain heads changed since the last checkpoint, up to ``position`` (None: nothing changed)."""
    previous = recorder.last_checkpoint()
    after = previous.position if previous else 0
    if position <= after:
        return None
    heads = recorder.heads_between(after, position)
    if not heads:
        return None
    checkpoint = new_checkpoint(previous, position, heads)
    recorder.insert_checkpoint(checkpoint)
    return checkpoint


def checkpoint_from_row(seq: int, payload: str | bytes, prev: bytes, digest: bytes) -> Checkpoint:
    body = json.loads(payload)
    heads = {k: (int(v), str(d)) for k, (v, d) in body["heads"].items()}
    return Checkpoint(seq=seq, position=int(body["position"]), taken_at=str(body["taken_at"]), heads=heads,
                      prev=bytes(prev), digest=bytes(digest))


def heads_of(rows: Iterable[tuple[Any, int, bytes | None]], convert: Callable[[Any], UUID | str]
             ) -> dict[str, tuple[int, str]]:
    return {id_text(convert(oid)): (int(version), bytes(digest).hex())
            for oid, version, digest in rows if digest is not None}
