"""``load`` (runtime/aggregates.py) rebuilds exactly what eventsourcing's repository rebuilds, at every version;
its ``state_decoder`` reads exactly what eventsourcing's JSON transcoder reads."""

from __future__ import annotations

import pickle
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import OriginatorVersionError
from eventsourcing.persistence import JSONTranscoder, TranscodingNotRegisteredError

from autarch.runtime.aggregates import load, project, state_decoder
from autarch.services.orchestrator.application import WorkflowApplication
from autarch.services.orchestrator.workflow.model import Workflow
from tests.orchestrator.test_swarm_model import WID, diamond
from tests.orchestrator.test_workflow_domain import PLAN, RESEARCH, SCOPE, card


def _app(tmp_path: Path) -> WorkflowApplication:
    return WorkflowApplication(env={"PERSISTENCE_MODULE": "autarch.runtime.sqlite_store",
                                    "SQLITE_DBNAME": str(tmp_path / "events.sqlite")})


def _state(aggregate: Any) -> Any:
    transient = getattr(type(aggregate), "transient_attributes", ())  # this process's bookkeeping, not state
    return _canonical({k: v for k, v in vars(aggregate).items() if k not in transient})


def _canonical(value: Any) -> Any:
    """``value`` as nested tuples of (type, content), in order: equal exactly when the two states hold the
    same types and values everywhere. (Pickles also compare which equal strings are one object, which the
    json module and msgspec decide differently and nothing reads.)"""
    kind = type(value)
    if kind is dict:
        return (kind, tuple((_canonical(k), _canonical(v)) for k, v in value.items()))
    if kind in (list, tuple):
        return (kind, tuple(_canonical(item) for item in value))
    if kind in (set, frozenset):
        return (kind, tuple(sorted((_canonical(item) for item in value), key=repr)))
    if hasattr(value, "__struct_fields__"):
        return (kind, tuple((name, _canonical(getattr(value, name))) for name in value.__struct_fields__))
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return (kind, _canonical(vars(value)))
    if kind in (str, int, float, bool, type(None)):
        return (kind, value)
    return (kind, pickle.dumps(value))


def _same_at_every_version(app: WorkflowApplication, aggregate: Any) -> None:
    for version in range(1, aggregate.version + 1):
        slow = app.repository.get(aggregate.id, version=version, projector_func=project)
        fast = load(app, aggregate.id, version=version)
        assert type(fast) is type(slow) and fast.version == slow.version == version
        assert _state(fast) == _state(slow), f"version {version} differs"


def test_a_whole_workflow_replays_the_same(tmp_path: Path) -> None:
    app = _app(tmp_path)
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo="/x", base_branch="main",
                  branch=None, script=None)
    for stage, fields in (("scoping", SCOPE), ("research", RESEARCH), ("planning", PLAN)):
        wf.submit_artifact(stage, card(stage, fields))
        if stage == "research":
            wf.request_changes("say more")
            wf.submit_artifact(stage, card(stage, fields))
        wf.approve()
    wf.record_error(stage="execution", message="a hiccup")
    wf.finish_execution()
    wf.submit_artifact("review", card("review", {"recommendation": "approve", "summary": "fine"}))
    wf.approve()
    app.save(wf)
    assert wf.version > 10
    _same_at_every_version(app, wf)


def test_a_swarm_replays_the_same(tmp_path: Path) -> None:
    app = _app(tmp_path)
    swarm = diamond()
    a = swarm.claim("a", "w-one")
    swarm.begun(a, "base0")
    swarm.leased(a, ["a.py"])
    swarm.session_opened(a, "turn-1")
    swarm.turn_handled(a, "turn-2", "tool", summary="feat(a): a", nudge=None)
    swarm.lease_conflict(swarm.claim("x", "w-two"), ["x.py"], ["someone"])
    app.save(swarm)
    assert str(swarm.id) == str(app.get_swarm(WID).id)
    _same_at_every_version(app, swarm)


