"""``autarch mcp``: the gateway's loop-session and workflow verbs as MCP tools, served over stdio.

Claude Code (or any MCP client) runs ``autarch mcp`` and gets the seed's ``pulse_start``, ``pulse_status``,
``pulse_pause``, ``pulse_resume``, ``pulse_abort`` tools, ``pulse_fork`` and the workflow verbs (``workflow_fork``
among them). Each tool is one HTTP call to the gateway with the CLI's connection settings (``--url``,
``--token-file``, ``--data-dir``), resolved at each call, so the server may start before ``autarch up`` does. A
gateway error comes back as an MCP tool error whose text is the gateway's JSON body ``{"code", "message",
"details"}``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, Literal

from .gateway_client import CliError, GatewayClient, GatewayError, add_connection_arguments, connection_from_args

__all__ = ["build_server", "register"]

ContextStrategy = Literal["none", "prefetch", "mcp", "hybrid"]
Json = dict[str, Any]


class _Failure(Exception):
    """A tool call that failed with the gateway's (or an equivalent) typed body."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.body = {"code": code, "message": message, "details": details or {}}


class _Gateway:
    """One gateway request per tool call; a failure raises :class:`_Failure` with the typed body."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        try:
            with GatewayClient(connection_from_args(self.args)) as client:
                return client.request(method, path, body=body, params=params)
        except GatewayError as exc:
            raise _Failure(exc.code, exc.message.removeprefix(f"{exc.code}: "), exc.details) from None
        except CliError as exc:
            raise _Failure("unavailable", exc.message) from None


def _path_id(value: str, what: str) -> str:
    text = value.strip()
    if not text or any(c in text for c in "/?#%"):
        raise _Failure("bad_request", f"{what} must be an id, got {value!r}", {"field": what})
    return text


def _typed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` answering a :class:`_Failure` as an MCP tool error whose text (and structured content) is the
    typed body ``{"code", "message", "details"}`` exactly, with no prefix for a client to strip."""

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        from mcp.types import CallToolResult, TextContent

        try:
            return fn(*args, **kwargs)
        except _Failure as exc:
            return CallToolResult(content=[TextContent(type="text", text=json.dumps(exc.body))],
                                  structured_content=exc.body, is_error=True)

    return tool


