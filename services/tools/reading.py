"""The read-only file tools: ``read_file``, ``list_directory``, ``glob_search`` and ``grep``."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from typing import Any

from autarch.contracts.tool_args import GlobSearchArgs, GrepArgs, ListDirectoryArgs, ReadFileArgs
from autarch.runtime.git_admin import own_git_dir
from autarch.runtime.globs import compile_glob
from autarch.runtime.walk import walk, walk_files

from .context import ToolContext
from .gitrecord import NoGitRecord
from .grep import GrepPattern, compile_pattern, is_binary
from .paths import FileMissing, NotAFile, PathRefused, Resolved
from .sensitivity import SENSITIVE_PATH_REASON, is_sensitive_path

__all__ = [
    "MAX_GREP_RESULTS",
    "MAX_READ_BYTES",
    "glob_search",
    "grep",
    "grep_matches",
    "list_directory",
    "read_file",
]

MAX_GREP_RESULTS = 50
"""Matches returned by one grep call; ``skip`` pages through the rest."""
MAX_READ_BYTES = 10 * 1024 * 1024
_GLOB_META = re.compile(r"[*?\[{\\]")


def blocked_response() -> dict[str, Any]:
    return {"blocked": True, "reason": SENSITIVE_PATH_REASON}


def is_blocked(resolved: Resolved) -> bool:
    """Sensitive by the name the agent used, or by the real name behind a symlink."""
    return is_sensitive_path(resolved.rel) or (bool(resolved.real) and is_sensitive_path(resolved.real))


def number_lines(lines: list[str], first: int) -> str:
    """``cat -n`` style: the line number, a tab, the line."""
    return "\n".join(f"{number:>6}\t{line}" for number, line in enumerate(lines, first))


def _read_file(ctx: ToolContext, args: ReadFileArgs) -> Any:
    resolved = ctx.worktree.resolve(args.path)
    if is_blocked(resolved):
        return blocked_response()
    try:
        data = ctx.worktree.read_bytes(resolved, limit=MAX_READ_BYTES)
    except NotAFile:
        return {"error": f"Not a regular file: {args.path}"}
    except FileMissing:
        return {"error": f"File not found: {args.path}"}
    except OverflowError as exc:
        return {"error": f"File is too large to read ({exc.args[0]} bytes; the limit is 10 MB): {args.path}"}
    if is_binary(data):
        return {"error": f"File appears to be binary: {args.path}"}
    digest = hashlib.sha256(data).hexdigest()
    # Redact the whole text first: a private key block spans lines. Redaction keeps line breaks.
    text = ctx.redactor.redact(data.decode("utf-8", "replace"))
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    first = args.start_line or 1
    last = args.end_line if args.end_line is not None else max(len(lines), first)
    if last < first:
        return {"error": f"endLine ({last}) must be greater than or equal to startLine ({first})"}
    if lines and first > len(lines):
        return {"error": f"startLine {first} is beyond the end of the file ({len(lines)} lines): {args.path}"}
    ctx.store.record_read(
        ctx.call.session_id,
        ctx.worktree.root,
        resolved.real,
        digest,
        start_line=args.start_line,
        end_line=args.end_line,
    )
    return number_lines(lines[first - 1 : last], first)


INLINE_READ_BYTES = 64 * 1024
"""Files up to this size are read on the event loop: reading, hashing and redacting them takes less than
handing the work to a thread and back (~0.3 ms on the 2-core machine), and every read of the agent's tool
round trip pays that hop. Larger ones go to a thread, so a big file never holds up other sessions' calls."""


async def read_file(ctx: ToolContext, args: ReadFileArgs) -> Any:
    try:
        # A size hint only: _read_file resolves and checks the path itself, whichever way it runs.
        small = os.stat(os.path.join(ctx.worktree.root, args.path)).st_size <= INLINE_READ_BYTES
    except (OSError, ValueError):
        small = False
    if small:
        return _read_file(ctx, args)
    return await asyncio.to_thread(_read_file, ctx, args)


async def common_dir(ctx: ToolContext) -> str | None:
    """The git directory whose ``info/exclude`` the walks of ``ctx``'s worktree honour, from the records.

    A linked worktree's ``.git`` file is the agent's to rewrite, so it never names it (docs/security.md): the
    git service's record does (or a repository the CLI's caller named), else the root's own ``.git`` directory;
    a root with neither is walked without an ``info/exclude``.
    """
    root = ctx.worktree.root
    if ctx.git_records is None:
        return own_git_dir(root)
    try:
        return (await ctx.git_records.lookup(root)).common_dir
    except NoGitRecord:
        return None


