"""The pulsing agent's file tools: ``write_file``, ``edit_file`` and ``multi_edit``.

Edits need the file to have been read by the same session, and unchanged since (compared by
content hash, not by timestamps). A write or edit by the session itself counts as a read of the
result, so consecutive edits do not need a re-read in between.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from autarch.contracts.tool_args import EditFileArgs, MultiEditArgs, WriteFileArgs

from .context import ToolContext
from .edits import EditFailed, apply_edit, apply_edits
from .paths import FileMissing, NotAFile, Resolved
from .reading import blocked_response, is_blocked

__all__ = ["edit_file", "multi_edit", "write_file"]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_file(ctx: ToolContext, args: WriteFileArgs) -> Any:
    resolved = ctx.worktree.resolve(args.path)
    if is_blocked(resolved):
        return blocked_response()
    data = args.content.encode("utf-8")
    try:
        written = ctx.worktree.write_bytes(resolved, data)
    except NotAFile as exc:
        return {"success": False, "error": f"Cannot write {args.path}: {exc.args[0]} is not a regular file"}
    except OSError as exc:
        return {"success": False, "error": f"Cannot write {args.path}: {exc.strerror or exc}"}
    ctx.store.update_hash(ctx.call.session_id, ctx.worktree.root, resolved.real, _digest(data))
    return {"success": True, "path": resolved.rel, "bytes_written": written}


async def write_file(ctx: ToolContext, args: WriteFileArgs) -> Any:
    return await asyncio.to_thread(_write_file, ctx, args)


def _edit(ctx: ToolContext, path: str, change: Any) -> Any:
    """Read-before-edit check, apply ``change`` to the text, write it back atomically."""
    resolved: Resolved = ctx.worktree.resolve(path)
    if is_blocked(resolved):
        return blocked_response()
    try:
        data = ctx.worktree.read_bytes(resolved)
    except NotAFile:
        return {"error": f"Not a regular file: {path}"}
    except FileMissing:
        return {"error": f"File not found: {path}"}
    known = ctx.store.read_hash(ctx.call.session_id, ctx.worktree.root, resolved.real)
    if known is None:
        return {"error": f"File has not been read yet: {path}. Read it with read_file before editing it."}
    if known != _digest(data):
        return {
            "error": f"File has changed since it was last read: {path}. Read it again with read_file before editing it."
        }
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"error": f"File is not valid UTF-8 text and cannot be edited: {path}"}
    try:
        updated = change(text)
    except EditFailed as failed:
        return failed.response
    encoded = updated.encode("utf-8")
    if encoded != data:
        ctx.worktree.write_bytes(resolved, encoded)
        ctx.store.update_hash(ctx.call.session_id, ctx.worktree.root, resolved.real, _digest(encoded))
    return None


async def edit_file(ctx: ToolContext, args: EditFileArgs) -> Any:
    def change(text: str) -> str:
        return apply_edit(text, args.old_string, args.new_string, replace_all=args.replace_all)

    failed = await asyncio.to_thread(_edit, ctx, args.path, change)
    return failed or {"success": True}


def _require_file(ctx: ToolContext, path: str) -> Any:
    resolved = ctx.worktree.resolve(path)
    if is_blocked(resolved):
        return blocked_response()
    if ctx.worktree.kind(resolved) != "file":
        return {"error": f"File not found: {path}"}
    return None


async def multi_edit(ctx: ToolContext, args: MultiEditArgs) -> Any:
    if not args.edits:
        return await asyncio.to_thread(_require_file, ctx, args.path) or {"error": "No edits provided"}
    failed = await asyncio.to_thread(_edit, ctx, args.path, lambda text: apply_edits(text, args.edits))
    return failed or {"success": True, "edits_applied": len(args.edits)}
