"""Forking a workflow: a new workflow whose history is the first N events of another, carried on live (issue 36).

The fork's store holds copies of the original's first N events under the fork's id (so replaying the fork shows
everything the original did up to there), then its own ``Forked`` event. That event settles what the copied
history leaves in flight: the original's agent sessions and worktree are never the fork's, so a step whose
agent was still working starts over with a session of the fork's own, a pulse that was running starts again,
and a session whose step was over counts as closed (the original closes its own). When the original had a
branch by event N, the fork's branch is cut from the commit that branch had then, read from the recorded pulse
commits (never from the live branch, which may have moved since), in a worktree of its own. The original is
only read.
"""

from __future__ import annotations

from dataclasses import dataclass

from eventsourcing.application import AggregateNotFoundError

from autarch.contracts.workflows import ForkWorkflow, WorkflowErrorCode
from autarch.runtime.errors import ServiceFailure

from ..application import WorkflowApplication
from ..history import copied_history
from .model import Workflow
from .steps import step_over

__all__ = ["ForkPoint", "branch_commit_at", "fork_point", "forked_history", "record_fork"]


@dataclass(frozen=True)
class ForkPoint:
    """The original as of event N, and the commit its branch had then (None: no branch yet)."""

    original: Workflow
    total: int
    """How many events the original has recorded (the fork's ``at`` is at most this)."""
    start_commit: str | None


def branch_commit_at(wf: Workflow) -> str | None:
    """The commit the workflow branch had in ``wf``'s state: its last recorded pulse commit on the branch (a
    succeeded run's checkpoint; a recovery checkpoint is kept on the pulse's own branch), else the commit it was
    cut at; None before execution made it."""
    if wf.execution is None:
        return None
    commits = [r.checkpoint_commit for r in wf.runs
               if r.status == "succeeded" and r.checkpoint_commit and not r.is_recovery_checkpoint]
    return commits[-1] if commits else wf.execution.base_commit


def fork_point(app: WorkflowApplication, command: ForkWorkflow) -> ForkPoint:
    """Read the original as of ``command.at`` (blocking); the typed errors of a fork that cannot be made."""
    try:
        latest = app.get_workflow(command.forked_from)
    except AggregateNotFoundError:
        raise ServiceFailure.not_found(f"no workflow {command.forked_from}",
                                       workflow_id=command.forked_from) from None
    total = latest.version
    if command.at > total:
        raise ServiceFailure(WorkflowErrorCode.EVENT_OUT_OF_RANGE,
                             f"workflow {command.forked_from} has {total} events; fork at 1 … {total}",
                             {"at": command.at, "events_total": total})
    original = latest if command.at == total else app.get_workflow(command.forked_from, version=command.at)
    if original.execution_mode == "swarm" and original.stage in ("execution", "review", "done"):
        raise ServiceFailure(WorkflowErrorCode.FORK_UNSUPPORTED,
                             "a bead plan's swarm execution cannot be forked (its workers' state is not the "
                             "workflow's); fork at or before its plan approval", {"at": command.at})
    return ForkPoint(original=original, total=total, start_commit=branch_commit_at(original))


def forked_history(app: WorkflowApplication, original_id: str, fork_id: str, at: int) -> Workflow:
    """The fork with copies of the original's first ``at`` events as its pending events (blocking)."""
    fork = copied_history(app, original_id, fork_id, at)
    assert isinstance(fork, Workflow) and fork.version == at
    return fork


def record_fork(fork: Workflow, command: ForkWorkflow, start_commit: str | None) -> None:
    """Record the fork's ``Forked`` event on its copied history: what it drops, closes and starts from."""
    running = [r.id for r in fork.runs if r.status == "running"]
    closed, dropped = [], []
    for step, session in fork.sessions.items():
        if session.closed:
            continue
        if (step.startswith("pulse:") and step.split(":", 1)[1] in running) or not step_over(fork, step):
            dropped.append(step)
        else:
            closed.append(step)
    fork._forked(forked_from=command.forked_from, at=command.at,
                 branch=command.branch or f"autarch/{command.workflow_id[:8]}",
                 script=command.script if command.script is not None else fork.script,
                 closed_steps=closed, dropped_steps=dropped, dropped_runs=running,
                 start_commit=start_commit,
                 base_commit=fork.execution.base_commit if fork.execution is not None else None)
