"""Commands, queries and replies of the orchestrator's workflow endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from .base import Command, Query, Reply

__all__ = [
    "CreateWorkflow",
    "GetWorkflow",
    "ListWorkflows",
    "ReplayWorkflow",
    "ReplayedWorkflow",
    "WorkflowList",
    "WorkflowView",
]

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
Title = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Request = Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
BranchName = Annotated[str, msgspec.Meta(min_length=1, max_length=250)]
WorkflowId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]


class CreateWorkflow(Command, kw_only=True):
    """Start a workflow. Idempotent on ``workflow_id``: the same create twice records one workflow."""

    workflow_id: WorkflowId
    """Chosen by the caller (a UUID) so that a retried create cannot record a second workflow."""
    title: Title
    request: Request
    repo: NonEmpty
    """Absolute path of the local git repository the workflow changes."""
    base_branch: BranchName = "main"


class GetWorkflow(Query, kw_only=True):
    workflow_id: WorkflowId


class ListWorkflows(Query, kw_only=True):
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0


class ReplayWorkflow(Query, kw_only=True):
    """Rebuild a workflow from its recorded events alone, optionally only its first ``at`` events."""

    workflow_id: WorkflowId
    at: Annotated[int, msgspec.Meta(ge=1)] | None = None


class WorkflowView(Reply, kw_only=True):
    """A workflow's current state as clients see it."""

    id: str
    title: str
    request: str
    repo: str
    base_branch: str
    stage: str
    """``scoping`` → ``research`` → ``planning`` → ``execution`` → ``review`` → ``done``."""
    awaiting_approval: bool
    created_at: datetime
    updated_at: datetime
    version: int
    """Number of events recorded for this workflow."""
    last_error: str | None = None


class WorkflowList(Reply, kw_only=True):
    items: list[WorkflowView]
    total: int


class ReplayedWorkflow(Reply, kw_only=True):
    workflow: WorkflowView
    events_applied: int
    events_total: int
