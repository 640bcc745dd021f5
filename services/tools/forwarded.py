"""Tools whose effect belongs to another service: validated here as seed 004 says, then forwarded.

Notes, baselines, the scope card and the review card go to the orchestrator, the workflow diff
to the git service, semantic search to the indexer. The owner's ``not_found`` becomes the seed's
"… not found" error; a missing owner (``unavailable``/``timeout``) becomes an error the model can
read and act on.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Literal

from autarch.contracts import git, indexer, mail
from autarch.contracts import orchestrator_tools as fx
from autarch.contracts.errors import ErrorCode
from autarch.contracts.tool_args import (
    AddFileCommentArgs,
    AddLineCommentArgs,
    AddReviewCommentArgs,
    CompleteReviewArgs,
    FetchInboxArgs,
    FetchTopicArgs,
    GetDiffArgs,
    GetScopeCardArgs,
    RecordBaselineArgs,
    ReplyMessageArgs,
    SearchHistoryArgs,
    SemanticSearchArgs,
    SendMessageArgs,
    TakeNoteArgs,
)
from autarch.runtime.errors import RemoteError

from .context import ToolContext
from .sensitivity import BLOCKED, is_sensitive_path

__all__ = [
    "add_file_comment",
    "add_line_comment",
    "add_review_comment",
    "complete_review",
    "fetch_inbox",
    "fetch_topic",
    "get_diff",
    "get_scope_card",
    "record_baseline",
    "reply_message",
    "search_history",
    "semantic_search",
    "send_message",
    "take_note",
]

NOT_INDEXED = indexer.NOT_INDEXED_MESSAGE
REVIEW_CARD_NOT_FOUND = "Review card not found"
_NOT_INDEXED_CODES = frozenset(
    {
        indexer.IndexerErrorCode.NOT_INDEXED,
        indexer.IndexerErrorCode.UNKNOWN_PROJECT,
        indexer.IndexerErrorCode.NOT_A_REPOSITORY,
        ErrorCode.NOT_FOUND,
        ErrorCode.UNAVAILABLE,
    }
)
_Severity = Literal["High", "Medium", "Low"]
_CommentKind = Literal["line", "file", "review"]
_Recommendation = Literal["approve", "reject", "manual_review"]
# The tools accept any case; each table maps the lower-cased word to the contract's spelling.
_SEVERITIES: dict[str, _Severity] = {"high": "High", "medium": "Medium", "low": "Low"}
_RECOMMENDATIONS: dict[str, _Recommendation] = {r: r for r in ("approve", "reject", "manual_review")}
_ISSUE_TYPES: dict[str, Literal["Error", "Warning"]] = {"error": "Error", "warning": "Warning"}
_SOURCES: dict[str, Literal["Build", "Lint", "Test"]] = {"build": "Build", "lint": "Lint", "test": "Test"}


def _unreachable(what: str, exc: RemoteError) -> str:
    if exc.code in (ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT):
        return f"Could not {what}: the service that stores it did not answer ({exc.message}). Try again later."
    return f"Could not {what}: {exc.message}"


async def take_note(ctx: ToolContext, args: TakeNoteArgs) -> Any:
    if not ctx.call.run_id:
        return {"success": False, "error": "Notes are only available in workflow channels"}
    if not args.note.strip():
        return {"success": False, "error": "Note content cannot be empty"}
    command = fx.TakeNote(
        run_id=ctx.call.run_id,
        session_id=ctx.call.session_id,
        idempotency_key=ctx.idempotency_key,
        note=args.note,
    )
    try:
        await ctx.forwarder.send("orchestrator", fx.TAKE_NOTE_VERB, command, fx.NoteTaken)
    except RemoteError as exc:
        return {"success": False, "error": _unreachable("store the note", exc)}
    return {"success": True}


async def search_history(ctx: ToolContext, args: SearchHistoryArgs) -> Any:
    if not ctx.call.run_id:
        return {"error": "History search is only available in loop sessions"}
    query = fx.SearchHistory(session_id=ctx.call.run_id, query=args.query, limit=args.limit)
    try:
        hits = await ctx.forwarder.send("orchestrator", fx.SEARCH_HISTORY_VERB, query, fx.HistoryHits)
    except RemoteError as exc:
        return {"error": _unreachable("search the recorded turns", exc)}
    return {"results": [{"turnId": h.turn_id, "iteration": h.iteration, "relevance": round(h.score, 3),
                         "excerpt": h.excerpt} for h in hits.items]}


def _preview(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


async def record_baseline(ctx: ToolContext, args: RecordBaselineArgs) -> Any:
    issue_type = _ISSUE_TYPES.get(args.issue_type.strip().lower())
    if issue_type is None:
        return {"success": False, "error": f"Invalid issueType '{args.issue_type}'. Must be 'Error' or 'Warning'."}
    source = _SOURCES.get(args.source.strip().lower())
    if source is None:
        return {"success": False, "error": f"Invalid source '{args.source}'. Must be 'Build', 'Lint', or 'Test'."}
    if not ctx.call.run_id:
        return {"success": False, "error": "Baselines can only be recorded during a workflow's preflight"}
    command = fx.RecordBaseline(
        workflow_id=ctx.call.run_id,
        session_id=ctx.call.session_id,
        idempotency_key=ctx.idempotency_key,
        issue_type=issue_type,
        source=source,
        pattern=args.pattern,
        file_path=args.file_path,
        description=args.description,
    )
    try:
        reply = await ctx.forwarder.send("orchestrator", fx.RECORD_BASELINE_VERB, command, fx.BaselineRecorded)
    except RemoteError as exc:
        return {"success": False, "error": _unreachable("record the baseline", exc)}
    return {
        "success": True,
        "baselineId": reply.baseline_id,
        "message": f"Recorded {issue_type} baseline from {source}: {_preview(args.pattern)}",
    }


def _severity(value: str) -> _Severity | None:
    return _SEVERITIES.get(value.strip().lower())


def _invalid_severity(value: str) -> dict[str, Any]:
    return {"success": False, "error": f"Invalid severity '{value}'. Must be High, Medium, or Low."}


async def _add_comment(
    ctx: ToolContext, kind: _CommentKind, severity: _Severity, args: Any, **where: Any
) -> dict[str, Any]:
    if not ctx.call.run_id:
        return {"success": False, "error": REVIEW_CARD_NOT_FOUND}
    command = fx.AddReviewComment(
        workflow_id=ctx.call.run_id,
        session_id=ctx.call.session_id,
        idempotency_key=ctx.idempotency_key,
        kind=kind,
        severity=severity,
        category=args.category,
        description=args.description,
        **where,
    )
    try:
        reply = await ctx.forwarder.send("orchestrator", fx.ADD_REVIEW_COMMENT_VERB, command, fx.ReviewCommentAdded)
    except RemoteError as exc:
        if exc.code == ErrorCode.NOT_FOUND:
            return {"success": False, "error": REVIEW_CARD_NOT_FOUND}
        return {"success": False, "error": _unreachable("add the comment", exc)}
    label = {"line": "Line", "file": "File", "review": "Review"}[kind]
    return {"success": True, "comment_id": reply.comment_id, "message": f"{label} comment added successfully"}


async def add_line_comment(ctx: ToolContext, args: AddLineCommentArgs) -> Any:
    severity = _severity(args.severity)
    if severity is None:
        return _invalid_severity(args.severity)
    if not args.file_path.strip():
        return {"success": False, "error": "file_path is required for line comments"}
    if args.start_line < 1:
        return {"success": False, "error": "start_line must be a positive integer"}
    if args.end_line is not None and args.end_line < args.start_line:
        return {"success": False, "error": "end_line must be greater than or equal to start_line"}
    return await _add_comment(
        ctx, "line", severity, args, file_path=args.file_path, start_line=args.start_line, end_line=args.end_line
    )


async def add_file_comment(ctx: ToolContext, args: AddFileCommentArgs) -> Any:
    severity = _severity(args.severity)
    if severity is None:
        return _invalid_severity(args.severity)
    if not args.file_path.strip():
        return {"success": False, "error": "file_path is required for file comments"}
    return await _add_comment(ctx, "file", severity, args, file_path=args.file_path)


async def add_review_comment(ctx: ToolContext, args: AddReviewCommentArgs) -> Any:
    severity = _severity(args.severity)
    if severity is None:
        return _invalid_severity(args.severity)
    return await _add_comment(ctx, "review", severity, args)


async def complete_review(ctx: ToolContext, args: CompleteReviewArgs) -> Any:
    recommendation = _RECOMMENDATIONS.get(args.recommendation.strip().lower())
    if recommendation is None:
        return {
            "success": False,
            "error": f"Invalid recommendation '{args.recommendation}'. Must be one of: approve, reject, manual_review.",
        }
    if not args.summary.strip():
        return {"success": False, "error": "Summary is required."}
    if not ctx.call.run_id:
        return {"success": False, "error": REVIEW_CARD_NOT_FOUND}
    command = fx.CompleteReview(
        workflow_id=ctx.call.run_id,
        session_id=ctx.call.session_id,
        idempotency_key=ctx.idempotency_key,
        recommendation=recommendation,
        summary=args.summary,
    )
    try:
        await ctx.forwarder.send("orchestrator", fx.COMPLETE_REVIEW_VERB, command, fx.ReviewCompleted)
    except RemoteError as exc:
        if exc.code == ErrorCode.NOT_FOUND:
            return {"success": False, "error": REVIEW_CARD_NOT_FOUND}
        return {"success": False, "error": _unreachable("complete the review", exc)}
    return {"success": True, "recommendation": recommendation, "message": "Review completed successfully"}


_DIFF_HEADER = re.compile(r"^diff --git a/(.*?) b/(.*)$")


def gate_diff(ctx: ToolContext, diff: str) -> str:
    """The diff with sensitive files' hunks withheld and secrets in the rest redacted."""
    out: list[str] = []
    withholding = False
    for line in diff.split("\n"):
        header = _DIFF_HEADER.match(line)
        if header:
            withholding = is_sensitive_path(header.group(1)) or is_sensitive_path(header.group(2))
            out.append(line)
            if withholding:
                out.append(f"{BLOCKED} (changes to a sensitive file are not shown)")
            continue
        if not withholding:
            out.append(line)
    return ctx.redactor.redact("\n".join(out))


