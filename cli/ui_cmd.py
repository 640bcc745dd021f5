"""``autarch ui``: open the web UI, signed in by a one-time link (the token never goes into a page)."""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser
from urllib.parse import quote

from autarch.gateway.ui.signin import LOGIN_TTL, login_link

from .gateway_client import CliError, add_connection_arguments, connection_from_args

__all__ = ["register"]


def cmd_ui(args: argparse.Namespace) -> int:
    try:
        connection = connection_from_args(args)
    except CliError as exc:
        print(f"autarch: {exc.message}", file=sys.stderr)
        return exc.exit_code
    link = login_link(connection.url, connection.token)
    if args.workflow_id:
        link += "&next=" + quote(f"/workflows/{args.workflow_id}", safe="/")
    # The link signs in once, within LOGIN_TTL seconds; printing it is as safe as the token file is.
    print(f"Autarch UI: {connection.url}/")
    print(f"  sign-in link (one use, {LOGIN_TTL // 60} minutes): {link}")
    if args.print_only:
        return 0
    if not _graphical() or not webbrowser.open(link):
        print("  (no graphical browser here: open the link yourself, e.g. through an SSH tunnel to the port)")
    return 0


def _graphical() -> bool:
    """Whether a browser can open in a window. Without a display, Python's webbrowser falls back to a text
    browser in this terminal (lynx, w3m), which would take over the terminal and spend the one-time link."""
    if os.environ.get("BROWSER") or sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def register(sub: argparse._SubParsersAction) -> None:
    ui = sub.add_parser(
        "ui", help="open the web UI in a browser, signed in",
        description="Open the gateway's web UI with a one-time sign-in link: the browser gets a session cookie, "
        "never the bearer token. The link works once, for a few minutes.",
    )
    ui.add_argument("workflow_id", nargs="?", metavar="ID", help="open this workflow's page")
    ui.add_argument("--print", dest="print_only", action="store_true",
                    help="print the sign-in link without opening a browser (e.g. to open it on another machine)")
    add_connection_arguments(ui)
    ui.set_defaults(handler=cmd_ui)
