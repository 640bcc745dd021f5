"""``autarch audit verify``: the store, its hash chains, its checkpoints and the stream, checked against each other.

Every finding names the aggregate and the position (its version; for the stream also the stream sequence):

- ``edited``: an event whose bytes no longer give its recorded link;
- ``reordered``: an event found at another version than the one its link was recorded for;
- ``removed``: a version missing from an aggregate (between others, or still named by its link or a checkpoint);
- ``inserted``: an event with no link after chained ones (recorded around the store's recorder);
- ``rewritten``: a link that differs from what a checkpoint or the stream recorded for it;
- ``checkpoint``: a checkpoint whose own digest or chain to the previous one does not hold;
- ``forged``: a stream message no event of the store accounts for;
- ``differs_on_stream``: a stream message whose body is not the wire form of the store's event (one published in
  an older shape of the event, before a field was renamed, is compared as it reads today: ``contracts.events.upcast``);
- ``missing_from_stream``: a published event with no message on the stream.

``unchained`` (events recorded before chaining existed) and ``unpublished`` (events the relay has not reached yet)
are reported as such, never as tampering.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.application import Application
from eventsourcing.domain import DomainEvent
from eventsourcing.persistence import Notification, StoredEvent

from autarch.contracts.base import encode
from autarch.contracts.events import Event, current_shape, decode_event

from .chain import GENESIS, ChainedRecorder, checkpoint_digest, id_text, link
from .relay import AGGREGATE, DIGEST, MSG_ID, VERSION, store_id_of

__all__ = ["NOT_TAMPERING", "AuditReport", "Finding", "StreamMessage", "StreamUnavailable", "read_stream",
           "relay_position", "verify_store", "verify_stream"]

NOT_TAMPERING = frozenset({"unchained", "unpublished"})


@dataclass(frozen=True)
class Finding:
    """One thing found: what, for which aggregate, at which version (and stream sequence), and why."""

    kind: str
    aggregate: str
    version: int | None
    detail: str
    stream_seq: int | None = None

    @property
    def tampering(self) -> bool:
        return self.kind not in NOT_TAMPERING

    def line(self) -> str:
        where = f" version {self.version}" if self.version is not None else ""
        seq = f" (stream sequence {self.stream_seq})" if self.stream_seq is not None else ""
        return f"{self.kind}: aggregate {self.aggregate}{where}{seq}: {self.detail}"


@dataclass
class AuditReport:
    """What one verification looked at and found."""

    store: str
    aggregates: int = 0
    events: int = 0
    chained: int = 0
    checkpoints: int = 0
    stream_messages: int | None = None
    heads: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Aggregate id → (version, hex digest) of its last chained event: compare with an exported bundle's."""
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.tampering for f in self.findings)

    def add(self, finding: Finding) -> None:
        key = (finding.kind, finding.aggregate, finding.version, finding.stream_seq)
        if all((f.kind, f.aggregate, f.version, f.stream_seq) != key for f in self.findings):
            self.findings.append(finding)


def _recorder(app: Application[Any]) -> ChainedRecorder:
    recorder = app.recorder
    if not isinstance(recorder, ChainedRecorder):
        raise TypeError(f"the {app.name} store's recorder ({type(recorder).__name__}) keeps no hash chain")
    return recorder


def verify_store(app: Application[Any], report: AuditReport, ids: Iterable[str] | None = None) -> None:
    """Check every aggregate named (all of the store's by default) against its chain, then the checkpoints."""
    recorder = _recorder(app)
    scope = sorted(ids) if ids is not None else recorder.chained_ids()
    for aggregate in scope:
        events = list(app.recorder.select_events(_as_id(aggregate)))
        chain = recorder.chain_of(_as_id(aggregate))
        if not events and not chain:
            continue
        report.aggregates += 1
        report.events += len(events)
        report.chained += sum(1 for e in events if e.originator_version in chain)
        _verify_aggregate(aggregate, events, chain, report)
    _verify_checkpoints(app, recorder, report, None if ids is None else set(scope))


def _as_id(aggregate: str) -> UUID | str:
    try:
        return UUID(aggregate)
    except ValueError:
        return aggregate


def _verify_aggregate(aggregate: str, events: list[StoredEvent], chain: dict[int, bytes], report: AuditReport) -> None:
    rows = {e.originator_version: e for e in events}
    last = max([*rows, *chain])
    chained_seen = False
    unchained = 0
    for version in range(1, last + 1):
        row, digest = rows.get(version), chain.get(version)
        if row is None:
            why = ("its link of the chain is still recorded" if digest is not None
                   else "later versions remain")
            report.add(Finding("removed", aggregate, version, f"the event is gone ({why})"))
            continue
        if digest is None:
            if chained_seen:
                report.add(Finding("inserted", aggregate, version,
                                   "no link of the chain after chained events: recorded around the store's recorder"))
            else:
                unchained += 1
            continue
        chained_seen = True
        if version > 1 and version - 1 not in rows:
            continue  # its predecessor is reported removed; this link cannot be checked without it
        prev = chain.get(version - 1, GENESIS) if version > 1 else GENESIS
        if link(prev, aggregate, version, row.topic, row.state) == digest:
            report.heads[aggregate] = (version, digest.hex())
            continue
        kind, detail = _mismatch(aggregate, version, row, digest, chain)
        if kind:
            report.add(Finding(kind, aggregate, version, detail))
        else:
            report.heads[aggregate] = (version, digest.hex())
    if unchained:
        report.add(Finding("unchained", aggregate, None,
                           f"{unchained} event(s) recorded before the chain existed (versions 1-{unchained} at most)"))


