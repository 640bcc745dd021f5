"""``autarch mail …``: an epic's coordination mail through the gateway — list the messages, show one.

The epic is the workflow of a swarm (its id, or a unique prefix of it). ``list`` prints one line per message,
oldest first; ``show`` prints a message's headers and its body. Everything a worker wrote is shown with its
control characters escaped (``\\x1b``), so mail can never drive the terminal. Every verb takes ``--json`` to
print the gateway's answer as is. Reading marks nothing delivered.
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from .gateway_client import GatewayClient, print_json
from .render import printable
from .workflow_cmd import epic_verbs

__all__ = ["body_lines", "message_line", "register", "show_lines"]


def _time(message: dict[str, Any]) -> str:
    return str(message.get("created_at", ""))[:19].replace("T", " ")


def message_line(message: dict[str, Any]) -> str:
    """One line: id, time, sender → recipients, subject."""
    to = ", ".join(message.get("to", []))
    return printable(f"{message['message_id']:<6} {_time(message)}  {message['sender']} → {to}  "
                     f"{message['subject']}")


def body_lines(body: str) -> list[str]:
    """The body line by line (breaks at ``\\n`` only), tabs as spaces, every other control character escaped."""
    return [printable(line.replace("\t", "    ")) for line in body.split("\n")]


def show_lines(message: dict[str, Any]) -> list[str]:
    """The headers, a blank line, the body."""
    headers = [("message", message["message_id"]), ("date", _time(message)), ("from", message["sender"]),
               ("to", ", ".join(message.get("to", []))), ("subject", message["subject"]),
               ("thread", message.get("thread_id", "")), ("topic", message.get("topic", ""))]
    if message.get("reply_to"):
        headers.append(("reply to", message["reply_to"]))
    if message.get("delivered_to"):
        headers.append(("delivered", ", ".join(message["delivered_to"])))
    lines = [printable(f"{name + ':':<11}{value}") for name, value in headers]
    return [*lines, "", *body_lines(str(message.get("body_md", "")))]


def cmd_list(client: GatewayClient, args: argparse.Namespace) -> int:
    listed = client.get("/api/mail", epic_id=client.workflow_id(args.epic), topic=args.topic, agent=args.agent)
    if args.json:
        print_json(listed)
        return 0
    if not listed["messages"]:
        print("no mail")
    for message in listed["messages"]:
        print(message_line(message))
    return 0


def cmd_show(client: GatewayClient, args: argparse.Namespace) -> int:
    message = client.get(f"/api/mail/{client.workflow_id(args.epic)}/{quote(args.message, safe='')}")
    if args.json:
        print_json(message)
    else:
        print("\n".join(show_lines(message)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``autarch mail list`` and ``autarch mail show``."""
    verb = epic_verbs(
        sub, "mail", help_text="an epic's coordination mail: list, show (through the gateway)",
        description="The mail between a swarm's workers and its coordinator (the epic id is the workflow id; a "
                    "unique prefix will do).",
    )

    listing = verb("list", cmd_list, "the epic's messages, oldest first: id, time, sender → recipients, subject")
    listing.add_argument("--topic", metavar="T", help="only messages on this topic")
    listing.add_argument("--agent", metavar="A", help="only messages this agent sent or was sent")
    verb("show", cmd_show, "one message: its headers and its body").add_argument(
        "message", metavar="MESSAGE_ID", help="the message's id (m1, m2, …)")