def build_server(args: argparse.Namespace) -> Any:
    """The MCP server with every tool bound to the gateway ``args`` name."""
    from mcp.server.mcpserver import MCPServer

    gw = _Gateway(args)
    server = MCPServer("autarch", log_level="WARNING", instructions=(
        "Autarch turns requests into reviewed, committed code with LLM agents. pulse_* tools run loop sessions "
        "(agents iterate on a goal on their own branch, one commit and one signal per iteration); workflow_* "
        "tools drive staged workflows (scope, research, plan, execution, review) that wait for approvals."))

    def tool() -> Callable[[Callable[..., Any]], Any]:
        return lambda fn: server.tool()(_typed(fn))

    @tool()
    def pulse_start(projectName: str, projectPath: str, goal: str, maxIterations: int = 10,
                    anchorTurnId: str | None = None, branchName: str | None = None,
                    contextStrategy: ContextStrategy | None = None) -> Json:
        """Start a loop session: agents iterate on `goal` in the git repository at `projectPath` (absolute) on
        a branch of their own, one commit and one CONTINUE/COMPLETE/BLOCKED signal per iteration, for at most
        `maxIterations` iterations. Returns the session (its `id` is the sessionId of the other pulse tools)."""
        body: Json = {"projectName": projectName, "projectPath": projectPath, "goal": goal,
                      "maxIterations": maxIterations, "createdBy": "mcp"}
        for key, value in (("anchorTurnId", anchorTurnId), ("branchName", branchName),
                           ("contextStrategy", contextStrategy)):
            if value is not None:
                body[key] = value
        return gw.call("POST", "/api/pulse/start", body)

    @tool()
    def pulse_status(sessionId: str) -> Json:
        """A loop session: status, current iteration, last signal, progress log, and every iteration (signal,
        summary, commit, files changed, anchor, tokens)."""
        return gw.call("GET", f"/api/pulse/{_path_id(sessionId, 'sessionId')}")

    @tool()
    def pulse_pause(sessionId: str) -> Json:
        """Pause a running loop session after its current iteration."""
        return gw.call("POST", f"/api/pulse/{_path_id(sessionId, 'sessionId')}/pause")

    @tool()
    def pulse_resume(sessionId: str, message: str | None = None) -> Json:
        """Resume a blocked or paused loop session; `message` (the decision it asked for, the key you added)
        is shown to the next iteration."""
        body = {"message": message} if message else None
        return gw.call("POST", f"/api/pulse/{_path_id(sessionId, 'sessionId')}/resume", body)

    @tool()
    def pulse_abort(sessionId: str, reason: str | None = None) -> Json:
        """Stop a loop session now; the running turn's work is kept as a recovery commit."""
        body = {"reason": reason} if reason else None
        return gw.call("POST", f"/api/pulse/{_path_id(sessionId, 'sessionId')}/abort", body)

    @tool()
    def pulse_fork(sessionId: str, atIteration: int, branchName: str | None = None) -> Json:
        """A new loop session from this one's history up to iteration `atIteration` (an ended one), on a branch cut
        from the commit it had then; it goes on with the next iteration, anchored on that one's hint. The original
        is not changed."""
        body: Json = {"atIteration": atIteration}
        if branchName:
            body["branchName"] = branchName
        return gw.call("POST", f"/api/pulse/{_path_id(sessionId, 'sessionId')}/fork", body)

    @tool()
    def workflow_create(title: str, request: str, repo: str, baseBranch: str | None = None,
                        branch: str | None = None) -> Json:
        """Start a workflow: agents take `request` on the git repository at `repo` (absolute) through scoping,
        research, planning, execution and review, waiting for approval after each card."""
        body: Json = {"title": title, "request": request, "repo": repo}
        if baseBranch:
            body["base_branch"] = baseBranch
        if branch:
            body["branch"] = branch
        return gw.call("POST", "/api/workflows", body)

    @tool()
    def workflow_status(workflowId: str) -> Json:
        """A workflow (stage, status, what it waits for) with its artifacts (cards, plan, pulse runs)."""
        wf = _path_id(workflowId, "workflowId")
        return {"workflow": gw.call("GET", f"/api/workflows/{wf}"),
                "artifacts": gw.call("GET", f"/api/workflows/{wf}/artifacts")}

    @tool()
    def workflow_approve(workflowId: str, path: Literal["quick", "full"] | None = None) -> Json:
        """Approve the card the workflow waits on; at scope approval `path` picks the quick or full path."""
        body = {"path": path} if path else None
        return gw.call("POST", f"/api/workflows/{_path_id(workflowId, 'workflowId')}/approve", body)

    @tool()
    def workflow_request_changes(workflowId: str, feedback: str, fix: bool | list[str] = False) -> Json:
        """Send the card the workflow waits on back to its agent with `feedback`. At review, `fix` true sends the
        work itself back: fix pulses fix every comment of the review card (a list of comment ids: those only),
        each one commit on the branch, then the review runs again; false re-runs the review with the feedback."""
        body: Json = {"feedback": feedback}
        if fix is not False:
            body["fix"] = fix
        return gw.call("POST", f"/api/workflows/{_path_id(workflowId, 'workflowId')}/request-changes", body)

    @tool()
    def workflow_stop(workflowId: str, reason: str | None = None) -> Json:
        """Stop whatever agent works for the workflow (a swarm: every worker at once); it halts `stopped`."""
        body = {"reason": reason} if reason else None
        return gw.call("POST", f"/api/workflows/{_path_id(workflowId, 'workflowId')}/stop", body)

    @tool()
    def workflow_resume(workflowId: str, message: str | None = None) -> Json:
        """Continue a halted workflow; `message` is guidance for the agent that carries on."""
        body = {"message": message} if message else None
        return gw.call("POST", f"/api/workflows/{_path_id(workflowId, 'workflowId')}/resume", body)

    @tool()
    def workflow_fork(workflowId: str, at: int, branch: str | None = None) -> Json:
        """A new workflow whose history is this one's first `at` events (its `version` counts them), going on live
        from there on a branch of its own cut from the commit this one's branch had then (for example: request
        changes to a plan this one approved). The original is not changed."""
        body: Json = {"at": at}
        if branch:
            body["branch"] = branch
        return gw.call("POST", f"/api/workflows/{_path_id(workflowId, 'workflowId')}/fork", body)

    @tool()
    def workflow_list() -> Json:
        """Every workflow: id, title, stage, status."""
        return gw.call("GET", "/api/workflows", params={"limit": 10_000})

    return server


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        server = build_server(args)
    except ImportError:
        print("autarch: `autarch mcp` needs the mcp SDK: pip install 'mcp>=2.3,<3'", file=sys.stderr)
        return 1
    # stdout is the protocol; stderr goes to the client's log: keep it to warnings (not every HTTP request).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server.run("stdio")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "mcp", help="serve the loop-session and workflow verbs to MCP clients over stdio",
        description="An MCP server on stdin/stdout (add it to Claude Code with `claude mcp add autarch -- autarch "
                    "mcp`). Each tool calls the gateway `autarch up` runs.",
    )
    add_connection_arguments(parser)
    parser.set_defaults(handler=cmd_mcp)
