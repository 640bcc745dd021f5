"""A swarm worker's own coordination verbs beside mail (seed 002): asking for more files than its bead has.

The worker is the session's registered name (``ToolCall.lease_holder``) and the epic its workflow: the model
names neither, so it can only ever act as itself, on its own epic.
"""

from __future__ import annotations

from typing import Any

from autarch.contracts import beads
from autarch.contracts.errors import ErrorCode
from autarch.contracts.tool_args import RequestScopeArgs
from autarch.runtime.errors import RemoteError
from autarch.runtime.leases import normalize_pattern

from .context import ToolContext

__all__ = ["NOT_A_WORKER", "request_scope"]

NOT_A_WORKER = ("Only swarm workers have a bead: this session has no epic and no registered agent name, so there "
                "is no bead scope to widen")


def _worker(ctx: ToolContext) -> tuple[str, str] | None:
    epic, holder = ctx.call.workflow_id, ctx.call.lease_holder
    return (epic, holder) if epic and holder else None


async def request_scope(ctx: ToolContext, args: RequestScopeArgs) -> Any:
    found = _worker(ctx)
    if found is None:
        return {"success": False, "error": NOT_A_WORKER}
    epic, holder = found
    paths: list[str] = []
    for path in args.paths:
        try:
            paths.append(normalize_pattern(path))
        except ValueError as exc:
            return {"success": False, "error": f"Invalid path {path!r}: {exc}. Nothing was requested."}
    command = beads.RequestScope(epic_id=epic, worker=holder, request_id=ctx.idempotency_key, paths=paths,
                                 why=args.why, wait_seconds=args.wait_seconds)
    try:
        answer = await ctx.forwarder.send("orchestrator", beads.REQUEST_SCOPE_VERB, command, beads.ScopeAnswer,
                                          timeout=args.wait_seconds + ctx.forwarder.timeout)
    except RemoteError as exc:
        if exc.code in (ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT):
            return {"success": False, "error": f"Could not ask the coordinator: it did not answer ({exc.message}). "
                                               "Try again later."}
        return {"success": False, "error": f"The coordinator could not take the request: {exc.message}"}
    if not answer.granted:
        return {"success": False, "granted": False, "request_id": answer.request_id, "bead_id": answer.bead_id,
                "error": f"Refused by the coordinator: {answer.reason}", "held_by": answer.held_by,
                "bead_files": answer.files}
    return {"success": True, "granted": True, "request_id": answer.request_id, "bead_id": answer.bead_id,
            "added": answer.added, "bead_files": answer.files,
            "message": f"Granted: {', '.join(answer.added) or 'all of them were already'} in your bead's files."}
