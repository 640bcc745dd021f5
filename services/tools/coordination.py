"""A swarm worker's own coordination verbs beside mail (seed 002): reserving and releasing files, the ranked
ready work (``bv --robot-priority``), and asking for more files than its bead has.

The worker is the session's registered name (``ToolCall.lease_holder``) and the epic its workflow: the model
names neither, so it can only ever act as itself, on its own epic. Reservations go into the epic's lease table,
the one the coordinator leases bead files in, with origin ``worker``: they keep others off the files (a shared
one beside other shared ones, for readers), but never widen the bead (see ``lease_guard``).
"""

from __future__ import annotations

from typing import Any

from autarch.contracts import beads
from autarch.contracts.beads import LeaseView
from autarch.contracts.errors import ErrorCode
from autarch.contracts.tool_args import (
    FileReservationPathsArgs,
    ReleaseFileReservationsArgs,
    RequestScopeArgs,
    RobotPriorityArgs,
)
from autarch.runtime.errors import RemoteError
from autarch.runtime.leases import LeaseRefusal, describe_lease, normalize_pattern

from .context import ToolContext
from .forwarded import _mail_scope

__all__ = ["NOT_A_WORKER", "file_reservation_paths", "release_file_reservations", "request_scope", "robot_priority"]

NOT_A_WORKER = ("Only swarm workers have a bead: this session has no epic and no registered agent name, so there "
                "is no bead scope to widen")


def _worker(ctx: ToolContext) -> tuple[str, str] | None:
    epic, holder = ctx.call.run_id, ctx.call.lease_holder
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


# --- reservations --------------------------------------------------------------------------------------------


def _as_yourself(ctx: ToolContext, project_key: str | None, agent_name: str | None) -> tuple[str, str] | str:
    """(epic, the caller's registered name), or the error text."""
    scope = _mail_scope(ctx, project_key)
    if isinstance(scope, str):
        return scope.replace("Coordination mail is only available", "File reservations are only available")
    epic, holder = scope
    if agent_name is not None and agent_name.strip() and agent_name.strip() != holder:
        return f"You can only reserve as yourself: your agent mail name is {holder!r}, not {agent_name!r}"
    return epic, holder


def _patterns(paths: list[str]) -> list[str] | str:
    out: list[str] = []
    for path in paths:
        try:
            out.append(normalize_pattern(path))
        except ValueError as exc:
            return f"Invalid path {path!r}: {exc}. Nothing was reserved."
    return out


def _reservation(lease: LeaseView) -> dict[str, Any]:
    return {"path_pattern": lease.pattern, "exclusive": lease.mode == "exclusive", "holder": lease.holder,
            "bead_id": lease.bead_id, "origin": lease.origin,
            "expires_ts": lease.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ") if lease.expires_at else None}


async def file_reservation_paths(ctx: ToolContext, args: FileReservationPathsArgs) -> Any:
    found = _as_yourself(ctx, args.project_key, args.agent_name)
    if isinstance(found, str):
        return {"success": False, "error": found}
    epic, holder = found
    patterns = _patterns(args.paths)
    if isinstance(patterns, str):
        return {"success": False, "error": patterns}
    if ctx.leases is None:
        return {"success": False, "error": "File reservations cannot be made: this tools service has no lease table "
                                           "(it is not connected to NATS). Nothing was reserved."}
    try:
        outcome = await ctx.leases.acquire(epic, holder, patterns, mode="exclusive" if args.exclusive else "shared",
                                           ttl=args.ttl_seconds, origin="worker")
    except Exception as exc:
        return {"success": False, "error": f"File reservations cannot be made now ({exc}). Nothing was reserved."}
    if isinstance(outcome, LeaseRefusal):
        held = "; ".join(describe_lease(lease) for lease in outcome.conflicts)
        return {"success": False, "granted": [], "conflicts": [_reservation(c) for c in outcome.conflicts],
                "error": f"Nothing was reserved: {', '.join(patterns)} overlap(s) {held}. Report the conflict to the "
                         "coordinator, or wait for the release."}
    return {"success": True, "granted": [_reservation(lease) for lease in outcome.leases], "conflicts": [],
            "reason": args.reason}


async def release_file_reservations(ctx: ToolContext, args: ReleaseFileReservationsArgs) -> Any:
    found = _as_yourself(ctx, args.project_key, args.agent_name)
    if isinstance(found, str):
        return {"success": False, "error": found}
    epic, holder = found
    patterns = _patterns(args.paths) if args.paths else None
    if isinstance(patterns, str):
        return {"success": False, "error": patterns.replace("Nothing was reserved", "Nothing was released")}
    if ctx.leases is None:
        return {"success": False, "error": "File reservations cannot be released: this tools service has no lease "
                                           "table (it is not connected to NATS)."}
    try:
        released = await ctx.leases.release(epic, holder, patterns, origin="worker")
        kept = [lease for lease in await ctx.leases.leases(epic) if lease.holder == holder
                and lease.origin == "coordinator" and (patterns is None or lease.pattern in patterns)]
    except Exception as exc:
        return {"success": False, "error": f"File reservations cannot be released now ({exc})."}
    result: dict[str, Any] = {"success": True, "released": [lease.pattern for lease in released]}
    if kept:
        result["kept"] = [lease.pattern for lease in kept]
        result["message"] = ("Your bead's files stay leased until the bead lands: the coordinator releases them "
                             "before your completion report.")
    return result


# --- ranked ready work -----------------------------------------------------------------------------------------


async def robot_priority(ctx: ToolContext, args: RobotPriorityArgs) -> Any:
    scope = _mail_scope(ctx, args.project_key)
    if isinstance(scope, str):
        return {"error": scope.replace("Coordination mail is only available", "The ready work is only available")}
    epic, _ = scope
    try:
        ready = await ctx.forwarder.send("orchestrator", "ready_beads", beads.ReadyBeads(epic_id=epic),
                                         beads.ReadyList)
    except RemoteError as exc:
        if exc.code == ErrorCode.NOT_FOUND or exc.code == beads.BeadErrorCode.NO_EPIC:
            return {"error": f"Your epic has no beads yet: {exc.message}"}
        return {"error": f"Could not get the ready work: {exc.message}"}
    return {"epic_id": ready.epic_id, "critical_path": ready.critical_path,
            "ready": [{"rank": i + 1, "bead_id": b.bead_id, "title": b.title, "score": round(b.score, 4),
                       "pagerank": round(b.pagerank, 4), "betweenness": round(b.betweenness, 4),
                       "blocker_ratio": round(b.blocker_ratio, 4), "staleness": round(b.staleness, 4),
                       "priority": b.priority, "on_critical_path": b.on_critical_path, "unblocks": b.unblocks}
                      for i, b in enumerate(ready.ready[:args.limit])]}
