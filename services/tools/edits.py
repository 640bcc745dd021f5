"""Exact string replacement, as ``edit_file`` and ``multi_edit`` apply it (seed 004, seed 000).

Pure functions over text: no fuzzy matching, no partial application. Each returns the new text
or raises :class:`EditFailed` carrying the seed's error shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autarch.contracts.tool_args import EditOperation

__all__ = ["PREVIEW_CHARS", "EditFailed", "apply_edit", "apply_edits"]

PREVIEW_CHARS = 100
"""Length of ``oldString_preview`` in multi_edit errors."""


class EditFailed(Exception):
    """An edit cannot be applied; ``response`` is the seed's error object."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(response["error"])
        self.response = response


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "..."


def apply_edit(content: str, old: str, new: str, *, replace_all: bool = False) -> str:
    """``edit_file``: replace the single occurrence of ``old`` (or all of them with ``replace_all``)."""
    if not old:
        raise EditFailed({"error": "oldString is empty"})
    count = content.count(old)
    if count == 0:
        raise EditFailed({"error": "oldString not found"})
    if count > 1 and not replace_all:
        raise EditFailed({"error": "oldString found multiple times"})
    return content.replace(old, new) if replace_all else content.replace(old, new, 1)


def apply_edits(content: str, edits: Sequence[EditOperation]) -> str:
    """``multi_edit``: apply ``edits`` in order, each on the previous one's result; all or nothing."""
    if not edits:
        raise EditFailed({"error": "No edits provided"})
    for index, edit in enumerate(edits):
        old = edit.old_string
        if not old:
            raise EditFailed({"error": f"Edit {index}: oldString is empty", "edit_index": index})
        count = content.count(old)
        if count == 0:
            raise EditFailed(
                {
                    "error": f"Edit {index}: oldString not found",
                    "edit_index": index,
                    "oldString_preview": _preview(old),
                }
            )
        if count > 1 and not edit.replace_all:
            raise EditFailed(
                {
                    "error": f"Edit {index}: oldString found {count} times (set replaceAll=true to replace all)",
                    "edit_index": index,
                    "found_count": count,
                    "oldString_preview": _preview(old),
                }
            )
        content = content.replace(old, edit.new_string, -1 if edit.replace_all else 1)
    return content
