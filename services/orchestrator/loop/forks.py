"""Forking a loop session after one of its iterations (issue 36): the history up to it, then a branch of its own.

The fork's store holds copies of the original's events up to the one that ended iteration K, then its own
``Forked`` event with the branch the git service cut from the commit the original's branch had after iteration
K (the last recorded iteration commit up to K, never the live branch). The fork then runs iteration K+1 as any
session would: its anchor is the chained one, iteration K's ``<anchor_hint>``. The original is only read.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError

from autarch.contracts.loops import ForkLoop, LoopErrorCode
from autarch.runtime.errors import ServiceFailure

from ..application import WorkflowApplication
from ..history import copied_history
from .model import LoopSession

__all__ = ["LoopForkPoint", "forked_history", "loop_fork_point"]


class LoopForkPoint:
    """The original's events up to the end of iteration K: how many, and the commit its branch had then."""

    def __init__(self, *, version: int, start_commit: str, base_commit: str, project_path: str,
                 base_branch: str, script: str | None) -> None:
        self.version = version
        self.start_commit = start_commit
        self.base_commit = base_commit
        self.project_path = project_path
        self.base_branch = base_branch
        self.script = script


def loop_fork_point(app: WorkflowApplication, command: ForkLoop) -> LoopForkPoint:
    """Find where iteration ``command.at_iteration`` of the original ended (blocking); the typed errors of a fork
    that cannot be made."""
    try:
        latest = app.get_loop(command.forked_from)
    except AggregateNotFoundError:
        raise ServiceFailure.not_found(f"no loop session {command.forked_from}",
                                       session_id=command.forked_from) from None
    k = command.at_iteration
    ended = latest.iterations_ended
    if k > ended or k >= latest.max_iterations:
        why = (f"iteration {k} has not ended ({ended} ended)" if k > ended
               else f"iteration {k} is the session's last allowed one (max {latest.max_iterations}): nothing is "
                    "left to run")
        raise ServiceFailure(LoopErrorCode.ITERATION_OUT_OF_RANGE, f"cannot fork at iteration {k}: {why}",
                             {"at_iteration": k, "iterations_ended": ended})
    assert latest.branch is not None, "a session with ended iterations has its branch"
    version, commit = _version_ending(app, command.forked_from, k)
    return LoopForkPoint(version=version, start_commit=commit or latest.branch.base_commit,
                         base_commit=latest.branch.base_commit, project_path=latest.project_path,
                         base_branch=latest.base_branch, script=latest.script)


def _version_ending(app: WorkflowApplication, session_id: str, number: int) -> tuple[int, str | None]:
    """The version of the event that ended iteration ``number`` (found by its topic, then its number), and the last
    commit an iteration up to it recorded (read from the same events: the state holds only the latest iterations)."""
    commit = None
    for stored in app.recorder.select_events(UUID(session_id)):
        if stored.topic.endswith(".IterationEnded"):
            event: Any = app.mapper.to_domain_event(stored)
            if event.number <= number and event.commit_hash is not None:
                commit = event.commit_hash
            if event.number == number:
                return int(stored.originator_version), commit
    raise AssertionError(f"iteration {number} of {session_id} is over but no event ended it")


def forked_history(app: WorkflowApplication, original_id: str, fork_id: str, version: int) -> LoopSession:
    """The fork with copies of the original's first ``version`` events as its pending events (blocking)."""
    fork = copied_history(app, original_id, fork_id, version)
    assert isinstance(fork, LoopSession) and fork.version == version
    return fork
