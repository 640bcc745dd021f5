"""Which handler runs each tool. Names, descriptions and role tables live in the contracts."""

from __future__ import annotations

from autarch.contracts.tool_catalog import TOOL_ARGUMENTS

from . import commands, coordination, forwarded, reading, web, writing
from .context import Handler

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {
    "semantic_search": forwarded.semantic_search,
    "read_file": reading.read_file,
    "list_directory": reading.list_directory,
    "glob_search": reading.glob_search,
    "grep": reading.grep,
    "take_note": forwarded.take_note,
    "search_history": forwarded.search_history,
    "web_code_search": web.web_code_search,
    "write_file": writing.write_file,
    "edit_file": writing.edit_file,
    "multi_edit": writing.multi_edit,
    "shell": commands.shell,
    "record_baseline": forwarded.record_baseline,
    "get_diff": forwarded.get_diff,
    "get_scope_card": forwarded.get_scope_card,
    "add_line_comment": forwarded.add_line_comment,
    "add_file_comment": forwarded.add_file_comment,
    "add_review_comment": forwarded.add_review_comment,
    "complete_review": forwarded.complete_review,
    "send_message": forwarded.send_message,
    "reply_message": forwarded.reply_message,
    "fetch_inbox": forwarded.fetch_inbox,
    "fetch_topic": forwarded.fetch_topic,
    "request_scope": coordination.request_scope,
    "file_reservation_paths": coordination.file_reservation_paths,
    "release_file_reservations": coordination.release_file_reservations,
    "robot_priority": coordination.robot_priority,
}

assert HANDLERS.keys() == TOOL_ARGUMENTS.keys(), "every tool of the catalog needs a handler"
