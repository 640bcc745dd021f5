"""Entry point of the ``autarch`` command.

Each command group lives in its own module with ``register(subparsers)``; the module adds its
parsers and sets ``handler`` (a function taking the parsed args and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES = (
    "autarch.cli.system",
    "autarch.cli.contracts_cmd",
    "autarch.cli.tools_cmd",
    "autarch.cli.indexer_cmd",
    "autarch.cli.model_cmd",
    "autarch.cli.workflow_cmd",
    "autarch.cli.watch_cmd",
    "autarch.cli.demo_cmd",
    "autarch.cli.loop_cmd",
    "autarch.cli.beads_cmd",
    "autarch.cli.mail_cmd",
    "autarch.cli.mcp_server",
    "autarch.cli.audit_cmd",
    "autarch.cli.ui_cmd",
)
"""Modules that contribute subcommands, in the order ``--help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autarch",
        description="Turn a request into reviewed, committed code with LLM agents.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
