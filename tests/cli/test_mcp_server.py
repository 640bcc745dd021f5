"""``autarch mcp`` driven by the official SDK's own client over stdio, against a real gateway and services."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.system import System
from tests.workflows.conftest import make_repo

from .test_pulse_cmd import FILES, loop_system

PULSE_TOOLS = {"pulse_start", "pulse_status", "pulse_pause", "pulse_resume", "pulse_abort", "pulse_fork"}
WORKFLOW_TOOLS = {"workflow_create", "workflow_status", "workflow_approve", "workflow_request_changes",
                  "workflow_stop", "workflow_resume", "workflow_list", "workflow_fork"}


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    for sys_, _model in loop_system(tmp_path_factory, "cli-mcp"):
        yield sys_


def server(system: System) -> StdioServerParameters:
    """``autarch mcp`` as an MCP client configuration would spawn it (the gateway found through the data dir)."""
    return StdioServerParameters(command=sys.executable, args=["-m", "autarch.cli.main", "mcp", "--data-dir",
                                                               str(system.data_dir)],
                                 env={"PATH": os.environ.get("PATH", "")})


def typed_error(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    body = json.loads(result.content[0].text)
    assert set(body) == {"code", "message", "details"} and body["message"]
    return body


def payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    return result.structured_content or json.loads(result.content[0].text)


async def test_tools_over_stdio(system: System, tmp_path: Path):
    repo = make_repo(tmp_path / "shop", FILES)
    async with Client(server(system)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert PULSE_TOOLS | WORKFLOW_TOOLS <= set(tools)
        start_params = tools["pulse_start"].input_schema["properties"]
        assert {"projectName", "projectPath", "goal", "maxIterations", "anchorTurnId", "branchName",
                "contextStrategy"} == set(start_params)
        assert set(tools["pulse_start"].input_schema["required"]) == {"projectName", "projectPath", "goal"}

        session = payload(await client.call_tool("pulse_start", {
            "projectName": "shop", "projectPath": str(repo), "goal": "Write a", "maxIterations": 3,
            "contextStrategy": "none"}))
        assert session["created_by"] == "mcp" and session["max_iterations"] == 3
        status = payload(await client.call_tool("pulse_status", {"sessionId": session["id"]}))
        assert status["id"] == session["id"] and status["goal"] == "Write a"
        aborted = payload(await client.call_tool("pulse_abort", {"sessionId": session["id"], "reason": "test"}))
        assert aborted["status"] == "aborted"
        again = typed_error(await client.call_tool("pulse_resume", {"sessionId": session["id"]}))
        assert again["code"] == "loop_finished"
        # A fork names an ended iteration: the refusal is the gateway's typed error, and nothing is made.
        too_far = typed_error(await client.call_tool("pulse_fork", {"sessionId": session["id"], "atIteration": 99}))
        assert too_far["code"] == "iteration_out_of_range"

        missing = typed_error(await client.call_tool("pulse_status",
                                                     {"sessionId": "0123abcd-0000-4000-8000-000000000000"}))
        assert missing["code"] == "not_found"
        bad = typed_error(await client.call_tool("pulse_start", {"projectName": "shop", "projectPath": "relative",
                                                                 "goal": "Write a"}))
        assert bad["code"] == "bad_request"
        sneaky = typed_error(await client.call_tool("pulse_pause", {"sessionId": "../workflows"}))
        assert sneaky["code"] == "bad_request"

        listed = payload(await client.call_tool("workflow_list", {}))
        assert listed["items"] == [] and listed["total"] == 0
        unknown_wf = typed_error(await client.call_tool("workflow_status",
                                                        {"workflowId": "0123abcd-0000-4000-8000-000000000000"}))
        assert unknown_wf["code"] == "not_found"
        # A change request may send a review's work back (``fix``); the gateway checks what the tool forwards.
        assert "fix" in tools["workflow_request_changes"].input_schema["properties"]
        fix_all = typed_error(await client.call_tool("workflow_request_changes", {
            "workflowId": "0123abcd-0000-4000-8000-000000000000", "feedback": "fix them", "fix": True}))
        assert fix_all["code"] == "not_found"
        bad_ids = typed_error(await client.call_tool("workflow_request_changes", {
            "workflowId": "0123abcd-0000-4000-8000-000000000000", "feedback": "fix it", "fix": ["not-an-id"]}))
        assert bad_ids["code"] == "bad_request"
        for verb, body in (("workflow_stop", {"reason": "enough"}), ("workflow_resume", {"message": "go on"}),
                           ("workflow_fork", {"at": 1})):
            unknown = typed_error(await client.call_tool(verb, {"workflowId": "0123abcd-0000-4000-8000-000000000000",
                                                                **body}))
            assert unknown["code"] == "not_found", (verb, unknown)


async def test_a_gateway_that_is_not_running(tmp_path: Path):
    data = tmp_path / "nothing"
    data.mkdir()
    params = StdioServerParameters(command=sys.executable, args=["-m", "autarch.cli.main", "mcp", "--data-dir",
                                                                 str(data)], env={"PATH": os.environ.get("PATH", "")})
    async with Client(params) as client:
        # The server starts without a gateway (an MCP client launches it whenever); each call says what is wrong.
        error = typed_error(await client.call_tool("workflow_list", {}))
        assert error["code"] == "unavailable" and "autarch up" in error["message"]
