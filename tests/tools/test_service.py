"""The tools service on a real nats-server: call, list_tools, file_access, typed errors, idempotency."""

from __future__ import annotations

import json

import pytest

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.tools import (
    FileAccessLog,
    GetFileAccess,
    ListTools,
    ToolCall,
    ToolDefinitions,
    ToolResult,
)
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.runtime.settings import Settings
from autarch.services.tools.service import start


@pytest.fixture
async def tools_service(nc, tmp_path):
    settings = Settings(data_dir=str(tmp_path / "data"), tools_grep_workers=0)
    stop = await start(nc, settings)
    yield
    await stop()


def call(root, tool, arguments, **kw):
    return ToolCall(
        session_id=kw.pop("session", "s1"),
        tool_call_id=kw.pop("call_id", "c1"),
        role=kw.pop("role", "pulsing"),
        root=str(root),
        tool=tool,
        arguments={"reason": "test", **arguments},
        **kw,
    )


async def test_call_over_nats(nc, tools_service, worktree):
    (worktree / "a.py").write_text("print('hi')\n")
    subject = subjects.request("tools", "call")
    result = await request(nc, subject, call(worktree, "read_file", {"path": "a.py"}), ToolResult)
    assert result.content == "     1\tprint('hi')" and not result.is_json and not result.is_error
    edit = call(worktree, "edit_file", {"path": "a.py", "oldString": "hi", "newString": "bye"}, call_id="c2")
    assert json.loads((await request(nc, subject, edit, ToolResult)).content) == {"success": True}
    replay = await request(nc, subject, edit, ToolResult)
    assert replay.replayed and (worktree / "a.py").read_text() == "print('bye')\n"
    missing = await request(nc, subject, call(worktree, "read_file", {"path": "nope"}, call_id="c3"), ToolResult)
    assert missing.is_error and json.loads(missing.content) == {"error": "File not found: nope"}


async def test_bad_requests_are_typed_errors(nc, tools_service, worktree, tmp_path):
    subject = subjects.request("tools", "call")
    with pytest.raises(RemoteError) as relative:
        await request(nc, subject, call("relative/dir", "read_file", {"path": "a"}), ToolResult)
    assert relative.value.code == ErrorCode.BAD_REQUEST
    with pytest.raises(RemoteError) as missing:
        await request(nc, subject, call(tmp_path / "absent", "read_file", {"path": "a"}), ToolResult)
    assert missing.value.code == ErrorCode.BAD_REQUEST
    msg = await nc.request(subject, b'{"session_id": "s", "role": "janitor"}', timeout=5)
    assert msg.headers["Autarch-Error"] == ErrorCode.BAD_REQUEST


async def test_list_tools_and_file_access(nc, tools_service, worktree):
    defs = await request(nc, subjects.request("tools", "list_tools"), ListTools(role="review"), ToolDefinitions)
    assert [d.name for d in defs.tools][-1] == "complete_review"
    (worktree / "a.py").write_text("x\n")
    await request(
        nc,
        subjects.request("tools", "call"),
        call(worktree, "read_file", {"path": "a.py", "startLine": 1}, role="research", session="r1"),
        ToolResult,
    )
    log = await request(nc, subjects.request("tools", "file_access"), GetFileAccess(session_id="r1"), FileAccessLog)
    assert [(r.path, r.start_line) for r in log.reads] == [("a.py", 1)]
    assert log.reads[0].root == str(worktree.resolve())


async def test_service_answers_srv_ping(nc, tools_service):
    msg = await nc.request("$SRV.PING.tools", b"", timeout=2)
    assert json.loads(msg.data)["name"] == "tools"
    assert subjects.TOOLS_VERBS == ("call", "list_tools", "file_access", "cancel")
