"""A swarm's merged bead attempts live in its attempt log, not in the record every bead verb reads and rewrites:
the record stays the size of the attempts in flight however wide the epic, and every answer about an ended attempt
is what it was."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from autarch.runtime.errors import ServiceFailure
from autarch.services.git.engine import GitEngine
from autarch.services.git.swarm_records import AttemptRecord, MergeOutcome, SwarmStore, attempt_key

from .test_bead_merge import begin, commit, data, engine, merge, new_engine, open_worker, repo  # noqa: F401  # fixtures

_RECORD = "git/swarms/wf1.json"


def _land(engine: GitEngine, worktree: Path, bead: str) -> str:  # noqa: F811  # the fixture's name, as a parameter
    begin(engine, "w1", bead)
    (worktree / f"{bead}.py").write_text(f"BEAD = {bead!r}\n")
    commit(engine, "w1", bead, f"add {bead}")
    merged = merge(engine, "w1", bead)
    assert merged.status == "merged" and merged.commit is not None
    return merged.commit


def test_merged_attempts_leave_the_record_and_are_still_answered_for(engine: GitEngine, data: Path):  # noqa: F811
    worktree = open_worker(engine, "w1")
    commits = {bead: _land(engine, worktree, bead) for bead in ("b1", "b2", "b3", "b4")}
    begin(engine, "w1", "b5")

    record = msgspec.json.decode((data / _RECORD).read_bytes())
    assert list(record["attempts"]) == [attempt_key("b5", 1)]  # only the attempt in flight
    # Repeats of an ended attempt's verbs answer what they answered, from the log.
    assert merge(engine, "w1", "b2").commit == commits["b2"]
    assert commit(engine, "w1", "b3", "add b3").commit is not None
    with pytest.raises(ServiceFailure, match="was not begun"):
        merge(engine, "w1", "b9")
    # A restarted service (nothing remembered in memory) answers the same.
    restarted = new_engine(data)
    assert merge(restarted, "w1", "b1").commit == commits["b1"]


def test_an_attempt_in_both_the_log_and_the_record_is_the_records(tmp_path: Path):
    # A crash between the append and the record's replacement leaves the attempt in both; the next save appends it
    # again (a later line wins in the log) and the record's copy is the one read meanwhile.
    store = SwarmStore(tmp_path)
    record = store.load("wf1")
    done = AttemptRecord(bead_id="b1", attempt=1, worker="w1", base_commit="a" * 40, ready=True, committed=True,
                         commit="c" * 40, merged=MergeOutcome(status="merged", commit="d" * 40))
    record.attempts[attempt_key("b1", 1)] = done
    store.save(record)
    assert store.load("wf1").attempts == {}
    assert store.attempt(store.load("wf1"), attempt_key("b1", 1)) == done
    (tmp_path / "wf1.attempts").write_bytes((tmp_path / "wf1.attempts").read_bytes() + b'{"bead_id":"b1","att')
    assert store.attempt(store.load("wf1"), attempt_key("b1", 1)) == done  # a line cut short is skipped
    assert store.attempt(store.load("wf1"), attempt_key("b2", 1)) is None


def _ended(bead: str, commit: str) -> AttemptRecord:
    return AttemptRecord(bead_id=bead, attempt=1, worker="w1", base_commit="a" * 40, ready=True, committed=True,
                         commit=commit * 40, merged=MergeOutcome(status="merged", commit=commit * 40))


def _end(store: SwarmStore, attempt: AttemptRecord) -> None:
    record = store.load("wf1")
    record.attempts[attempt_key(attempt.bead_id, attempt.attempt)] = attempt
    store.save(record)


def test_the_log_is_read_where_it_grew_also_by_another_instance(tmp_path: Path):
    one, other = SwarmStore(tmp_path), SwarmStore(tmp_path)
    _end(one, _ended("b1", "1"))
    assert one.attempt(one.load("wf1"), attempt_key("b1", 1)) == _ended("b1", "1")
    _end(other, _ended("b2", "2"))  # appended by another instance of the service
    assert one.attempt(one.load("wf1"), attempt_key("b2", 1)) == _ended("b2", "2")
    assert one.attempt(one.load("wf1"), attempt_key("b1", 1)) == _ended("b1", "1")
    # A log replaced by another file (a workflow removed and one of the same id made) is read anew.
    (tmp_path / "wf1.attempts").unlink()
    _end(SwarmStore(tmp_path), _ended("b3", "3"))
    assert one.attempt(one.load("wf1"), attempt_key("b1", 1)) is None
    assert one.attempt(one.load("wf1"), attempt_key("b3", 1)) == _ended("b3", "3")


def test_an_attempt_appended_after_a_line_cut_short_is_still_found(tmp_path: Path):
    store = SwarmStore(tmp_path)
    _end(store, _ended("b1", "1"))
    log = tmp_path / "wf1.attempts"
    log.write_bytes(log.read_bytes() + b'{"bead_id":"b2","att')  # a crash mid-append: b2 is still in its record
    restarted = SwarmStore(tmp_path)
    _end(restarted, _ended("b3", "3"))
    for reader in (restarted, SwarmStore(tmp_path)):
        assert reader.attempt(reader.load("wf1"), attempt_key("b3", 1)) == _ended("b3", "3")
        assert reader.attempt(reader.load("wf1"), attempt_key("b1", 1)) == _ended("b1", "1")
        assert reader.attempt(reader.load("wf1"), attempt_key("b2", 1)) is None
