"""Rebuilding a workflow from the event store alone, with no service running (``autarch replay``)."""

from __future__ import annotations

import uuid

from eventsourcing.application import AggregateNotFoundError

from autarch.contracts.workflows import ReplayedWorkflow
from autarch.runtime.eventstore import event_store_env
from autarch.runtime.settings import CommonSettings

from .application import WorkflowApplication
from .mail.views import message_view
from .swarm.views import swarm_view
from .workflow.cards import artifacts_of
from .workflow.views import view_of

__all__ = ["replay", "replay_from_store"]


def replay(app: WorkflowApplication, workflow_id: str, *, at: int | None = None) -> ReplayedWorkflow:
    """The workflow's state after all its events, or after its first ``at`` events.

    Always read from the store (never a cache): this is the proof that the log alone suffices.
    Raises LookupError for an unknown or malformed id, ValueError for ``at`` < 1.
    """
    if at is not None and at < 1:
        raise ValueError("at counts events from 1")
    try:
        workflow_id = str(uuid.UUID(workflow_id))
    except ValueError:
        raise LookupError(f"{workflow_id!r} is not a workflow id") from None
    try:
        latest = app.get_workflow(workflow_id)
    except AggregateNotFoundError:
        raise LookupError(f"no workflow {workflow_id} in the event store") from None
    total = latest.version
    state = latest if at is None or at >= total else app.get_workflow(workflow_id, version=at)
    try:
        swarm = swarm_view(app.get_swarm(workflow_id))
    except AggregateNotFoundError:
        swarm = None
    try:
        mailbox = app.get_mailbox(workflow_id)
        mail = [message_view(m, workflow_id) for m in mailbox.messages.values()]
    except AggregateNotFoundError:
        mail = []
    return ReplayedWorkflow(workflow=view_of(state), events_applied=state.version, events_total=total,
                            artifacts=artifacts_of(state), swarm=swarm, mail=mail)


def replay_from_store(settings: CommonSettings, workflow_id: str, *, at: int | None = None) -> ReplayedWorkflow:
    """:func:`replay` on the store named by ``settings``, opened just for this (no service needed)."""
    # Every event replayed, no snapshot read or written: replay is how a workflow's record is checked.
    app = WorkflowApplication(env=event_store_env(settings, "orchestrator"), snapshot_every=0)
    try:
        return replay(app, workflow_id, at=at)
    finally:
        app.close()
