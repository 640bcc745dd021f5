"""Unified diffs between two trees in git's format, as ``git apply`` reads them.

dulwich finds the changed paths and computes the hunks; the headers are written here because
dulwich's differ from git's for mode changes (``old file mode`` instead of ``old mode``, which
``git apply`` rejects) and it does not quote unusual path names as git does.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from dulwich.diff_tree import tree_changes
from dulwich.object_store import BaseObjectStore, DiskObjectStore
from dulwich.objects import Blob
from dulwich.patch import is_binary, unified_diff_with_algorithm

from .dulwich_ids import oid
from .trees import MODE_GITLINK

__all__ = ["DiffStats", "FileDiff", "FileKey", "quote_path", "tree_diff"]

_NULL = b"0" * 40


@dataclass
class DiffStats:
    files_changed: int = 0
    insertions: int = 0
    deletions: int = 0


_ESCAPES = {0x07: b"\\a", 0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0B: b"\\v", 0x0C: b"\\f", 0x0D: b"\\r"}


def quote_path(prefix: bytes, path: bytes) -> bytes:
    """``prefix + path``, C-quoted the way git quotes names with special bytes (core.quotePath)."""
    name = prefix + path
    if not any(b < 0x20 or b >= 0x7F or b in (0x22, 0x5C) for b in name):
        return name
    out = bytearray(b'"')
    for b in name:
        if b in (0x22, 0x5C):
            out += b"\\" + bytes([b])
        elif b in _ESCAPES:
            out += _ESCAPES[b]
        elif b < 0x20 or b >= 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    out += b'"'
    return bytes(out)


def _loose_blob(objects_dir: str, hex_sha: bytes) -> bytes | None:
    """A loose blob's content read straight from its file, or None (not loose, not a blob: ask the store).

    A checkpoint writes every new blob loose, so a pulse that adds 100,000 files has its diff read 100,000 loose
    objects; dulwich's lookup first searches the packs and parses an object per call, which was most of the diff's
    time (~0.7 ms a file).
    """
    name = hex_sha.decode("ascii")
    try:
        with open(f"{objects_dir}/{name[:2]}/{name[2:]}", "rb") as handle:
            raw = zlib.decompress(handle.read())
    except (OSError, zlib.error):
        return None
    header, _, body = raw.partition(b"\0")
    kind, _, size = header.partition(b" ")
    if kind != b"blob" or not size.isdigit() or int(size) != len(body):
        return None
    return body


def _content(store: BaseObjectStore, mode: int | None, sha: bytes | None) -> bytes:
    if sha is None or mode is None:
        return b""
    if mode == MODE_GITLINK:
        return b"Subproject commit " + sha + b"\n"
    if isinstance(store, DiskObjectStore):
        data = _loose_blob(os.fspath(store.path), sha)
        if data is not None:
            return data
    blob = store[oid(sha)]
    return blob.data if isinstance(blob, Blob) else b""


FileKey = tuple[bytes, int | None, bytes | None, int | None, bytes | None]
"""One file's change: its path, old mode and blob id, new mode and blob id (its diff text follows from these)."""
FileDiff = tuple[bytes, int, int]
"""One file's rendered diff with its insertions and deletions."""


def tree_diff(
    store: BaseObjectStore, old_tree: bytes | None, new_tree: bytes | None, *,
    reuse: Mapping[FileKey, FileDiff] | None = None, keep: dict[FileKey, FileDiff] | None = None,
) -> tuple[bytes, DiffStats]:
    """The unified diff from ``old_tree`` to ``new_tree`` (hex ids; None is the empty tree).

    A change found in ``reuse`` (files an earlier diff rendered) is not rendered again; every file of this diff
    is put in ``keep``. A workflow's diff after its second pulse shares nearly every file with the first's.
    """
    out: list[bytes] = []
    stats = DiffStats()
    changes = sorted(
        tree_changes(store, None if old_tree is None else oid(old_tree), None if new_tree is None else oid(new_tree)),
        key=lambda c: (c.old.path if c.old and c.old.path else c.new and c.new.path) or b"",
    )
    for change in changes:
        old, new = change.old, change.new
        old_path = old.path if old and old.path else None
        new_path = new.path if new and new.path else None
        path = old_path or new_path
        assert path is not None
        old_mode, old_sha = (old.mode, old.sha) if old and old_path else (None, None)
        new_mode, new_sha = (new.mode, new.sha) if new and new_path else (None, None)
        key = (path, old_mode, old_sha, new_mode, new_sha)
        rendered = reuse.get(key) if reuse is not None else None
        if rendered is None:
            rendered = _file_diff(store, *key)
        if keep is not None:
            keep[key] = rendered
        text, insertions, deletions = rendered
        stats.files_changed += 1
        stats.insertions += insertions
        stats.deletions += deletions
        out.append(text)
    return b"".join(out), stats


def _file_diff(store: BaseObjectStore, path: bytes, old_mode: int | None, old_sha: bytes | None,
               new_mode: int | None, new_sha: bytes | None) -> FileDiff:
    out: list[bytes] = []
    insertions = deletions = 0
    a_name, b_name = quote_path(b"a/", path), quote_path(b"b/", path)
    out.append(b"diff --git " + a_name + b" " + b_name + b"\n")
    if old_mode is None:
        out.append(b"new file mode %o\n" % new_mode)  # type: ignore[str-format]  # an added file has one
    elif new_mode is None:
        out.append(b"deleted file mode %o\n" % old_mode)
    elif old_mode != new_mode:
        out.append(b"old mode %o\nnew mode %o\n" % (old_mode, new_mode))
    if old_sha == new_sha:
        return b"".join(out), 0, 0  # a mode change only: git writes no index line and no hunks
    index = b"index " + (old_sha or _NULL)[:7] + b".." + (new_sha or _NULL)[:7]
    if old_mode is not None and old_mode == new_mode:
        index += b" %o" % old_mode
    out.append(index + b"\n")
    old_data = _content(store, old_mode, old_sha)
    new_data = _content(store, new_mode, new_sha)
    from_name = a_name if old_mode is not None else b"/dev/null"
    to_name = b_name if new_mode is not None else b"/dev/null"
    if is_binary(old_data) or is_binary(new_data):
        out.append(b"Binary files " + from_name + b" and " + to_name + b" differ\n")
        return b"".join(out), 0, 0
    lines = list(
        unified_diff_with_algorithm(
            old_data.splitlines(keepends=True), new_data.splitlines(keepends=True), from_name, to_name
        )
    )
    if not lines:
        return b"".join(out), 0, 0
    for line in lines[2:]:  # after the ---/+++ header lines
        if line.startswith(b"+"):
            insertions += 1
        elif line.startswith(b"-"):
            deletions += 1
    # git ends a name holding a space with a tab on these two lines (for GNU patch).
    out.append(b"--- " + from_name + (b"\t" if b" " in from_name else b"") + b"\n")
    out.append(b"+++ " + to_name + (b"\t" if b" " in to_name else b"") + b"\n")
    out.extend(lines[2:])
    return b"".join(out), insertions, deletions