def _inside_target(ctx: ToolContext, rel: str) -> tuple[bool, bool] | None:
    """For a symlink: (points inside, points at a directory); None when it leads outside or nowhere."""
    try:
        resolved = ctx.worktree.resolve(rel)
    except PathRefused:
        return None
    kind = ctx.worktree.kind(resolved)
    if kind is None:
        return None
    return True, kind == "dir"


def _list_directory(ctx: ToolContext, args: ListDirectoryArgs, common: str | None) -> Any:
    resolved = ctx.worktree.resolve(args.path or ".", allow_root=True)
    if resolved.real and is_blocked(resolved):
        return blocked_response()
    if ctx.worktree.kind(resolved) != "dir":
        return {"error": f"Directory not found: {args.path}"}
    entries = []
    for entry in walk(ctx.worktree.root, resolved.real, max_depth=args.depth, include_symlinks=True,
                      common_dir=common):
        is_dir = entry.is_dir
        if entry.is_symlink:
            target = _inside_target(ctx, entry.path)
            if target is None:
                continue  # a link out of the worktree is not part of it
            is_dir = target[1]
        if (args.type == "files" and is_dir) or (args.type == "directories" and not is_dir):
            continue
        entries.append({"path": entry.path, "is_directory": is_dir, "depth": entry.depth})
    return entries


async def list_directory(ctx: ToolContext, args: ListDirectoryArgs) -> Any:
    return await asyncio.to_thread(_list_directory, ctx, args, await common_dir(ctx))


def _literal_prefix(pattern: str) -> str:
    """The leading directories of a glob that contain no wildcard (where the walk may start)."""
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    parts = pattern.lstrip("/").split("/")
    prefix = []
    for part in parts[:-1]:
        if _GLOB_META.search(part) or part in ("", ".", ".."):
            break
        prefix.append(part)
    return "/".join(prefix)


def _glob_search(ctx: ToolContext, args: GlobSearchArgs, common: str | None) -> Any:
    regex = compile_glob(args.pattern)
    start = _literal_prefix(args.pattern)
    if start:
        resolved = ctx.worktree.resolve(start)
        if ctx.worktree.kind(resolved) != "dir":
            return []
        start = resolved.real
    found = []
    for entry in walk(ctx.worktree.root, start, include_dirs=False, include_symlinks=True, common_dir=common):
        if not regex.match(entry.path):
            continue
        if entry.is_symlink:
            target = _inside_target(ctx, entry.path)
            if target is None or target[1]:
                continue
        found.append(entry.path)
    found.sort()
    return found


async def glob_search(ctx: ToolContext, args: GlobSearchArgs) -> Any:
    return await asyncio.to_thread(_glob_search, ctx, args, await common_dir(ctx))


def grep_matches(ctx: ToolContext, pattern: GrepPattern, glob: str | None = None, *,
                 common: str | None = None) -> list[tuple[str, int]]:
    """Every ``(path, line number)`` that matches, sorted: what grep pages through (``common``: the recorded
    git directory whose ``info/exclude`` applies, see :func:`common_dir`)."""
    matcher = compile_glob(glob, basename_if_no_slash=True) if glob else None
    root = ctx.worktree.root
    # A generator: the engine starts searching while the walk is still going.
    files = (
        path for path in walk_files(root, common_dir=common)
        if (matcher is None or matcher.match(path)) and not is_sensitive_path(path)
    )
    found = ctx.engine.search(root, files, pattern, literals=ctx.redactor.literals)
    return [(path, number) for path, lines in found for number in lines]


def _grep(ctx: ToolContext, args: GrepArgs, common: str | None) -> Any:
    try:
        pattern = compile_pattern(args.pattern, args.case_sensitive)
    except (re.error, ValueError, OverflowError) as exc:
        return {"warning": f"Invalid regex pattern: {exc}", "results": []}
    matches = grep_matches(ctx, pattern, args.glob, common=common)
    page = matches[args.skip : args.skip + MAX_GREP_RESULTS]
    result: dict[str, Any] = {"results": [{"file_path": path, "line_number": number} for path, number in page]}
    if len(matches) > len(page):
        result["warning"] = (
            f"Only showing {len(page)} matches out of {len(matches)}. "
            "Use skip parameter to paginate through more results."
        )
    return result


async def grep(ctx: ToolContext, args: GrepArgs) -> Any:
    return await asyncio.to_thread(_grep, ctx, args, await common_dir(ctx))