async def _fetch_diff(ctx: ToolContext, run_id: str) -> str:
    ref = await ctx.forwarder.send(
        "git", "workflow_diff", git.WorkflowDiff(run_id=run_id), git.DiffArtifactRef
    )
    pages: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = await ctx.forwarder.send(
            "git",
            "get_diff_artifact",
            git.GetDiffArtifact(artifact_id=ref.artifact_id, offset=offset),
            git.DiffArtifact,
        )
        pages.append(page.diff)
        offset = page.next_offset
    return "".join(pages)


async def get_diff(ctx: ToolContext, args: GetDiffArgs) -> Any:
    if not ctx.call.run_id:
        return {"error": "Diff artifact not found"}
    try:
        diff = await _fetch_diff(ctx, ctx.call.run_id)
    except RemoteError as exc:
        if exc.code == ErrorCode.NOT_FOUND:
            return {"error": "Diff artifact not found"}
        return {"success": False, "error": _unreachable("get the diff", exc)}
    return {"success": True, "diff": gate_diff(ctx, diff)}


async def get_scope_card(ctx: ToolContext, args: GetScopeCardArgs) -> Any:
    if not ctx.call.run_id:
        return {"error": "Scope card not found"}
    try:
        card = await ctx.forwarder.send(
            "orchestrator", fx.GET_SCOPE_CARD_VERB, fx.GetScopeCard(workflow_id=ctx.call.run_id), fx.ScopeCard
        )
    except RemoteError as exc:
        if exc.code == ErrorCode.NOT_FOUND:
            return {"error": "Scope card not found"}
        return {"success": False, "error": _unreachable("get the scope card", exc)}
    return {
        "success": True,
        "title": card.title,
        "description": card.description,
        "in_scope": card.in_scope,
        "out_of_scope": card.out_of_scope,
        "constraints": card.constraints,
    }