def _mismatch(aggregate: str, version: int, row: StoredEvent, digest: bytes,
              chain: dict[int, bytes]) -> tuple[str | None, str]:
    """What an event whose link does not follow from its predecessor's is: (None, "") when the event and its link
    are intact and only its predecessor moved (a link recorded in the event's own row moves with it)."""
    previous = [GENESIS, *chain.values()]
    if len(previous) <= _SEARCH_LIMIT and any(
            link(d, aggregate, version, row.topic, row.state) == digest for d in previous):
        return None, ""
    for other in chain:
        if other == version:
            continue
        prev = chain.get(other - 1, GENESIS) if other > 1 else GENESIS
        # Recorded as ``other``: its link is either still at ``other`` (links kept apart from events) or came
        # along with the event (links in the event's row; its predecessor's link may have moved too).
        if link(prev, aggregate, other, row.topic, row.state) in (chain[other], digest):
            return "reordered", f"holds the event recorded as version {other}"
        if len(previous) <= _SEARCH_LIMIT and any(
                link(d, aggregate, other, row.topic, row.state) == digest for d in previous):
            return "reordered", f"holds the event recorded as version {other}"
    return "edited", "its bytes do not give its recorded link"


_SEARCH_LIMIT = 512
"""Links tried as a moved predecessor (a search in the square of the aggregate's length, on a mismatch only)."""


def _verify_checkpoints(app: Application[Any], recorder: ChainedRecorder, report: AuditReport,
                        scope: set[str] | None) -> None:
    prev = GENESIS
    for checkpoint in recorder.checkpoints():
        report.checkpoints += 1
        if checkpoint.prev != prev or checkpoint_digest(checkpoint.prev, checkpoint.payload()) != checkpoint.digest:
            report.add(Finding("checkpoint", "-", None, f"checkpoint {checkpoint.seq} does not hold its digest or "
                                                        "its chain to the previous checkpoint"))
        prev = checkpoint.digest
        for aggregate, (version, digest) in checkpoint.heads.items():
            if scope is not None and aggregate not in scope:
                continue
            recorded = recorder.chain_of(_as_id(aggregate)).get(version)
            present = app.recorder.select_events(_as_id(aggregate), gt=version - 1, lte=version)
            if not present:
                report.add(Finding("removed", aggregate, version,
                                   f"the event is gone (checkpoint {checkpoint.seq} recorded it)"))
            elif recorded is None or recorded.hex() != digest:
                report.add(Finding("rewritten", aggregate, version,
                                   f"its link differs from checkpoint {checkpoint.seq}'s"))


class StreamUnavailable(Exception):
    """The stream could not be read (it does not exist, NATS went away): nothing about it was checked."""


@dataclass(frozen=True)
class StreamMessage:
    seq: int
    subject: str
    headers: dict[str, str]
    data: bytes


async def read_stream(nc: Any, stream: str, subject: str, *, idle: float = 2.0) -> list[StreamMessage]:
    """Every message of ``stream`` on ``subject``, in order (an ordered consumer read to its end)."""
    from nats.js.api import ConsumerConfig, DeliverPolicy

    js = nc.jetstream()
    try:
        sub = await js.subscribe(subject, stream=stream, ordered_consumer=True,
                                 config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
    except Exception as exc:  # nats' own errors: no such stream, no JetStream, a timeout
        raise StreamUnavailable(f"cannot read the stream {stream}: {exc!r}") from exc
    messages: list[StreamMessage] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=idle)
            except TimeoutError:
                return messages  # nothing (more) on the subject
            messages.append(StreamMessage(msg.metadata.sequence.stream, msg.subject, dict(msg.headers or {}),
                                          bytes(msg.data)))
            if msg.metadata.num_pending == 0:
                return messages
    finally:
        await sub.unsubscribe()


_MSG_ID = re.compile(r"^(?P<app>[^:]+):(?P<store>[0-9a-f]{12}):(?P<nid>[0-9]+)$")


def _notifications(app: Application[Any], scope: set[str] | None, page: int = 1000) -> dict[int, Notification]:
    found: dict[int, Notification] = {}
    start = 1
    while True:
        batch = app.recorder.select_notifications(start=start, limit=page)
        for n in batch:
            if scope is None or id_text(n.originator_id) in scope:
                found[n.id] = n
        if len(batch) < page:
            return found
        start = batch[-1].id + 1