def test_an_unknown_aggregate_is_not_found(tmp_path: Path) -> None:
    app = _app(tmp_path)
    with pytest.raises(AggregateNotFoundError):
        load(app, diamond().id)


def test_a_gap_in_the_versions_is_refused(tmp_path: Path) -> None:
    app = _app(tmp_path)
    swarm = diamond()
    swarm.claim("a", "w-one")
    app.save(swarm)
    with app.recorder.datastore.transaction(commit=True) as cursor:  # type: ignore[attr-defined]  # the SQLite recorder's own
        cursor.execute(f"DELETE FROM {app.recorder.events_table_name} WHERE originator_version=2")  # type: ignore[attr-defined]  # the SQLite recorder's own
    with pytest.raises(OriginatorVersionError):
        load(app, swarm.id)


def test_a_recorder_without_plain_rows_replays_the_same(tmp_path: Path) -> None:
    # PostgreSQL's recorder (eventsourcing's own) has no select_event_rows: load reads StoredEvents instead.
    app = WorkflowApplication(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                                   "SQLITE_DBNAME": str(tmp_path / "stock.sqlite")})
    assert not hasattr(app.recorder, "select_event_rows")
    swarm = diamond()
    swarm.lease_conflict(swarm.claim("x", "w-two"), ["x.py"], ["someone"])
    app.save(swarm)
    _same_at_every_version(app, swarm)


def _transcoder() -> JSONTranscoder:
    return WorkflowApplication(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper.transcoder  # type: ignore[return-value]  # the application's transcoder is a JSONTranscoder


@pytest.mark.parametrize(
    "value",
    [
        {"timestamp": datetime(2026, 11, 27, 6, 49, tzinfo=UTC), "id": uuid.UUID(int=7), "n": 10**30, "x": -0.0},
        {"nested": [{"when": datetime(2026, 1, 1, tzinfo=UTC)}, [uuid.UUID(int=1), {"a": [1.5, None, True]}]]},
        {"_type_": "not a transcoding", "_data_": 1, "third": "key"},  # three keys: a plain dict, as json reads it
        {"_type_": "only one of the two"},
        {"text": "é \u2028 \U0001f600 \\ \" \n", "empty": {}, "list": []},
    ],
)
def test_the_state_decoder_reads_what_the_transcoder_reads(value: Any) -> None:
    transcoder = _transcoder()
    data = transcoder.encode(value)
    assert _canonical(state_decoder(transcoder)(data)) == _canonical(transcoder.decode(data)) == _canonical(value)


@pytest.mark.parametrize("data", [b'{"a":NaN,"b":Infinity}', b'{"a":1e400}', b'{"a":"\\ud800"}'])
def test_what_msgspec_refuses_the_transcoder_reads(data: bytes) -> None:
    transcoder = _transcoder()
    assert repr(state_decoder(transcoder)(data)) == repr(transcoder.decode(data))


def test_an_unregistered_type_fails_as_the_transcoder_fails() -> None:
    transcoder = _transcoder()
    data = b'{"a":[{"_type_":"martian","_data_":"x"}]}'
    with pytest.raises(TranscodingNotRegisteredError) as expected:
        transcoder.decode(data)
    with pytest.raises(TranscodingNotRegisteredError) as got:
        state_decoder(transcoder)(data)
    assert str(got.value) == str(expected.value)


def test_bytes_that_are_not_json_fail_as_the_transcoder_fails() -> None:
    transcoder = _transcoder()
    for data in (b"{", b"\xff\xfe", b""):
        with pytest.raises(ValueError) as expected:
            transcoder.decode(data)
        with pytest.raises(ValueError) as got:
            state_decoder(transcoder)(data)
        assert type(got.value) is type(expected.value)


def test_another_transcoder_is_used_as_it_is() -> None:
    class Other(JSONTranscoder):
        pass

    other = Other()
    assert state_decoder(other) == other.decode
