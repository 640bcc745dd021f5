"""The tool registry: role tool sets as seed 004's tables say, descriptions, generated schemas."""

from __future__ import annotations

import json

import pytest

from autarch.contracts import tool_args
from autarch.contracts.tool_catalog import (
    DESCRIPTIONS,
    ROLE_TOOLS,
    ROLES,
    TOOL_ARGUMENTS,
    input_schema,
    tool_definitions,
)
from autarch.services.tools.registry import HANDLERS

BASE = ["semantic_search", "read_file", "list_directory", "glob_search", "grep", "take_note", "web_code_search"]


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("discussion", BASE),
        ("scoping", BASE),
        ("research", BASE),
        ("plan", BASE),
        ("preflight", [*BASE, "shell", "record_baseline"]),
        # A swarm worker is a pulsing session: coordination mail and the worker's own coordination verbs (seed 002)
        # come with the role.
        ("pulsing", [*BASE, "write_file", "edit_file", "multi_edit", "shell", "send_message", "reply_message",
                     "fetch_inbox", "fetch_topic", "request_scope", "file_reservation_paths",
                     "release_file_reservations", "robot_priority"]),
        (
            "review",
            [
                *BASE,
                "get_diff",
                "get_scope_card",
                "add_line_comment",
                "add_file_comment",
                "add_review_comment",
                "complete_review",
            ],
        ),
    ],
)
def test_each_role_gets_exactly_the_seed_tool_set(role, expected):
    assert [d.name for d in tool_definitions(role)] == expected


def test_role_variants_use_their_own_descriptions():
    def described(role: str, tool: str) -> str:
        return next(d.description for d in tool_definitions(role) if d.name == tool)

    assert described("pulsing", "read_file").endswith("Required before attempting to edit_file.")
    assert described("research", "read_file").endswith("File access is tracked for research provenance.")
    assert described("discussion", "read_file").endswith("Some files may be blocked due to sensitive content policies.")
    assert described("pulsing", "semantic_search").startswith("Search the worktree codebase")
    assert described("plan", "semantic_search").startswith("Search the codebase for files")
    assert "WARNING: You must NOT modify any files tracked by git." in described("preflight", "shell")
    assert "isolated git worktree. All commands run in that context." in described("pulsing", "shell")
    assert "Commands time out after 60 seconds." in described("pulsing", "shell")


def test_every_tool_has_a_handler_and_every_variant_a_description():
    assert HANDLERS.keys() == TOOL_ARGUMENTS.keys()
    for role in ROLES:
        for name, variant in ROLE_TOOLS[role]:
            assert (name, variant) in DESCRIPTIONS


@pytest.mark.parametrize("tool", sorted(TOOL_ARGUMENTS))
def test_schemas_are_inline_without_titles_and_require_reason(tool):
    schema = input_schema(TOOL_ARGUMENTS[tool])
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text and '"title"' not in text
    assert schema["type"] == "object"
    assert "reason" in schema["required"]
    assert schema["properties"]["reason"]["minLength"] == 1
    assert schema["additionalProperties"] is False


def test_schemas_follow_the_seed_parameter_tables():
    read = input_schema(tool_args.ReadFileArgs)
    assert set(read["properties"]) == {"reason", "path", "startLine", "endLine"}
    assert read["properties"]["startLine"]["description"] == "Optional start line (1-indexed, inclusive)"
    grep = input_schema(tool_args.GrepArgs)
    assert grep["properties"]["caseSensitive"]["default"] is False
    assert grep["properties"]["skip"]["default"] == 0
    shell = input_schema(tool_args.ShellArgs)
    assert shell["properties"]["timeoutSeconds"]["default"] == 60
    assert shell["properties"]["timeoutSeconds"]["description"] == "Timeout in seconds (default: 60, max: 300)"
    multi = input_schema(tool_args.MultiEditArgs)
    item = multi["properties"]["edits"]["items"]
    assert set(item["properties"]) == {"oldString", "newString", "replaceAll"}
    assert item["required"] == ["oldString", "newString"]
    listing = input_schema(tool_args.ListDirectoryArgs)
    assert listing["properties"]["type"]["enum"] == ["all", "directories", "files"]
    assert listing["properties"]["depth"]["default"] == 1
    baseline = input_schema(tool_args.RecordBaselineArgs)
    assert set(baseline["required"]) == {"reason", "issueType", "source", "pattern"}
    line = input_schema(tool_args.AddLineCommentArgs)
    assert line["properties"]["reason"]["description"] == tool_args.REVIEW_REASON_DESCRIPTION
    assert set(line["required"]) == {"reason", "file_path", "start_line", "severity", "category", "description"}
    assert input_schema(tool_args.TakeNoteArgs)["properties"]["reason"]["description"] == tool_args.REASON_DESCRIPTION


def test_unknown_role_is_refused():
    with pytest.raises(ValueError, match="unknown role"):
        tool_definitions("janitor")
