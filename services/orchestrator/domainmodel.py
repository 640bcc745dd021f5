"""The Workflow aggregate: read this file and you know every event a workflow can record."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.domain import Aggregate, event

__all__ = ["STAGES", "Workflow"]

STAGES = ("scoping", "research", "planning", "execution", "review", "done")
"""Seed 003's stages, in order."""


class Workflow(Aggregate):
    """A user's request for a change, taken through the stages to a reviewed branch."""

    @staticmethod
    def create_id(workflow_id: str, **_: object) -> UUID:
        # The caller chooses the id (a UUID) so that a retried create is recognised, not doubled.
        return UUID(workflow_id)

    @event("Created")
    def __init__(self, *, workflow_id: str, title: str, request: str, repo: str, base_branch: str) -> None:
        self.title = title
        self.request = request
        self.repo = repo
        self.base_branch = base_branch
        self.stage = "scoping"
        self.awaiting_approval = False
        self.last_error: str | None = None
        self.error_count = 0

    @event("ErrorRecorded")
    def record_error(self, *, stage: str, message: str) -> None:
        """Something failed; the workflow stays in its stage (seed 003: workflow:error)."""
        self.last_error = message
        self.error_count += 1

    def same_request(self, *, title: str, request: str, repo: str, base_branch: str) -> bool:
        """True when a repeated create asks for exactly this workflow."""
        return (self.title, self.request, self.repo, self.base_branch) == (title, request, repo, base_branch)