async def semantic_search(ctx: ToolContext, args: SemanticSearchArgs) -> Any:
    query = indexer.SemanticSearch(
        query=args.query,
        root=ctx.worktree.root,
        pattern_weights=args.pattern_weights or None,
        max_results=args.max_results,
    )
    try:
        reply = await ctx.forwarder.send("indexer", "semantic_search", query, indexer.SearchResults)
    except RemoteError as exc:
        # No indexer running yet is, for the model, the same as no index yet.
        if exc.code in _NOT_INDEXED_CODES:
            return {"error": NOT_INDEXED}
        if exc.code == indexer.IndexerErrorCode.INVALID_PATTERN_WEIGHTS:
            return {"error": exc.message}
        return {"error": f"Semantic search failed: {exc.message}"}
    return [
        {
            "file_path": hit.file_path,
            "start_line": hit.start_line,
            "end_line": hit.end_line,
            "snippet": ctx.redactor.redact(hit.snippet),
            "score": hit.score,
            "adjusted_score": hit.adjusted_score,
        }
        for hit in reply.results[: args.max_results]
        if not is_sensitive_path(hit.file_path)
    ]


# --- coordination mail (seed 002) -----------------------------------------------------------------------------

_NOT_A_WORKER = ("Coordination mail is only available to swarm workers: this session has no epic and no "
                 "registered agent mail name")


