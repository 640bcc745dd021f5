"""What a change looks like: the workflow branch's diff and each pulse's diff, over HTTP.

The git service computes and stores diffs (``workflow_diff``, ``pulse_diff``) and serves them in pages
(``get_diff_artifact``); the orchestrator knows which workflows and pulses exist and the diff artifact of
each checkpointed pulse. A diff is read in pages of at most ``limit`` characters from ``offset``
(``next_offset`` names the next page, ``null`` on the last), so a large diff never exceeds a NATS message.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Response, get
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, QueryParameter

from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.contracts.git import DiffArtifact, DiffArtifactRef, GetDiffArtifact, PulseDiff, WorkflowDiff
from autarch.contracts.workflows import GetArtifacts, GetWorkflow, WorkflowArtifacts, WorkflowView
from autarch.runtime.errors import RemoteError

from .errors import error_response
from .orchestrator_client import ask_service
from .params import error_responses
from .workflow_routes import lifecycle, not_found, workflow_id_of

__all__ = ["DIFF_ROUTES", "NO_BRANCH", "NO_DIFF"]

NO_BRANCH = "no_branch"
"""404: the workflow has no branch yet (execution has not started), or its branch was deleted."""
NO_DIFF = "no_diff"
"""404: the pulse has not ended, or ended without a commit (nothing changed)."""

_RESPONSES = {
    **error_responses(400),
    404: ResponseSpec(ErrorReply, generate_examples=False,
                      description="Unknown or malformed workflow or pulse id (`not_found`); no branch yet "
                                  "(`no_branch`); a pulse without a commit (`no_diff`)"),
}

Offset = Annotated[int, QueryParameter(ge=0, description="Character offset of the page (0: the start)")]
Limit = Annotated[int, QueryParameter(ge=1, le=1_000_000, description="Characters in the page at most")]


def _missing(code: str, message: str, **details: str) -> Response[ErrorReply]:
    return error_response(ErrorReply(code=code, message=message, details=details), 404)


async def _page(state: State, artifact_id: str, offset: int, limit: int) -> DiffArtifact:
    query = GetDiffArtifact(artifact_id=artifact_id, offset=offset, limit=limit)
    return await ask_service(state, "git", "get_diff_artifact", query, DiffArtifact, idempotent=True)


async def _diff_ref(state: State, verb: str, query: WorkflowDiff | PulseDiff) -> DiffArtifactRef:
    # Computing a diff only stores it (under an id derived from its commits): safe to retry.
    return await ask_service(state, "git", verb, query, DiffArtifactRef, idempotent=True)


@get("/api/workflows/{workflow_id:str}/diff", summary="The workflow branch's diff against its base",
     tags=["workflows"], responses=_RESPONSES)
async def workflow_diff(
    workflow_id: FromPath[str], state: State, offset: Offset = 0, limit: Limit = 250_000
) -> DiffArtifact | Response[ErrorReply]:
    """What the workflow's branch changes, as a pull request would show it: git's unified diff of the branch
    against its base branch from their merge base. ``{"ref": {"artifact_id", "from_commit", "to_commit",
    "files_changed", "insertions", "deletions", "size", ...}, "diff": "diff --git ...", "offset",
    "next_offset"}``; large diffs come in pages (``next_offset``). 404 ``no_branch`` until execution has made the
    branch (or once it was deleted)."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    view = await lifecycle(state, "get_workflow", GetWorkflow(workflow_id=wf), WorkflowView, idempotent=True)
    if not isinstance(view, WorkflowView):
        return view
    if view.branch is None:
        return _missing(NO_BRANCH, f"workflow {wf} has no branch yet (stage {view.stage}): execution makes it",
                        workflow_id=wf)
    try:
        ref = await _diff_ref(state, "workflow_diff", WorkflowDiff(run_id=wf))
    except RemoteError as exc:
        # not_found: git has no branch record; conflict: the branch was deleted (an abandoned workflow).
        if exc.code in (ErrorCode.NOT_FOUND, ErrorCode.CONFLICT):
            return _missing(NO_BRANCH, exc.reply.message, workflow_id=wf)
        raise
    return await _page(state, ref.artifact_id, offset, limit)


@get("/api/workflows/{workflow_id:str}/pulses/{pulse_id:str}/diff", summary="One pulse's diff",
     tags=["workflows"], responses=_RESPONSES)
async def pulse_diff(
    workflow_id: FromPath[str], pulse_id: FromPath[str], state: State, offset: Offset = 0, limit: Limit = 250_000
) -> DiffArtifact | Response[ErrorReply]:
    """What one pulse run changed: its commit against the commit it started from. ``pulse_id`` is a run id from
    the workflow's ``pulse_runs`` (``pulse-1``, a retry ``pulse-1-a2``). A succeeded pulse answers with the diff
    stored at its checkpoint (its ``diff_artifact_id``); a failed or stopped one with its recovery checkpoint's
    diff. Same body and paging as the workflow's diff. 404 ``not_found`` for a pulse the workflow does not have,
    ``no_diff`` for one still running, not started, or ended without changes."""
    wf = workflow_id_of(workflow_id)
    if wf is None:
        return not_found(workflow_id)
    cards = await lifecycle(state, "get_artifacts", GetArtifacts(workflow_id=wf), WorkflowArtifacts,
                            idempotent=True)
    if not isinstance(cards, WorkflowArtifacts):
        return cards
    run = next((r for r in cards.pulse_runs if r.id == pulse_id), None)
    if run is None:
        return _missing(ErrorCode.NOT_FOUND, f"no pulse {pulse_id} in workflow {wf}", workflow_id=wf,
                        pulse_id=pulse_id)
    artifact_id = run.diff_artifact_id
    if artifact_id is None:
        if run.checkpoint_commit is None:
            return _missing(NO_DIFF, f"pulse {pulse_id} has no commit to show ({run.status})", workflow_id=wf,
                            pulse_id=pulse_id, status=run.status)
        ref = await _diff_ref(state, "pulse_diff", PulseDiff(run_id=wf, pulse_id=run.id))
        artifact_id = ref.artifact_id
    return await _page(state, artifact_id, offset, limit)


DIFF_ROUTES = [workflow_diff, pulse_diff]
