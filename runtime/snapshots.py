"""Snapshots of aggregates: rebuilding a long-lived aggregate from its last snapshot and the events after it.

Without them, every rebuild replays an aggregate's whole life: a loop session of a thousand iterations is five
thousand events. A snapshot is the aggregate's state at one version, kept in eventsourcing's own snapshot table
(``stored_snapshots`` in SQLite, ``<app>_snapshots`` in PostgreSQL, made by the store's factory as
eventsourcing's snapshotting makes it), beside the events and never in the notification log: nothing relays it.

The events stay the only truth; a snapshot is a shortcut that may be missing, late or unusable, and then the
aggregate is rebuilt from all its events as before:

- **Taken from what is recorded only**: after a save whose events cross a multiple of the interval (``every``
  versions, or an eighth of a long-lived aggregate's events: :meth:`Snapshots.interval`), and after a rebuild that
  had to replay that many events or more past the last snapshot. A crash between the events and the snapshot, or a
  snapshot that fails to be written, leaves an older snapshot (or none): the next rebuild replays more events, and
  loses nothing.
- **Used only by the code that took it**: each snapshot carries a fingerprint of the aggregate's shape, the source of
  the modules that define the aggregate class and what its module uses of ours (its events, its typed state, its
  rules). A snapshot taken by other code (an attribute added since, such as a new field on a loop session, or an
  event applied differently) is passed over for a full replay, which then takes a snapshot of today's shape.
- **Exact**: the state is written as tagged JSON (msgspec structs by their class, tuples, sets, dicts with any keys,
  datetimes, UUIDs, decimals, bytes, arrays, enums) and read back to equal values; a value of any other type means the
  aggregate is not snapshotted at all (full replays, as before), never an approximation. Anything that goes wrong
  reading a snapshot (a class moved, a field made required) falls back to the full replay.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import inspect
import logging
import sys
from array import array
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, TypeVar
from uuid import UUID

import msgspec
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate
from eventsourcing.domain import Snapshot as EsSnapshot
from eventsourcing.persistence import EventStore, IntegrityError
from eventsourcing.utils import get_topic, resolve_topic

from .aggregates import check_kind, load_as

__all__ = ["DEFAULT_EVERY", "Snapshot", "Snapshots", "Unsnapshottable", "decode_state", "encode_state", "shape_of"]

DEFAULT_EVERY = 100
"""Events between two snapshots of one aggregate unless configured (``snapshot_every``)."""

log = logging.getLogger("autarch.snapshots")

A = TypeVar("A", bound=Aggregate)


class Unsnapshottable(TypeError):
    """An aggregate holds a value the snapshot format cannot write back exactly."""


# --- the state as tagged JSON ------------------------------------------------------------------------------------
# A dict of ours is always {tag: payload}: plain JSON values (str, int, float, bool, None) and lists stand for
# themselves, everything else is tagged, so nothing a user wrote into a field can be read as a tag.

_PLAIN = (str, int, float, bool, type(None))


def _encode(value: Any) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is list:
        return [_encode(v) for v in value]
    if kind is dict:
        return {"d": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, msgspec.Struct):
        return {"s": get_topic(kind), "f": {name: _encode(getattr(value, name)) for name in value.__struct_fields__}}
    if isinstance(value, enum.Enum):
        return {"e": get_topic(kind), "v": _encode(value.value)}
    if kind is tuple:
        return {"t": [_encode(v) for v in value]}
    if kind is set or kind is frozenset:
        return {"set" if kind is set else "fset": [_encode(v) for v in value]}
    if kind is datetime:
        return {"dt": value.isoformat()}
    if kind is date:
        return {"date": value.isoformat()}
    if kind is time:
        return {"time": value.isoformat()}
    if kind is UUID:
        return {"uuid": value.hex}
    if kind is Decimal:
        return {"dec": str(value)}
    if kind is bytes:
        return {"b": base64.b64encode(value).decode("ascii")}
    if kind is array:
        return {"arr": [value.typecode, value.tolist()]}
    raise Unsnapshottable(f"a {kind.__module__}.{kind.__qualname__} cannot be written into a snapshot")


def _decode(value: Any) -> Any:
    kind = type(value)
    if kind is list:
        return [_decode(v) for v in value]
    if kind is not dict:
        return value
    tag: Any
    payload: Any
    ((tag, payload),) = value.items() if len(value) == 1 else ((None, None),)
    if tag is None:  # a struct: {"s": topic, "f": fields}; an enum: {"e": topic, "v": value}
        if "s" in value:
            cls = resolve_topic(value["s"])
            return cls(**{name: _decode(v) for name, v in value["f"].items()})
        cls = resolve_topic(value["e"])
        return cls(_decode(value["v"]))
    if tag == "d":
        return {_decode(k): _decode(v) for k, v in payload}
    if tag == "t":
        return tuple(_decode(v) for v in payload)
    if tag == "set":
        return {_decode(v) for v in payload}
    if tag == "fset":
        return frozenset(_decode(v) for v in payload)
    if tag == "dt":
        return datetime.fromisoformat(payload)
    if tag == "date":
        return date.fromisoformat(payload)
    if tag == "time":
        return time.fromisoformat(payload)
    if tag == "uuid":
        return UUID(payload)
    if tag == "dec":
        return Decimal(payload)
    if tag == "b":
        return base64.b64decode(payload)
    if tag == "arr":
        return array(payload[0], payload[1])
    raise ValueError(f"unknown snapshot tag {tag!r}")


_OWN = ("_id", "_version", "_pending_events")
"""What eventsourcing keeps on an aggregate beside its state (the snapshot's own fields say the id and version)."""


def encode_state(aggregate: Aggregate) -> dict[str, Any]:
    """The aggregate's state (its attributes but its id, version and pending events, and those its class names in
    ``transient_attributes``: bookkeeping of this process, not state) as tagged JSON values."""
    skip = _OWN + tuple(getattr(type(aggregate), "transient_attributes", ()))
    return {name: _encode(value) for name, value in vars(aggregate).items() if name not in skip}


def decode_state(state: dict[str, Any]) -> dict[str, Any]:
    """What :func:`encode_state` wrote, as the attribute values it was written from."""
    return {name: _decode(value) for name, value in state.items()}


# --- the shape of an aggregate class -----------------------------------------------------------------------------

_shapes: dict[type, str] = {}


def shape_of(cls: type) -> str:
    """A fingerprint of the code that decides what an aggregate of ``cls`` holds: the source of the module defining
    it and of every module of ours its names come from (its events, typed state, rules, contracts). Any edit there
    makes earlier snapshots unusable, so a snapshot is only ever read by the code that wrote it."""
    shape = _shapes.get(cls)
    if shape is None:
        home = sys.modules[cls.__module__]
        modules = {home.__name__: home}
        for value in vars(home).values():
            name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
            if isinstance(name, str) and name.split(".")[0] == "autarch" and name in sys.modules:
                modules[name] = sys.modules[name]
        digest = hashlib.sha256(cls.__qualname__.encode())
        for name in sorted(modules):
            digest.update(name.encode())
            try:
                digest.update(inspect.getsource(modules[name]).encode())
            except (OSError, TypeError):
                digest.update(b"?")  # no source to read (a frozen module): its name alone
        shape = _shapes[cls] = digest.hexdigest()[:32]
    return shape


# --- the snapshot event and store --------------------------------------------------------------------------------


class Snapshot(EsSnapshot):
    """eventsourcing's snapshot event, its state written as tagged JSON under the shape it was taken with."""

    @classmethod
    def take(cls, aggregate: Any) -> Snapshot:
        return cls(originator_id=aggregate.id, originator_version=aggregate.version,
                   timestamp=cls.create_timestamp(), topic=get_topic(type(aggregate)),
                   state={"shape": shape_of(type(aggregate)), "state": encode_state(aggregate)})

    def mutate(self, _: Any) -> Any:
        """The aggregate as it was at the snapshot; ``ValueError`` when today's class has another shape."""
        cls = resolve_topic(self.topic)
        if self.state.get("shape") != shape_of(cls):
            raise ValueError(f"a snapshot of an earlier {cls.__qualname__} (another shape)")
        aggregate = object.__new__(cls)
        aggregate.__dict__.update(decode_state(self.state["state"]))
        aggregate.__dict__.update(_id=self.originator_id, _version=self.originator_version, _pending_events=[])
        return aggregate


class Snapshots:
    """The snapshot store of one application, and rebuilding aggregates from it.

    Args:
        app: the application whose events the snapshots summarise.
        every: events between two snapshots of an aggregate (0: none are taken, and none are read).
    """

    def __init__(self, app: Application[UUID], every: int = DEFAULT_EVERY) -> None:
        if every < 0:
            raise ValueError(f"snapshot interval must be 0 (no snapshots) or more, got {every}")
        self.app = app
        self.every = every
        # The table eventsourcing's own snapshotting uses, made by the store's factory (not even made with none).
        self.store: EventStore[UUID] | None = (
            EventStore(mapper=app.mapper, recorder=app.factory.aggregate_recorder(purpose="snapshots"))
            if every else None)
        self._unsnapshottable: set[type] = set()
        self._failed: dict[UUID, int] = {}
        """Aggregate → the version its last snapshot failed to be written at: rebuilds try again only ``every``
        events later, not on every read of a store that refuses them."""

    def load(self, kind: type[A], aggregate_id: UUID, *, version: int | None = None) -> A:
        """The aggregate of ``kind`` as recorded (up to ``version``): its last usable snapshot and the events after
        it, else a full replay; ``AggregateNotFoundError`` when there is none. Takes a snapshot when the rebuild
        replayed an :meth:`interval` of events or more past the last one."""
        if self.store is None:
            return load_as(self.app, kind, aggregate_id, version=version)
        check_kind(self.app, kind, aggregate_id)  # another kind's snapshot is not even read
        start = self._latest(kind, aggregate_id, version)
        aggregate: A | None = None
        since = 0  # the version the replay started from
        if start is not None:
            since = start.version
            try:
                aggregate = load_as(self.app, kind, aggregate_id, version=version, start=start)
            except Exception as exc:
                log.warning("%s %s: its events do not apply to its snapshot (%s); replaying them all",
                            kind.__name__, aggregate_id, exc)
        if aggregate is None:
            since = 0
            aggregate = load_as(self.app, kind, aggregate_id, version=version)
        last = max(since, self._failed.get(aggregate_id, 0))
        if version is None and aggregate.version - last >= self.interval(aggregate.version):
            self.take(aggregate)
        return aggregate

    def _latest(self, kind: type[A], aggregate_id: UUID, version: int | None) -> A | None:
        """The aggregate at its latest usable snapshot (at or before ``version``), or None."""
        assert self.store is not None
        try:
            found = list(self.store.get(aggregate_id, lte=version, desc=True, limit=1))
        except Exception as exc:
            log.warning("%s %s: snapshots unreadable (%s); replaying its events", kind.__name__, aggregate_id, exc)
            return None
        if not found:
            return None
        try:
            aggregate = found[0].mutate(None)  # type: ignore[attr-defined]  # the snapshot store holds Snapshots
        except Exception as exc:
            log.info("%s %s: snapshot at version %d not used (%s); replaying its events", kind.__name__,
                     aggregate_id, found[0].originator_version, exc)
            return None
        return aggregate if isinstance(aggregate, kind) else None

    def interval(self, version: int) -> int:
        """Events between two snapshots of an aggregate at ``version``: ``every``, or for a long-lived aggregate the
        largest power of two up to an eighth of its events. A snapshot's size grows with the aggregate, so spacing
        them in proportion keeps what writing them costs each event the same (a loop session of a thousand
        iterations is snapshotted every 512 events, not every 100 of its 22 MB of state), while a rebuild still
        replays at most an eighth of what the snapshot holds."""
        return max(self.every, 1 << max(0, (version // 8).bit_length() - 1))

    def due(self, aggregate: Aggregate, saved: int) -> bool:
        """Whether a save of ``saved`` events that brought ``aggregate`` to its version crossed a multiple of its
        :meth:`interval` (so snapshots are spaced without any record of when the last one was taken)."""
        if not self.every or type(aggregate) in self._unsnapshottable:
            return False
        step = self.interval(aggregate.version)
        return aggregate.version // step != (aggregate.version - saved) // step

    def take(self, aggregate: Aggregate) -> bool:
        """Write a snapshot of ``aggregate`` (of its recorded state: none when it holds unsaved events); whether one
        was written.

        Best effort: a failure is logged and the events remain the truth (the next rebuild replays more of them).
        """
        version = aggregate.version
        if self.store is None:
            return False
        if aggregate.pending_events:
            log.warning("%s %s: no snapshot of unsaved events", type(aggregate).__name__, aggregate.id)
            return False
        try:
            snapshot = Snapshot.take(aggregate)
        except Exception as exc:  # Unsnapshottable, or any other surprise of a class's state: never snapshotted
            self._unsnapshottable.add(type(aggregate))
            log.warning("%s is not snapshotted: %s", type(aggregate).__name__, exc)
            return False
        if aggregate.version != version or aggregate.pending_events:
            # Changed while it was being written down (every change records an event, which moves the version):
            # this snapshot may mix two states, so it is not kept.
            log.warning("%s %s changed while its snapshot was taken; none kept", type(aggregate).__name__,
                        aggregate.id)
            return False
        try:
            self.store.put([snapshot])
        except IntegrityError:
            return False  # another writer of the store took the same one
        except Exception as exc:
            log.warning("%s %s: snapshot at version %d not written (%s)", type(aggregate).__name__, aggregate.id,
                        aggregate.version, exc)
            if len(self._failed) >= 4096:
                self._failed.clear()  # bounded: forgetting only means one more attempt
            self._failed[aggregate.id] = aggregate.version
            return False
        self._failed.pop(aggregate.id, None)
        self._prune(aggregate.id, aggregate.version)
        return True

    def _prune(self, aggregate_id: UUID, version: int) -> None:
        """Drop the aggregate's snapshots older than ``version`` (only the latest is ever read); best effort."""
        assert self.store is not None
        recorder = self.store.recorder
        table = getattr(recorder, "events_table_name", None)
        datastore = getattr(recorder, "datastore", None)
        try:
            if type(datastore).__module__ == "eventsourcing.sqlite":
                # Ignored below: getattr gives the recorder's datastore; the module check above fixes its type
                with datastore.transaction(commit=True) as c:  # type: ignore[union-attr]
                    c.execute(f"DELETE FROM {table} WHERE originator_id=? AND originator_version<?",
                              [aggregate_id.hex, version])
            elif type(datastore).__module__ == "eventsourcing.postgres":
                from psycopg.sql import SQL, Identifier

                statement = SQL("DELETE FROM {schema}.{table} WHERE originator_id = %s AND originator_version < %s")
                # Ignored below: getattr gives the recorder's datastore; the module check above fixes its type
                with datastore.transaction(commit=True) as c:  # type: ignore[union-attr]
                    schema = datastore.schema  # type: ignore[union-attr]  # a PostgresDatastore here
                    c.execute(statement.format(schema=Identifier(str(schema)), table=Identifier(str(table))),
                              [aggregate_id, version])
        except Exception as exc:
            log.info("%s: older snapshots not dropped (%s)", aggregate_id, exc)