def _mail_scope(ctx: ToolContext, project_key: str | None) -> tuple[str, str] | str:
    """(epic, the caller's registered name), or the error text: the epic is always the session's own."""
    epic, holder = ctx.call.run_id, ctx.call.lease_holder
    if not epic or not holder:
        return _NOT_A_WORKER
    key = (project_key or "").strip().removeprefix("epic-")
    try:
        named = str(uuid.UUID(key)) if key else None
    except ValueError:
        named = None  # a project root path (the seed's "<project-root-path>"): the session's own project
    if named is not None and named != str(uuid.UUID(epic)):
        return f"project_key {project_key!r} names another epic; you can only use your own epic ({epic})"
    return epic, holder


def _message(m: mail.MailMessage) -> dict[str, Any]:
    return {"message_id": m.message_id, "thread_id": m.thread_id, "topic": m.topic, "from": m.sender, "to": m.to,
            "subject": m.subject, "body_md": m.body_md, "reply_to": m.reply_to, "created_at": m.created_at.isoformat()}


def _not_yours(given: str | None, holder: str) -> str | None:
    if given is not None and given.strip() and given.strip() != holder:
        return f"You can only send as yourself: your agent mail name is {holder!r}, not {given!r}"
    return None


async def send_message(ctx: ToolContext, args: SendMessageArgs) -> Any:
    scope = _mail_scope(ctx, args.project_key)
    if isinstance(scope, str):
        return {"success": False, "error": scope}
    epic, holder = scope
    if (refused := _not_yours(args.sender_name, holder)) is not None:
        return {"success": False, "error": refused}
    command = mail.SendMail(project_key=epic, sender_name=holder, to=list(args.to), thread_id=args.thread_id,
                            topic=args.topic, subject=args.subject, body_md=args.body_md,
                            idempotency_key=ctx.idempotency_key)
    try:
        sent = await ctx.forwarder.send("orchestrator", mail.SEND_MAIL_VERB, command, mail.MailMessage)
    except RemoteError as exc:
        return {"success": False, "error": _unreachable("send the message", exc)}
    return {"success": True, "message_id": sent.message_id, "thread_id": sent.thread_id, "topic": sent.topic}


async def reply_message(ctx: ToolContext, args: ReplyMessageArgs) -> Any:
    scope = _mail_scope(ctx, args.project_key)
    if isinstance(scope, str):
        return {"success": False, "error": scope}
    epic, holder = scope
    if (refused := _not_yours(args.sender_name, holder)) is not None:
        return {"success": False, "error": refused}
    command = mail.ReplyMail(project_key=epic, message_id=args.message_id, sender_name=holder, body_md=args.body_md,
                             idempotency_key=ctx.idempotency_key)
    try:
        sent = await ctx.forwarder.send("orchestrator", mail.REPLY_MAIL_VERB, command, mail.MailMessage)
    except RemoteError as exc:
        if exc.code == ErrorCode.NOT_FOUND:
            return {"success": False, "error": f"Message not found: {args.message_id}"}
        return {"success": False, "error": _unreachable("send the reply", exc)}
    return {"success": True, "message_id": sent.message_id, "thread_id": sent.thread_id, "to": sent.to}


async def fetch_inbox(ctx: ToolContext, args: FetchInboxArgs) -> Any:
    scope = _mail_scope(ctx, args.project_key)
    if isinstance(scope, str):
        return {"error": scope}
    epic, holder = scope
    if args.agent_name is not None and args.agent_name.strip() and args.agent_name.strip() != holder:
        return {"error": f"You can only read your own inbox: your agent mail name is {holder!r}"}
    query = mail.FetchInbox(project_key=epic, agent_name=holder, topic=args.topic, session_id=ctx.call.session_id)
    try:
        found = await ctx.forwarder.send("orchestrator", mail.FETCH_INBOX_VERB, query, mail.MailList)
    except RemoteError as exc:
        return {"error": _unreachable("read the inbox", exc)}
    return {"agent_name": holder, "messages": [_message(m) for m in found.messages]}


async def fetch_topic(ctx: ToolContext, args: FetchTopicArgs) -> Any:
    scope = _mail_scope(ctx, args.project_key)
    if isinstance(scope, str):
        return {"error": scope}
    epic, _ = scope
    query = mail.FetchTopic(project_key=epic, topic_name=args.topic_name)
    try:
        found = await ctx.forwarder.send("orchestrator", mail.FETCH_TOPIC_VERB, query, mail.MailList)
    except RemoteError as exc:
        return {"error": _unreachable("read the topic", exc)}
    return {"topic": args.topic_name, "messages": [_message(m) for m in found.messages]}
