"""``autarch watch ID``: follow one workflow live, a readable line per event, until it completes.

Reads ``GET /api/events?workflow=ID`` (server-sent events). A dropped connection is resumed from the
last recorded event seen (``since``; live deltas carry no id and never move it), so nothing is missed or
shown twice. A connection is dropped when the gateway ends it (it is stopping), when its process dies
(the kernel closes the socket), or when nothing, not even a keep-alive, came for a while (its host is
gone); after ``reconnect_for`` seconds without getting a stream back the watch gives up, exit 1.
Progress (stage k/5, pulse n/N) comes from the events; watching live, it starts from the
workflow's state. Exits 0 on ``workflow:completed`` or ``workflow:abandoned`` (at once when the workflow
had already ended), 1 on errors, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from .gateway_client import CliError, GatewayClient, GatewayError, GatewayUnreachable, add_connection_arguments
from .render import TERMINAL_EVENTS, Progress, SseComment, Watch, approval_hint, halt_hint, parse_sse
from .workflow_cmd import gateway_command

__all__ = ["follow", "register"]


def _finished(view: dict[str, Any]) -> bool:
    return view.get("stage") == "done" or view.get("status") in ("done", "abandoned")


def _header(view: dict[str, Any], progress: Progress, *, from_start: bool) -> str:
    status = (view.get("status") or "active").replace("_", " ")
    line = f"watching “{view['title']}” ({view['id']}): stage {progress.summary()}, {status}"
    if not from_start:
        line += "  (new events only; --from-start replays the history)"
    halt = view.get("halt")
    if halt:
        reason = halt.get("reason", "")
        line += f"\n  halted ({reason}): {halt.get('message', '')}\n  → {halt_hint(view['id'], reason)}"
    elif view.get("awaiting_approval"):
        line += f"\n  awaiting your approval → {approval_hint(view['id'], view['stage'])}"
    return line


def follow(
    client: GatewayClient,
    workflow_id: str,
    *,
    from_start: bool = False,
    out: Callable[[str], None] = print,
    reconnect_for: float = 60.0,
    watch: Watch | None = None,
) -> int:
    """Print ``workflow_id``'s events until it completes or is abandoned; 0 then.

    ``watch`` carries what is known before the first event (the progress, session labels, whether to show
    streamed text); by default an empty one.
    """
    import httpx

    watch = watch or Watch()
    since: int | None = 0 if from_start else None
    check_state = not from_start  # once live: had it already ended before we subscribed?
    connected_once = False
    lost_at: float | None = None  # when the current outage began
    while True:
        try:
            # Deltas only when they are shown: each one is a message on the wire and a JSON decode here.
            with client.events(workflow=workflow_id, since=since, deltas=watch.text) as lines:
                for message in parse_sse(lines):
                    if isinstance(message, SseComment):
                        if message.text != "connected":
                            continue
                        connected_once, lost_at = True, None
                        if check_state:
                            check_state = False
                            view = client.get(f"/api/workflows/{workflow_id}")
                            if _finished(view):
                                out(f"workflow already ended: stage {view['stage']}, {view.get('status', '')}")
                                return 0
                        continue
                    if message.id and message.id.isdigit():
                        since = int(message.id)
                    try:
                        event = json.loads(message.data)
                    except ValueError:
                        continue
                    if not isinstance(event, dict):
                        continue
                    event.setdefault("type", message.event)
                    line = watch.feed(event)
                    if line is not None:
                        out(line)
                    if event["type"] in TERMINAL_EVENTS:
                        if watch.turns:
                            out(f"total: {watch.turns} turn{'s' if watch.turns != 1 else ''}, {watch.total()}")
                        return 0
            problem = "the gateway closed the stream"
        except GatewayUnreachable as exc:
            if not connected_once:
                raise
            problem = exc.message
        except GatewayError as exc:
            # A gateway restarting (or not yet connected to NATS) answers 503 for a moment.
            if not connected_once or exc.status not in (502, 503, 504):
                raise
            problem = exc.message
        except httpx.HTTPError as exc:
            problem = f"connection lost ({type(exc).__name__})"
        now = time.monotonic()
        if lost_at is None:
            lost_at = now
            print(f"autarch watch: {problem}; reconnecting (for up to {reconnect_for:g}s)…",
                  file=sys.stderr, flush=True)
        remaining = reconnect_for - (now - lost_at)
        if remaining <= 0:
            raise CliError(f"{problem}; gave up after {reconnect_for:g}s of reconnecting")
        if since is None:
            check_state = True  # nothing seen yet: look at the state again once live
        # Never past the deadline: the last attempt is made at it, so giving up is not late.
        time.sleep(min(2.0, 0.25 + (now - lost_at) / 4, remaining))


def cmd_watch(client: GatewayClient, args: argparse.Namespace) -> int:
    wf = client.workflow_id(args.workflow_id)
    view = client.get(f"/api/workflows/{wf}")
    now = Progress.from_state(view, client.get(f"/api/workflows/{wf}/artifacts"))
    print(_header(view, now, from_start=args.from_start), flush=True)
    if args.from_start:
        watch = Watch(text=args.text)  # the replay rebuilds progress and labels from workflow:created on
    else:
        # The view maps each step to its session; lines are labelled by the step of their session.
        labels = {str(sid): str(step) for step, sid in (view.get("sessions") or {}).items()}
        watch = Watch(text=args.text, sessions=labels, progress=now)
    return follow(client, wf, from_start=args.from_start, out=lambda line: print(line, flush=True), watch=watch,
                  reconnect_for=args.reconnect_for)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    watch = sub.add_parser(
        "watch", help="follow a workflow live until it completes",
        description="Follow a workflow's events live: stages (k/5), approvals, sessions, tool calls, turns with "
        "tokens and cost, pulses (n/N) and their commits, halts and the command that continues them. Exits 0 "
        "when the workflow completes or is abandoned.",
    )
    watch.add_argument("workflow_id", metavar="ID", help="the workflow (or a unique prefix of its id)")
    watch.add_argument("--from-start", action="store_true", help="replay the workflow's events from the beginning")
    watch.add_argument("--text", action="store_true",
                       help="also show the agents' messages as they stream, a line at a time")
    watch.add_argument("--reconnect-for", type=_seconds, default=60.0, metavar="SECONDS",
                       help="how long to keep reconnecting to a gateway that went away before giving up with exit "
                       "status 1 (default 60)")
    add_connection_arguments(watch)
    watch.set_defaults(handler=gateway_command(cmd_watch))


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value
