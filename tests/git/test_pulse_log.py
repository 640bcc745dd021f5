"""A workflow's ended pulses live in its pulse log, not in the record every operation reads and rewrites: the record
stays the size of one pulse however long the loop, and every answer about an ended pulse is what it was."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from autarch.contracts.git import (
    CheckpointPulse,
    CreateWorkflowBranch,
    GetWorkflowBranch,
    RecoveryCheckpoint,
    RegisterRepository,
    RemoveWorktree,
    StartPulse,
)
from autarch.runtime.errors import ServiceFailure
from autarch.services.git.engine import GitEngine

from .gitcli import git, make_user_repo


def _engine(tmp_path: Path) -> tuple[GitEngine, Path, Path]:
    repo = make_user_repo(tmp_path / "project")
    engine = GitEngine(data_dir=tmp_path / "data")
    registered = engine.register_repository(RegisterRepository(path=str(repo)))
    view = engine.create_workflow_branch(
        CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch="autarch/wf-1"))
    return engine, repo, Path(view.worktree_path)


def _iterate(engine: GitEngine, worktree: Path, n: int) -> str:
    engine.start_pulse(StartPulse(run_id="wf1", pulse_id=f"i{n}"))
    (worktree / f"step{n}.py").write_text(f"STEP = {n}\n")
    return engine.checkpoint_pulse(CheckpointPulse(run_id="wf1", pulse_id=f"i{n}", summary=f"feat: {n}")).commit


def test_ended_pulses_leave_the_record_and_are_still_answered_for(tmp_path: Path) -> None:
    engine, _, worktree = _engine(tmp_path)
    commits = [_iterate(engine, worktree, n) for n in range(1, 6)]
    engine.start_pulse(StartPulse(run_id="wf1", pulse_id="i6"))
    engine.recovery_checkpoint(RecoveryCheckpoint(run_id="wf1", pulse_id="i6", status="failed", reason="r"))
    engine.start_pulse(StartPulse(run_id="wf1", pulse_id="i7"))

    record = msgspec.json.decode((tmp_path / "data/git/workflows/wf1.json").read_bytes())
    assert list(record["pulses"]) == ["i7"]  # only the running pulse
    view = engine.view(GetWorkflowBranch(run_id="wf1"))
    assert [(p.pulse_id, p.state) for p in view.pulses] == [
        *((f"i{n}", "succeeded") for n in range(1, 6)), ("i6", "discarded"), ("i7", "running")]
    assert [p.commit for p in view.pulses[:5]] == commits
    # A retried checkpoint of an ended pulse answers what it answered; an ended pulse's id is not started again.
    again = engine.checkpoint_pulse(CheckpointPulse(run_id="wf1", pulse_id="i3", summary="feat: 3"))
    assert again.commit == commits[2]
    with pytest.raises(ServiceFailure, match="already ended"):
        engine.start_pulse(StartPulse(run_id="wf1", pulse_id="i2"))


def test_a_record_from_before_the_log_or_a_crash_between_log_and_record_reads_the_same(tmp_path: Path) -> None:
    engine, repo, worktree = _engine(tmp_path)
    commits = [_iterate(engine, worktree, n) for n in range(1, 4)]
    records = tmp_path / "data/git/workflows"
    # A record written before pulse logs (every pulse in it), beside a log that already holds one of them (a crash
    # after the append, before the record was replaced).
    full = {f"i{n}": {"id": f"i{n}", "branch": f"autarch/wf-1.pulse-i{n}", "base_commit": "0" * 40,
                      "state": "succeeded", "commit": commits[n - 1], "files_changed": 1, "paths": [f"step{n}.py"]}
            for n in range(1, 4)}
    record = msgspec.json.decode((records / "wf1.json").read_bytes())
    record["pulses"] = full
    (records / "wf1.json").write_bytes(msgspec.json.encode(record))
    (records / "wf1.pulses").write_bytes(msgspec.json.encode(full["i1"]) + b"\n" + b'{"id":"i2","bra')  # cut short
    restarted = GitEngine(data_dir=tmp_path / "data")
    listed = restarted.view(GetWorkflowBranch(run_id="wf1")).pulses
    assert [(p.pulse_id, p.commit) for p in listed] == [(f"i{n}", commits[n - 1]) for n in range(1, 4)]
    _iterate(restarted, worktree, 4)  # the next save moves them out of the record
    assert list(msgspec.json.decode((records / "wf1.json").read_bytes())["pulses"]) == []
    listed = restarted.view(GetWorkflowBranch(run_id="wf1")).pulses
    assert [p.pulse_id for p in listed] == ["i1", "i2", "i3", "i4"]
    removed = restarted.remove_worktree(RemoveWorktree(run_id="wf1", delete_branches=True))
    assert removed.removed and "autarch/wf-1" in removed.deleted_branches
    assert "autarch/wf-1" not in git(repo, "branch", "--list", "autarch/*")