def relay_position(app: Application[Any]) -> int:
    """The last notification id the store's relay published (0: none yet)."""
    return app.factory.tracking_recorder().max_tracking_id(f"relay-{app.name}") or 0


def verify_stream(app: Application[Any], to_contract: Callable[[DomainEvent], Event | None],
                  messages: list[StreamMessage], report: AuditReport, *, position: int,
                  ids: Iterable[str] | None = None) -> None:
    """Check the stream's ``messages`` against the store: each published event once, as recorded, and nothing else.

    ``position`` is the relay's (the last notification id it published); ``ids`` limits the check to some
    aggregates (the messages then being those of their subject).
    """
    recorder = _recorder(app)
    scope = set(ids) if ids is not None else None
    store_id = store_id_of(app)
    notifications = _notifications(app, scope)
    known = scope if scope is not None else set(recorder.chained_ids())
    chains: dict[str, dict[int, bytes]] = {}
    report.stream_messages = 0
    seen: dict[int, StreamMessage] = {}
    for msg in messages:
        parsed = _MSG_ID.match(msg.headers.get(MSG_ID, ""))
        ours = parsed is not None and parsed["app"] == app.name and parsed["store"] == store_id
        claimed = msg.headers.get(AGGREGATE) or _subject_aggregate(msg.subject)
        if not ours:
            # Every relay names its store in the message id. A message naming none on the subject of what is
            # verified, or naming another store while claiming an aggregate of this one, was published by no relay
            # of this store. Any other message is another store's (the agent runner's, or an older store's on a
            # stream that outlived it), checked with that store.
            if (parsed is None and scope is not None) or claimed in known:
                report.add(Finding("forged", claimed, _int(msg.headers.get(VERSION)),
                                   "no relay of this store published it", msg.seq))
            continue
        report.stream_messages += 1
        assert parsed is not None
        nid = int(parsed["nid"])
        notification = notifications.get(nid)
        if notification is None:
            report.add(Finding("forged", claimed, _int(msg.headers.get(VERSION)),
                               f"names event {nid} of the store's log, which holds no such event", msg.seq))
            continue
        aggregate, version = id_text(notification.originator_id), notification.originator_version
        earlier = seen.get(nid)
        if earlier is not None:
            if (earlier.data, earlier.headers) != (msg.data, msg.headers):
                report.add(Finding("forged", aggregate, version,
                                   f"a second, different message for the event (first at sequence {earlier.seq})",
                                   msg.seq))
            continue  # the same message again: a republish after the duplicate window, not tampering
        seen[nid] = msg
        wire = _wire(app, to_contract, notification)
        if wire != msg.data and not _same_in_todays_shape(wire, msg.data):
            report.add(Finding("differs_on_stream", aggregate, version,
                               "the message's body is not the wire form of the store's event", msg.seq))
        if DIGEST in msg.headers:
            chain = chains.get(aggregate)
            if chain is None:
                chain = chains[aggregate] = recorder.chain_of(notification.originator_id)
            recorded = chain.get(version)
            if (msg.headers.get(AGGREGATE), msg.headers.get(VERSION)) != (aggregate, str(version)):
                report.add(Finding("forged", aggregate, version, "its chain headers name another event", msg.seq))
            elif recorded is None or recorded.hex() != msg.headers[DIGEST]:
                report.add(Finding("rewritten", aggregate, version,
                                   "its link in the store differs from the one published on the stream", msg.seq))
    unpublished = 0
    for nid, notification in notifications.items():
        if nid > position:
            unpublished += 1
            continue
        if nid in seen or _wire(app, to_contract, notification) is None:
            continue
        report.add(Finding("missing_from_stream", id_text(notification.originator_id),
                           notification.originator_version, f"published (event {nid} of the log), not on the stream"))
    if unpublished:
        report.add(Finding("unpublished", "-", None, f"{unpublished} event(s) the relay has not published yet"))


def _wire(app: Application[Any], to_contract: Callable[[DomainEvent], Event | None],
          notification: Notification) -> bytes | None:
    """The message the relay publishes for an event (None: not distributed; an unreadable, edited event counts as
    distributed, with a body no message has)."""
    try:
        contract = to_contract(app.mapper.to_domain_event(notification))  # type: ignore[arg-type]  # ours are DomainEvents
    except Exception:
        return b"\0unreadable"
    return None if contract is None else encode(contract)


def _same_in_todays_shape(wire: bytes | None, data: bytes) -> bool:
    """``data``, a message in a shape an event had before (a session's, turn's or loop's event published before issue
    33 renamed its run field), says what ``wire`` says: a relay published it as it was then, nobody changed it."""
    if wire is None or current_shape(data) is data:
        return False  # today's shape: only the very bytes of the wire form are the event's
    try:
        return decode_event(data) == decode_event(wire)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False


def _subject_aggregate(subject: str) -> str:
    tokens = subject.split(".")
    return tokens[4] if len(tokens) > 4 else subject


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None
