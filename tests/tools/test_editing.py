"""write_file, edit_file, multi_edit: the seed's shapes, atomicity and read-before-edit by content hash."""

from __future__ import annotations

import os

from autarch.services.tools.sensitivity import SENSITIVE_PATH_REASON

BLOCKED = {"blocked": True, "reason": SENSITIVE_PATH_REASON}


async def read_then(tools, path):
    assert isinstance(await tools("read_file", {"path": path}), str)


async def test_write_file_creates_parents_and_reports_bytes(tools, worktree):
    result = await tools("write_file", {"path": "src/new/deep.ts", "content": "héllo\n"})
    assert result == {"success": True, "path": "src/new/deep.ts", "bytes_written": 7}
    assert (worktree / "src/new/deep.ts").read_text() == "héllo\n"
    mode_file = worktree / "run.sh"
    mode_file.write_text("old")
    mode_file.chmod(0o755)
    await tools("write_file", {"path": "run.sh", "content": "new"})
    assert mode_file.read_text() == "new" and (mode_file.stat().st_mode & 0o777) == 0o755
    assert not [p for p in worktree.rglob("*autarch-tmp*")]


async def test_write_file_errors(tools, worktree):
    (worktree / "dir").mkdir()
    failed = await tools("write_file", {"path": "dir", "content": "x"})
    assert failed["success"] is False and "dir" in failed["error"]
    (worktree / "file").write_text("x")
    failed = await tools("write_file", {"path": "file/child.txt", "content": "x"})
    assert failed["success"] is False
    assert await tools("write_file", {"path": "../escape.txt", "content": "x"}) == {
        "success": False,
        "error": "Path escapes the worktree root: ../escape.txt",
    }
    assert await tools("write_file", {"path": ".env.local", "content": "x"}) == BLOCKED
    assert not (worktree / ".env.local").exists()


async def test_edit_file_replaces_one_occurrence(tools, worktree):
    (worktree / "a.py").write_text("alpha\nbeta\r\ngamma\n")
    await read_then(tools, "a.py")
    assert await tools("edit_file", {"path": "a.py", "oldString": "beta\r\n", "newString": "BETA\n"}) == {
        "success": True
    }
    assert (worktree / "a.py").read_text() == "alpha\nBETA\ngamma\n"
    # The session's own edit counts as a read: a second edit needs no re-read.
    assert await tools("edit_file", {"path": "a.py", "oldString": "gamma", "newString": "G"}) == {"success": True}


async def test_edit_file_errors(tools, worktree):
    (worktree / "a.py").write_text("x = 1\nx = 1\n")
    assert await tools("edit_file", {"path": "nope.py", "oldString": "a", "newString": "b"}) == {
        "error": "File not found: nope.py"
    }
    await read_then(tools, "a.py")
    assert await tools("edit_file", {"path": "a.py", "oldString": "y = 2", "newString": "z"}) == {
        "error": "oldString not found"
    }
    assert await tools("edit_file", {"path": "a.py", "oldString": "x = 1", "newString": "z"}) == {
        "error": "oldString found multiple times"
    }
    assert (worktree / "a.py").read_text() == "x = 1\nx = 1\n"
    assert await tools("edit_file", {"path": "a.py", "oldString": "x = 1", "newString": "z", "replaceAll": True}) == {
        "success": True
    }
    assert (worktree / "a.py").read_text() == "z\nz\n"
    (worktree / "id_rsa").write_text("key")
    assert await tools("edit_file", {"path": "id_rsa", "oldString": "key", "newString": "k"}) == BLOCKED


async def test_edit_requires_a_read_in_the_same_session(tools, worktree):
    (worktree / "a.py").write_text("one\n")
    failed = await tools("edit_file", {"path": "a.py", "oldString": "one", "newString": "two"})
    assert failed == {"error": "File has not been read yet: a.py. Read it with read_file before editing it."}
    await read_then(tools, "a.py")
    other = await tools("edit_file", {"path": "a.py", "oldString": "one", "newString": "two"}, session="other")
    assert other["error"].startswith("File has not been read yet")
    assert (worktree / "a.py").read_text() == "one\n"


