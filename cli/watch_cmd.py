"""``autarch watch ID``: follow one workflow live, a readable line per event, until it completes.

Reads ``GET /api/events?workflow=ID`` (server-sent events) through :class:`.follow.WorkflowEvents`, as
``autarch demo`` does. A dropped connection is resumed from the last recorded event seen (``since``; live
deltas carry no id and never move it), so nothing is missed or shown twice. A connection is dropped when the
gateway ends it (it is stopping), when its process dies (the kernel closes the socket), or when nothing, not
even a keep-alive, came for a while (its host is gone); after ``reconnect_for`` seconds without getting a
stream back the watch gives up, exit 1.
Progress (stage k/5, pulse n/N, beads closed) comes from the events; watching live, it starts from the
workflow's state (and its swarm's, when a bead plan runs). ``--json`` prints each event as the stream carries
it, one JSON object per line, and nothing else. Exits 0 on ``workflow:completed`` or ``workflow:abandoned`` (at
once when the workflow had already ended), 1 on errors, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable
from typing import Any

from .follow import StreamLost, WorkflowEvents
from .gateway_client import CliError, GatewayClient, GatewayError, add_connection_arguments
from .render import TERMINAL_EVENTS, Progress, SseComment, Watch, approval_hint, halt_hint
from .workflow_cmd import epic_get, gateway_command, is_bead_plan

__all__ = ["follow", "register", "swarm_view"]


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
    as_json: bool = False,
) -> int:
    """Print ``workflow_id``'s events until it completes or is abandoned; 0 then.

    ``watch`` carries what is known before the first event (the progress, session labels, whether to show
    streamed text); by default an empty one. ``as_json``: each event as one line of JSON, unchanged (its
    ``type`` filled in from the SSE event name), and no other output on stdout.
    """
    watch = watch or Watch()
    # Deltas only when they are shown: each one is a message on the wire and a JSON decode here.
    with WorkflowEvents(client, workflow_id, since=0 if from_start else None, deltas=watch.text,
                        reconnect_for=reconnect_for) as events:
        for item in events:
            if isinstance(item, StreamLost):
                if item.first:
                    print(f"autarch watch: {item.problem}; reconnecting (for up to {reconnect_for:g}s)…",
                          file=sys.stderr, flush=True)
                continue
            if isinstance(item, SseComment):
                # Live, with nothing seen yet: had the workflow already ended before we subscribed?
                if item.text == "connected" and events.since is None:
                    view = client.get(f"/api/workflows/{workflow_id}")
                    if _finished(view):
                        ended = f"workflow already ended: stage {view['stage']}, {view.get('status', '')}"
                        if as_json:
                            print(f"autarch watch: {ended}", file=sys.stderr, flush=True)
                        else:
                            out(ended)
                        return 0
                continue
            if as_json:
                out(json.dumps(item, ensure_ascii=False))
                if item["type"] in TERMINAL_EVENTS:
                    return 0
                continue
            line = watch.feed(item)
            if line is not None:
                out(line)
            if item["type"] in TERMINAL_EVENTS:
                if watch.turns:
                    out(f"total: {watch.turns} turn{'s' if watch.turns != 1 else ''}, {watch.total()}")
                return 0
    raise AssertionError("unreachable: the follower ends only by raising")  # pragma: no cover


def swarm_view(client: GatewayClient, workflow_id: str) -> dict[str, Any] | None:
    """The workflow's swarm (``GET /api/beads/swarm``, a SwarmView), or None when it runs none."""
    return epic_get(client, "/api/beads/swarm", workflow_id)


def _is_loop_session(client: GatewayClient, given: str) -> bool:
    try:
        client.get(f"/api/pulse/{uuid.UUID(given)}")
    except (ValueError, GatewayError):
        return False
    return True


def cmd_watch(client: GatewayClient, args: argparse.Namespace) -> int:
    from .loop_cmd import watch_loop

    if args.json:
        if _is_loop_session(client, args.workflow_id):
            raise CliError(f"--json follows workflows; for the loop session {args.workflow_id} see "
                           f"`autarch pulse show {args.workflow_id} --json`", exit_code=2)
        wf = client.workflow_id(args.workflow_id)
        return follow(client, wf, from_start=args.from_start, out=lambda line: print(line, flush=True),
                      watch=Watch(text=args.text), reconnect_for=args.reconnect_for, as_json=True)
    # A loop session's id: its iterations (k/N, signal, commit) until it completes, blocks, fails or is aborted.
    followed = watch_loop(client, args.workflow_id, reconnect_for=args.reconnect_for)
    if followed is not None:
        return followed
    wf = client.workflow_id(args.workflow_id)
    view = client.get(f"/api/workflows/{wf}")
    artifacts = client.get(f"/api/workflows/{wf}/artifacts")
    now = Progress.from_state(view, artifacts)
    # Mid-swarm, the beads closed so far (and the workers' nicknames and sessions) come from the swarm's view.
    swarm = swarm_view(client, wf) if view.get("stage") == "execution" and is_bead_plan(artifacts) else None
    if swarm is not None:
        now.know_swarm(swarm)
    print(_header(view, now, from_start=args.from_start), flush=True)
    if args.from_start:
        watch = Watch(text=args.text)  # the replay rebuilds progress and labels from workflow:created on
    else:
        # The view maps each step to its session; lines are labelled by the step of their session.
        labels = {str(sid): str(step) for step, sid in (view.get("sessions") or {}).items()}
        watch = Watch(text=args.text, sessions=labels, progress=now)
        if swarm is not None:
            watch.know_swarm(swarm)
    return follow(client, wf, from_start=args.from_start, out=lambda line: print(line, flush=True), watch=watch,
                  reconnect_for=args.reconnect_for)


def register(sub: argparse._SubParsersAction) -> None:
    watch = sub.add_parser(
        "watch", help="follow a workflow (or a loop session) live until it completes",
        description="Follow a workflow's events live: stages (k/5), approvals, sessions, tool calls, turns with "
        "tokens and cost, pulses (n/N) and their commits, a swarm's workers, claims, leases and merged beads, "
        "halts and the command that continues them. Exits 0 "
        "when the workflow completes or is abandoned. Given a loop session's id, follows its iterations "
        "(k/N, signal, commit) and exits 0 when it completes, 1 when it blocks, fails or is aborted.",
    )
    watch.add_argument("workflow_id", metavar="ID",
                       help="the workflow (or a unique prefix of its id), or a loop session's full id")
    watch.add_argument("--from-start", action="store_true", help="replay the workflow's events from the beginning")
    watch.add_argument("--text", action="store_true",
                       help="also show the agents' messages as they stream, a line at a time (with --json: "
                       "also pass the live text deltas through)")
    watch.add_argument("--json", action="store_true",
                       help="print each event of a workflow as one line of JSON, as the stream carries it, "
                       "and nothing else")
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
