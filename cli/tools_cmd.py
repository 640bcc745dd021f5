"""``autarch tools call TOOL --root DIR [--role ROLE] [--session ID] 'JSON-ARGS'`` and ``autarch tools list``.

Runs one tool in this process, exactly as the tools service would (same confinement, gates,
read-before-edit store under the data dir; a linked worktree's repository from the git service with ``--nats``
or from ``--repository``), and prints its result: the tool's JSON, or for the
plain-text tools (``read_file``, ``web_code_search``) the text as a JSON string. Exit code 0 on
success, 1 when the tool answered with an error shape, 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autarch.contracts.tool_catalog import Role

__all__ = ["register"]


def _settings(args: argparse.Namespace) -> Any:
    from autarch.runtime.settings import SettingsError, load_settings

    try:
        return load_settings({"data_dir": args.data_dir, "nats_url": args.nats})
    except SettingsError as exc:
        print(f"autarch: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


async def _call(args: argparse.Namespace, arguments: dict[str, Any], role: Role) -> Any:
    from autarch.contracts.tools import ToolCall
    from autarch.runtime.errors import ServiceFailure
    from autarch.services.tools.service import build_executor

    settings = _settings(args)
    nc = None
    if args.nats:
        from autarch.runtime.bus import connect

        nc = await connect(args.nats, name="autarch-tools-cli", connect_timeout=2)
    # One call: searching in this process is cheaper than starting grep workers.
    executor = build_executor(settings, nc=nc, grep_workers=0)
    for repository in args.repository or ():
        executor.git_records.trust_repository(repository)
    try:
        call = ToolCall(
            session_id=args.session,
            tool_call_id=args.call_id or f"cli-{uuid.uuid4().hex}",
            role=role,
            root=args.root,
            tool=args.tool,
            arguments=arguments,
            run_id=args.workflow,
        )
        try:
            return await executor.call(call)
        except ServiceFailure as failure:
            print(f"autarch tools: {failure.message}", file=sys.stderr)
            raise SystemExit(2) from None
    finally:
        executor.close()
        if nc is not None:
            await nc.close()


def cmd_call(args: argparse.Namespace) -> int:
    from autarch.contracts.tool_catalog import ROLES, is_role, role_for_tool

    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        print(f"autarch tools call: JSON-ARGS is not valid JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(arguments, dict):
        print("autarch tools call: JSON-ARGS must be a JSON object", file=sys.stderr)
        return 2
    args.root = os.path.abspath(args.root)
    args.repository = [os.path.abspath(path) for path in args.repository or ()]
    role = args.role or role_for_tool(args.tool) or "pulsing"
    if not is_role(role):
        print(f"autarch tools call: unknown role {role!r} (one of {', '.join(ROLES)})", file=sys.stderr)
        return 2
    result = asyncio.run(_call(args, arguments, role))
    print(result.content if result.is_json else json.dumps(result.content))
    return 1 if result.is_error else 0


def cmd_list(args: argparse.Namespace) -> int:
    import msgspec

    from autarch.contracts.tool_catalog import ROLES, tool_definitions

    if args.role not in ROLES:
        print(f"autarch tools list: unknown role {args.role!r} (one of {', '.join(ROLES)})", file=sys.stderr)
        return 2
    print(msgspec.json.format(msgspec.json.encode(tool_definitions(args.role)), indent=2).decode())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    tools = sub.add_parser("tools", help="run one agent tool against a directory, or list a role's tools")
    tools_sub = tools.add_subparsers(dest="tools_command", metavar="SUBCOMMAND")
    tools_sub.required = True

    call = tools_sub.add_parser("call", help="run one tool and print its JSON result")
    call.add_argument("tool", metavar="TOOL", help="tool name, e.g. read_file, grep, shell")
    call.add_argument("arguments", metavar="JSON-ARGS", help="the tool's arguments as a JSON object")
    call.add_argument("--root", required=True, help="the worktree (directory) every path is relative to")
    call.add_argument("--role", help="agent role whose tool set applies (default: a role that has the tool)")
    call.add_argument("--session", default="cli", help="session id for read-before-edit tracking (default: cli)")
    call.add_argument("--call-id", help="tool call id (idempotency key; default: a new one per run)")
    call.add_argument("--run", "--workflow", dest="workflow",
                      help="the run (a workflow, or a loop session): for notes, baselines, review tools and "
                           "search_history")
    call.add_argument("--data-dir", help="data directory holding the session store (env AUTARCH_DATA_DIR)")
    call.add_argument("--nats", metavar="URL", help="NATS server for tools that forward (notes, review, search) and "
                      "for the git service's record of the worktree")
    call.add_argument("--repository", action="append", metavar="PATH",
                      help="a repository whose linked worktrees may be ROOT: where git keeps them is read from its "
                      "own .git directory, never from ROOT's .git file (repeatable; without it or --nats, a linked "
                      "worktree has no git for shell's guards)")
    call.set_defaults(handler=cmd_call)

    listing = tools_sub.add_parser("list", help="print a role's tool definitions (name, description, schema)")
    listing.add_argument("--role", default="pulsing", help="agent role (default: pulsing)")
    listing.set_defaults(handler=cmd_list)