async def test_edit_fails_when_content_changed_since_the_read_even_with_the_same_mtime(tools, worktree):
    path = worktree / "a.py"
    path.write_text("one\n")
    await read_then(tools, "a.py")
    stat = path.stat()
    path.write_text("ONE\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same timestamps, other content
    failed = await tools("edit_file", {"path": "ONE", "oldString": "ONE", "newString": "two"})
    assert failed == {"error": "File not found: ONE"}
    failed = await tools("edit_file", {"path": "a.py", "oldString": "ONE", "newString": "two"})
    assert failed == {
        "error": "File has changed since it was last read: a.py. Read it again with read_file before editing it."
    }
    # Touching a file without changing its content is not a change.
    path.write_text("one\n")
    os.utime(path, (1, 1))
    assert await tools("edit_file", {"path": "a.py", "oldString": "one", "newString": "two"}) == {"success": True}


async def test_read_before_edit_survives_an_executor_restart(tools, worktree, tool_settings):
    from autarch.services.tools.service import build_executor

    (worktree / "a.py").write_text("one\n")
    await read_then(tools, "a.py")
    restarted = build_executor(tool_settings, grep_workers=0)
    try:
        again = type(tools)(restarted, worktree)
        assert await again("edit_file", {"path": "a.py", "oldString": "one", "newString": "two"}) == {"success": True}
    finally:
        restarted.close()


async def test_multi_edit_applies_in_order_atomically(tools, worktree):
    (worktree / "a.py").write_text("a b c\n")
    await read_then(tools, "a.py")
    edits = [
        {"oldString": "a", "newString": "x"},
        {"oldString": "x b", "newString": "y y"},
        {"oldString": "y", "newString": "z", "replaceAll": True},
    ]
    assert await tools("multi_edit", {"path": "a.py", "edits": edits}) == {"success": True, "edits_applied": 3}
    assert (worktree / "a.py").read_text() == "z z c\n"


async def test_multi_edit_errors_are_the_seeds_and_change_nothing(tools, worktree):
    original = "one two two two\n" + "long " * 40 + "\n"
    (worktree / "a.py").write_text(original)
    assert await tools("multi_edit", {"path": "gone.py", "edits": [{"oldString": "a", "newString": "b"}]}) == {
        "error": "File not found: gone.py"
    }
    assert await tools("multi_edit", {"path": "a.py", "edits": []}) == {"error": "No edits provided"}
    await read_then(tools, "a.py")
    missing = "long " * 30 + "MISSING"
    result = await tools(
        "multi_edit",
        {
            "path": "a.py",
            "edits": [
                {"oldString": "one", "newString": "1"},
                {"oldString": "1", "newString": "one"},
                {"oldString": missing, "newString": "x"},
            ],
        },
    )
    assert result == {
        "error": "Edit 2: oldString not found",
        "edit_index": 2,
        "oldString_preview": missing[:100] + "...",
    }
    result = await tools(
        "multi_edit",
        {"path": "a.py", "edits": [{"oldString": "one", "newString": "1"}, {"oldString": "two", "newString": "2"}]},
    )
    assert result == {
        "error": "Edit 1: oldString found 3 times (set replaceAll=true to replace all)",
        "edit_index": 1,
        "found_count": 3,
        "oldString_preview": "two",
    }
    assert await tools("multi_edit", {"path": "a.py", "edits": [{"oldString": "", "newString": "x"}]}) == {
        "error": "Edit 0: oldString is empty",
        "edit_index": 0,
    }
    assert (worktree / "a.py").read_text() == original
    (worktree / "server.key").write_text("k")
    assert await tools("multi_edit", {"path": "server.key", "edits": [{"oldString": "k", "newString": "x"}]}) == BLOCKED
