"""read_file, list_directory and glob_search against real directories."""

from __future__ import annotations

import json
import os

import pytest

from autarch.contracts.tool_catalog import SUCCESS_SHAPED_TOOLS, TOOL_ARGUMENTS, role_for_tool
from autarch.contracts.tools import ToolCall
from autarch.services.tools.reading import INLINE_READ_BYTES
from autarch.services.tools.sensitivity import SENSITIVE_PATH_REASON


def write(root, rel, text="x\n"):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return path


async def test_read_file_numbers_lines_and_honours_the_range(tools, worktree):
    write(worktree, "src/a.py", "one\ntwo\nthree\nfour\n")
    whole = await tools("read_file", {"path": "src/a.py"})
    assert whole == "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour"
    assert (
        await tools("read_file", {"path": "./src//a.py", "startLine": 2, "endLine": 3}) == "     2\ttwo\n     3\tthree"
    )
    assert await tools("read_file", {"path": "src/a.py", "startLine": 4}) == "     4\tfour"
    assert await tools("read_file", {"path": "src/a.py", "endLine": 1}) == "     1\tone"


async def test_small_files_read_inline_and_large_ones_in_a_thread_read_the_same(tools, worktree):
    line = "x" * 99 + "\n"
    for name, count in (("small.txt", 10), ("large.txt", INLINE_READ_BYTES // len(line) + 50)):
        write(worktree, name, line * count)
        text = await tools("read_file", {"path": name, "startLine": count})
        assert text == f"{count:>6}\t{'x' * 99}", name
    os.mkfifo(worktree / "pipe")  # size 0, so "small": must still be refused, never waited on
    assert await tools("read_file", {"path": "pipe"}) == {"error": "Not a regular file: pipe"}
    # The size hint looks outside the worktree only by stat; the read itself is confined as always.
    (worktree.parent / "outside.txt").write_text("secret\n")
    outside = await tools("read_file", {"path": "../outside.txt"})
    assert isinstance(outside, dict) and "secret" not in str(outside), outside


async def test_read_file_errors(tools, worktree):
    write(worktree, "a.txt", "a\n")
    assert await tools("read_file", {"path": "missing.txt"}) == {"error": "File not found: missing.txt"}
    assert (await tools("read_file", {"path": "a.txt", "startLine": 9}))["error"].startswith("startLine 9 is beyond")
    assert "endLine" in (await tools("read_file", {"path": "a.txt", "startLine": 2, "endLine": 1}))["error"]
    write(worktree, "blob.bin", b"\x00\x01\x02binary")
    assert await tools("read_file", {"path": "blob.bin"}) == {"error": "File appears to be binary: blob.bin"}
    (worktree / "dir").mkdir()
    assert await tools("read_file", {"path": "dir"}) == {"error": "Not a regular file: dir"}
    result = await tools.result("read_file", {"path": "missing.txt"})
    assert result.is_error and result.is_json


async def test_read_file_blocks_sensitive_paths_even_behind_a_symlink(tools, worktree):
    write(worktree, ".env", "TOKEN=abcdef123456\n")
    write(worktree, "keys/deploy.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    os.symlink(".env", worktree / "innocent.txt")
    for path in (".env", "keys/deploy.pem", "innocent.txt", ".git/config"):
        assert await tools("read_file", {"path": path}) == {"blocked": True, "reason": SENSITIVE_PATH_REASON}


async def test_arguments_are_validated_and_reason_is_required(tools, worktree):
    write(worktree, "a.txt")
    result = await tools.result("read_file", {"path": "a.txt", "reason": ""})
    assert result.is_error and "reason" in result.content
    missing = await tools.executor.call(
        ToolCall(
            session_id="s",
            tool_call_id="c",
            role="pulsing",
            root=str(worktree),
            tool="read_file",
            arguments={"path": "a.txt"},
        )
    )
    assert missing.is_error and "Object missing required field `reason`" in missing.content
    assert "unknown field `start_line`" in (await tools("read_file", {"path": "a.txt", "start_line": 1}))["error"]
    assert await tools("write_file", {"path": "a.txt", "content": "y"}, role="review") == {
        "success": False,
        "error": "Tool 'write_file' is not available to the review agent",
    }
    assert await tools("launch_rockets") == {"error": "Unknown tool 'launch_rockets'"}


async def test_list_directory_depth_type_and_ignore_rules(tools, worktree):
    write(worktree, "src/app/main.py")
    write(worktree, "src/util.py")
    write(worktree, "README.md")
    write(worktree, "build/out.o")
    write(worktree, "notes/private.md")
    write(worktree, "src/app/gen.tmp")
    write(worktree, ".gitignore", "build/\n*.tmp\n")
    write(worktree, ".autarchignore", "notes/\n")
    (worktree / ".git").mkdir()
    top = await tools("list_directory", {})
    assert [e["path"] for e in top] == [".autarchignore", ".gitignore", "README.md", "src"]
    assert {"path": "src", "is_directory": True, "depth": 1} in top
    deep = await tools("list_directory", {"path": "src", "depth": None})
    assert deep == [
        {"path": "src/app", "is_directory": True, "depth": 1},
        {"path": "src/app/main.py", "is_directory": False, "depth": 2},
        {"path": "src/util.py", "is_directory": False, "depth": 1},
    ]
    two = await tools("list_directory", {"path": ".", "depth": 2, "type": "directories"})
    assert [e["path"] for e in two] == ["src", "src/app"]
    files = await tools("list_directory", {"path": "", "depth": 2, "type": "files"})
    assert "src/util.py" in [e["path"] for e in files] and all(not e["is_directory"] for e in files)


async def test_list_directory_errors(tools, worktree):
    write(worktree, "a.txt")
    assert await tools("list_directory", {"path": "nope"}) == {"error": "Directory not found: nope"}
    assert await tools("list_directory", {"path": "a.txt"}) == {"error": "Directory not found: a.txt"}


async def test_nested_gitignore_negation(tools, worktree):
    write(worktree, ".gitignore", "*.log\n")
    write(worktree, "logs/.gitignore", "!keep.log\n")
    write(worktree, "logs/keep.log")
    write(worktree, "logs/drop.log")
    write(worktree, "top.log")
    assert await tools("glob_search", {"pattern": "**/*.log"}) == ["logs/keep.log"]


async def test_ignore_files_follow_git(tools, worktree):
    # No brace expansion in git: "{a,b}.txt" ignores only the file of that name.
    write(worktree, ".gitignore", "{a,b}.txt\nout/**\n!out/keep\n")
    for rel in ("a.txt", "b.txt", "{a,b}.txt", "out/drop", "out/keep"):
        write(worktree, rel)
    assert await tools("glob_search", {"pattern": "**/*"}) == [".gitignore", "a.txt", "b.txt", "out/keep"]


async def test_glob_search(tools, worktree):
    for rel in ("src/a.ts", "src/deep/b.ts", "src/deep/c.py", "test_x.py", "src/test_y.py", ".github/ci.yml"):
        write(worktree, rel)
    assert await tools("glob_search", {"pattern": "**/*.ts"}) == ["src/a.ts", "src/deep/b.ts"]
    assert await tools("glob_search", {"pattern": "src/**/*.ts"}) == ["src/a.ts", "src/deep/b.ts"]
    assert await tools("glob_search", {"pattern": "*.py"}) == ["test_x.py"]
    assert await tools("glob_search", {"pattern": "**/test_*.py"}) == ["src/test_y.py", "test_x.py"]
    assert await tools("glob_search", {"pattern": "src/**/*.{ts,py}"}) == [
        "src/a.ts",
        "src/deep/b.ts",
        "src/deep/c.py",
        "src/test_y.py",
    ]
    assert await tools("glob_search", {"pattern": ".github/*.yml"}) == [".github/ci.yml"]
    assert await tools("glob_search", {"pattern": "nothing/**"}) == []


@pytest.mark.parametrize("tool", sorted(TOOL_ARGUMENTS))
async def test_reason_is_required_by_every_tool(executor, worktree, tool):
    role = role_for_tool(tool)
    for arguments in ({}, {"reason": ""}):
        result = await executor.call(
            ToolCall(
                session_id="s",
                tool_call_id=f"c-{len(arguments)}",
                role=role,
                root=str(worktree),
                tool=tool,
                arguments=arguments,
            )
        )
        assert result.is_error and "reason" in result.content
        value = json.loads(result.content)
        assert value["error"].startswith(f"Invalid arguments for {tool}: ")
        assert ("success" in value) == (tool in SUCCESS_SHAPED_TOOLS)
