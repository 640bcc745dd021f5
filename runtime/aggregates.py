"""Helpers every eventsourcing application of ours shares: fast replay and projection, listing aggregates."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar, cast
from uuid import UUID

import msgspec
from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import CanMutateAggregate, DecoratedFuncCaller, DomainEvent, OriginatorVersionError
from eventsourcing.domain import decorated_funcs as _decorated_funcs  # see load()
from eventsourcing.persistence import ApplicationRecorder, JSONTranscoder, Notification, StoredEvent, Transcoder
from eventsourcing.utils import register_topic, resolve_topic

__all__ = ["check_kind", "created_events", "created_ids", "created_kind", "load", "load_as", "project", "recorded_as",
           "state_decoder", "topic_of", "topics_of"]

A = TypeVar("A")
_Plan = tuple[Callable[..., None] | None, frozenset[str]]
_plans: dict[str, _Plan] = {}


def _plan(topic: str) -> _Plan:
    """For an event topic: the aggregate method its event replays by calling (``@event`` methods), and the
    parameters it takes; ``None`` for any other event (created events, events with their own ``apply``)."""
    plan = _plans.get(topic)
    if plan is None:
        cls = resolve_topic(topic)
        func = _decorated_funcs.get(cls)
        # Only an event whose mutate and apply are eventsourcing's own replays as a plain method call.
        plain = func is not None and cls.apply is DecoratedFuncCaller.apply and cls.mutate is CanMutateAggregate.mutate
        names = frozenset(inspect.signature(func).parameters) if func is not None else frozenset()
        plan = _plans[topic] = (func if plain else None, names)
    return plan


def load(app: Application[Any], aggregate_id: UUID, *, version: int | None = None, start: Any = None) -> Any:
    """The aggregate rebuilt from its events (up to ``version``): what ``app.repository.get`` returns.

    ``start``: the aggregate as it was at some version (a snapshot's), which only the events after it are applied to
    (it is changed in place and returned).

    A replay through the repository makes an event object per stored event and calls its ``mutate``, which
    calls ``apply``, which filters the event's attributes and calls the ``@event`` method: most of the time of
    replaying a long history goes to those layers. Here, after the created event, an ``@event`` method's
    event is replayed by calling the method on the decoded state directly, with the same checks (the next
    version in sequence) and the same effects (``version`` and ``modified_on`` set). Any other event goes the
    repository's way. eventsourcing's ``decorated_funcs`` (event class → method) is not public:
    tests/architecture/test_private_names.py says so when it moves.
    """
    mapper = app.mapper
    if mapper.cipher is not None or mapper.compressor is not None:
        return app.repository.get(aggregate_id, version=version, projector_func=project)
    after = start.version if start is not None else None
    # runtime/sqlite_store.py's recorder reads plain rows; any other (PostgreSQL's) gives StoredEvents.
    select_rows = getattr(app.recorder, "select_event_rows", None)
    if select_rows is not None:
        originator_id, rows = select_rows(aggregate_id, gt=after, lte=version)
    else:
        stored_events = app.recorder.select_events(aggregate_id, gt=after, lte=version)
        originator_id = stored_events[0].originator_id if stored_events else aggregate_id
        rows = [(e.originator_version, e.topic, e.state) for e in stored_events]
    decode = state_decoder(mapper.transcoder)
    aggregate: Any = start
    for originator_version, topic, state_bytes in rows:
        func, names = _plan(topic)
        if func is None or aggregate is None:
            stored = StoredEvent(originator_id=originator_id, originator_version=originator_version, topic=topic,
                                 state=state_bytes)
            aggregate = cast("CanMutateAggregate[Any]", mapper.to_domain_event(stored)).mutate(aggregate)
            continue
        if originator_version != aggregate.version + 1:
            raise OriginatorVersionError(originator_version, aggregate.version + 1)
        state = decode(state_bytes)
        func(aggregate, **{k: v for k, v in state.items() if k in names})
        aggregate.version = originator_version
        aggregate.modified_on = state["timestamp"]
    if aggregate is None:
        raise AggregateNotFoundError(f"Aggregate {aggregate_id!r} version {version!r} not found.")
    return aggregate


_KINDS: dict[str, type | None] = {}


def created_kind(app: Application[Any], aggregate_id: UUID) -> type | None:
    """The class of the aggregate ``aggregate_id`` names, read from its first event's topic alone (one indexed row,
    nothing decoded); None when there is no such aggregate, or its created event is not a class of its own
    aggregate class (``Aggregate.Created`` style: then only a rebuild tells)."""
    stored = app.recorder.select_events(aggregate_id, lte=1, limit=1)
    if not stored:
        return None
    topic = stored[0].topic
    if topic not in _KINDS:
        event_class = resolve_topic(topic)
        owner: Any = sys.modules[event_class.__module__]
        for name in event_class.__qualname__.split(".")[:-1]:
            owner = getattr(owner, name, None)
        _KINDS[topic] = owner if inspect.isclass(owner) else None
    return _KINDS[topic]


def check_kind(app: Application[Any], kind: type, aggregate_id: UUID) -> None:
    """Raise ``AggregateNotFoundError`` when ``aggregate_id`` names an aggregate of another kind than ``kind``, before
    anything is replayed: a driver asking every turn's id of its own book (a workflow's driver is handed the turns of
    loop sessions too) must not rebuild a loop session of a thousand iterations to learn it is not a workflow."""
    found = created_kind(app, aggregate_id)
    if found is not None and not issubclass(found, kind):
        raise AggregateNotFoundError(f"Aggregate {aggregate_id!r} is a {found.__name__}, not a {kind.__name__}.")


def load_as(app: Application[Any], kind: type[A], aggregate_id: UUID, *, version: int | None = None,
            start: A | None = None) -> A:
    """:func:`load`, for an aggregate of ``kind``: an id of another kind (one store holds several) is not found."""
    if start is None:
        check_kind(app, kind, aggregate_id)
    aggregate = load(app, aggregate_id, version=version, start=start)
    if not isinstance(aggregate, kind):
        raise AggregateNotFoundError(f"Aggregate {aggregate_id!r} is not a {kind.__name__}.")
    return aggregate


class _Unregistered(Exception):
    """A ``_type_`` no transcoding is registered for: the transcoder reports it in its own words."""


def state_decoder(transcoder: Transcoder) -> Callable[[bytes], Any]:
    """``transcoder.decode``, or for eventsourcing's own JSON transcoder an equal one in three quarters of the time:
    msgspec parses, then each ``{"_type_": name, "_data_": data}`` object becomes what the registered
    transcoding makes of it, innermost first, as the json module's object hook does. What msgspec refuses
    and the json module reads (``NaN``, ``Infinity``, lone surrogates, numbers past a double) is read by the
    transcoder itself."""
    if type(transcoder) is not JSONTranscoder:
        return transcoder.decode
    names = transcoder.names
    parse = msgspec.json.Decoder().decode

    def revive(value: Any) -> Any:
        if type(value) is dict:
            for key, item in value.items():
                if type(item) is dict or type(item) is list:
                    value[key] = revive(item)
            if len(value) == 2 and "_type_" in value and "_data_" in value:
                transcoding = names.get(value["_type_"])
                if transcoding is None:
                    raise _Unregistered
                return transcoding.decode(value["_data_"])
        elif type(value) is list:
            for index, item in enumerate(value):
                if type(item) is dict or type(item) is list:
                    value[index] = revive(item)
        return value

    def decode(data: bytes) -> Any:
        try:
            return revive(parse(data))
        except (msgspec.DecodeError, _Unregistered):
            return transcoder.decode(data)  # the transcoder's own result, or its own error

    return decode


def project(aggregate: Any, events: Iterable[Any]) -> Any:
    """Apply ``events`` in order; pass as ``projector_func`` to ``repository.get``.

    eventsourcing's default projector asserts isinstance() against a runtime-checkable Protocol for every
    event, which on Python 3.11 costs more than decoding and applying the event together.
    """
    for domain_event in events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


def topic_of(event_class: type[DomainEvent]) -> str:
    """The topic eventsourcing stores for ``event_class`` (``module:QualName``)."""
    return f"{event_class.__module__}:{event_class.__qualname__}"


_EARLIER: dict[str, tuple[str, ...]] = {}
"""Module → the modules its aggregates lived in before, whose names stored events still carry in their topics."""


def recorded_as(module: str, *earlier: str) -> None:
    """Let events recorded while the aggregates of ``module`` lived in the ``earlier`` modules resolve to them.

    A stored event names its class by module (its topic, ``module:QualName``): events already in users' stores
    keep the old module's name for good, and new ones are stored under the new one. Call at the end of the
    module that holds the aggregates now.
    """
    for name in earlier:
        register_topic(name, sys.modules[module])
    _EARLIER[module] = (*_EARLIER.get(module, ()), *earlier)


def topics_of(event_class: type[DomainEvent]) -> list[str]:
    """Every topic events of ``event_class`` are stored under: today's, then those of the modules it moved from."""
    return [topic_of(event_class),
            *(f"{name}:{event_class.__qualname__}" for name in _EARLIER.get(event_class.__module__, ()))]


def created_ids(recorder: ApplicationRecorder, created_topics: Sequence[str], *, page: int = 1000) -> Iterator[str]:
    """Ids of every aggregate whose creation event has one of ``created_topics``, in creation order."""
    select_ids = getattr(recorder, "select_created_ids", None)
    if select_ids is not None:  # runtime/sqlite_store.py's: the ids alone, from its index of first events
        yield from select_ids(list(created_topics))
        return
    for notification in created_events(recorder, created_topics, page=page):
        yield str(notification.originator_id)


def created_events(recorder: ApplicationRecorder, created_topics: Sequence[str], *,
                   page: int = 1000) -> Iterator[Notification]:
    """The creation event of every aggregate whose creation event has one of ``created_topics``, in creation
    order (one read of the notification log, no aggregate rebuilt)."""
    start = 1
    # runtime/sqlite_store.py's recorder reads them through an index of first events; any other reads the log.
    select_created = getattr(recorder, "select_created", None)
    while True:
        batch = (select_created(list(created_topics), start=start, limit=page) if select_created is not None
                 else recorder.select_notifications(start=start, limit=page, topics=list(created_topics)))
        yield from batch
        if len(batch) < page:
            return
        start = batch[-1].id + 1
