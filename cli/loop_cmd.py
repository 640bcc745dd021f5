"""``autarch pulse …`` (also ``autarch loop …``): start, list, show and steer loop sessions through the gateway.

The command keeps the name the Pulse Protocol (seed 001) gives its verbs; everything inside says loop.

Every command takes ``--url``, ``--token-file`` and ``--data-dir`` (see :mod:`.gateway_client`). A session id
may be shortened to a unique prefix. ``start --follow`` (and ``autarch watch <session id>``, through
:func:`follow_loop`) prints one line per iteration start and end until the session completes, blocks, fails
or is aborted.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import Any, TextIO

from .gateway_client import CliError, GatewayClient, GatewayError, add_connection_arguments, print_json
from .recording import load_recording, loop_replay_of, print_comparison, record_loop
from .workflow_cmd import gateway_command, write_recording

__all__ = ["ENDING_STATUSES", "follow_loop", "iteration_rows", "loop_id", "register", "show_lines"]

ENDING_STATUSES = frozenset({"complete", "blocked", "failed", "aborted"})
"""Statuses at which following a session stops (a paused session is followed on: it waits for a resume)."""
_ENDING_EVENTS = {"loop:completed", "loop:blocked", "loop:failed", "loop:aborted"}
_STATUSES = ("pending", "running", "complete", "blocked", "failed", "aborted", "paused")


def loop_id(client: GatewayClient, given: str) -> str:
    """``given`` as a full session id; a unique prefix of one is accepted too."""
    try:
        return str(uuid.UUID(given))
    except ValueError:
        pass
    text = given.lower()
    if not (4 <= len(text) <= 36 and all(c in "0123456789abcdef-" for c in text)):
        raise CliError(f"{given!r} is not a loop session id")
    items = client.get("/api/pulse", limit=10_000).get("items", [])
    matches = [s["id"] for s in items if s["id"].startswith(text)]
    if not matches:
        raise CliError(f"not_found: no loop session {given}")
    if len(matches) > 1:
        raise CliError(f"{given} is ambiguous: it starts {len(matches)} session ids ({', '.join(matches[:5])})")
    return matches[0]


def _cut(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def describe(view: dict[str, Any]) -> str:
    """One line: id, status, iteration k/N, last signal (and why it stopped)."""
    line = (f"{view['id']}  {view['status']}, iteration {view['current_iteration']}/{view['max_iterations']}"
            f", last signal {view.get('last_signal') or '-'}")
    if view.get("status_reason"):
        line += f" ({_cut(view['status_reason'], 100)})"
    return line


def iteration_rows(view: dict[str, Any]) -> list[str]:
    """The iterations table of ``pulse show``: k/N, status, signal, short commit hash, summary."""
    n = view["max_iterations"]
    rows = [(f"{it['iteration_number']}/{n}", it.get("status") or "-", it.get("signal") or "-",
             str(it.get("commit_hash") or "")[:7] or "-", _cut(it.get("output_summary") or it.get("reason") or "", 90))
            for it in view.get("iterations") or []]
    header = ("ITER", "STATUS", "SIGNAL", "COMMIT", "SUMMARY")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4]
            for row in (header, *rows)]


def show_lines(view: dict[str, Any]) -> list[str]:
    """What ``pulse show`` prints: the session, then its iterations."""
    lines = [f"{view['project_name']}  ({view['id']})"]

    def add(label: str, text: Any) -> None:
        lines.append(f"  {label:<10}{text}")

    add("goal", _cut(view.get("goal", ""), 200))
    add("project", f"{view['project_path']} → branch {view['branch_name']}")
    add("status", describe(view).split("  ", 1)[1])
    add("totals", f"{view.get('total_commits', 0)} commits, {view.get('total_tokens_used', 0):,} tokens, "
                  f"${view.get('total_cost_usd', 0.0):.4f}")
    add("context", f"{view.get('context_strategy')}" + (f", anchor {view['anchor_turn_id']}"
                                                        if view.get("anchor_turn_id") else ""))
    add("created", f"{str(view.get('created_at', ''))[:19].replace('T', ' ')} UTC by {view.get('created_by')}")
    if view.get("forked_from"):
        add("forked", f"from {view['forked_from']} after its iteration {view.get('forked_at_iteration')}")
    if view.get("status") in ("blocked", "paused"):
        add("", f"→ autarch pulse resume {view['id']} [--message …]")
    if view.get("iterations"):
        lines.append("")
        lines.extend(iteration_rows(view))
    return lines


def follow_loop(client: GatewayClient, session_id: str, *, out: TextIO | None = None,
                reconnect_for: float = 60.0) -> int:
    """Print the session's iterations live (from its first event) until it completes, blocks, fails or is
    aborted; 0 when it completed, 1 otherwise. Returns at once for a session that already ended. A dropped
    stream is resumed after the last event seen, for ``reconnect_for`` seconds."""
    from .follow import StreamLost, WorkflowEvents
    from .render import render_event

    out = out or sys.stdout
    view = client.get(f"/api/pulse/{session_id}")
    print(f"loop session {session_id}: {_cut(view['goal'], 100)}", file=out, flush=True)
    with WorkflowEvents(client, session_id, since=0, reconnect_for=reconnect_for) as events:
        for item in events:
            if isinstance(item, StreamLost):
                if item.first:
                    print(f"  ({item.problem}; reconnecting …)", file=out, flush=True)
                continue
            if not isinstance(item, dict) or not str(item.get("type", "")).startswith("loop:"):
                continue
            line = render_event(item)
            if line is not None:
                print(line, file=out, flush=True)
            if item["type"] in _ENDING_EVENTS:
                # Replayed history can hold a block that was resumed since: stop only if it still holds.
                view = client.get(f"/api/pulse/{session_id}")
                if view["status"] in ENDING_STATUSES:
                    break
    print(describe(view), file=out, flush=True)
    return 0 if view["status"] == "complete" else 1


# --- commands -------------------------------------------------------------------------------------------


def cmd_start(client: GatewayClient, args: argparse.Namespace) -> int:
    path = Path(args.project_path).expanduser().resolve()
    body: dict[str, Any] = {"projectName": args.project_name or path.name, "projectPath": str(path),
                            "goal": args.goal, "createdBy": "cli"}
    for key, flag in (("maxIterations", "max_iterations"), ("anchorTurnId", "anchor"), ("branchName", "branch"),
                      ("contextStrategy", "context_strategy"), ("script", "script")):
        if getattr(args, flag) is not None:
            body[key] = getattr(args, flag)
    if args.notify_webhook:
        body["notify"] = [{"kind": "webhook", "url": url} for url in args.notify_webhook]
    view = client.post("/api/pulse/start", body)
    if args.json:
        print_json(view)
    else:
        print(f"{view['id']}  {view['status']} on branch {view['branch_name']}")
        if not args.follow:
            print(f"  follow it:  autarch watch {view['id']}")
    if args.follow:
        return follow_loop(client, view["id"])
    return 0


def cmd_list(client: GatewayClient, args: argparse.Namespace) -> int:
    listed = client.get("/api/pulse", status=args.status, limit=10_000)
    if args.json:
        print_json(listed)
        return 0
    items = listed.get("items", [])
    if not items:
        print("no loop sessions" + (f" {args.status}" if args.status else ""))
        return 0
    rows = [(s["id"], s["status"], f"{s['current_iteration']}/{s['max_iterations']}", s.get("project_name", ""),
             _cut(s.get("goal", ""), 70)) for s in items]
    header = ("ID", "STATUS", "ITER", "PROJECT", "GOAL")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + str(row[4]))
    return 0


def cmd_show(client: GatewayClient, args: argparse.Namespace) -> int:
    view = client.get(f"/api/pulse/{loop_id(client, args.session_id)}")
    if args.json:
        print_json(view)
    else:
        print("\n".join(show_lines(view)))
    return 0


def _control(client: GatewayClient, args: argparse.Namespace, verb: str, body: Any = None) -> int:
    view = client.post(f"/api/pulse/{loop_id(client, args.session_id)}/{verb}", body)
    if args.json:
        print_json(view)
    else:
        print(describe(view))
        if verb == "pause" and view.get("status") == "running":
            print("  the running iteration finishes first; the session then pauses")
    return 0


def cmd_pause(client: GatewayClient, args: argparse.Namespace) -> int:
    return _control(client, args, "pause")


def cmd_resume(client: GatewayClient, args: argparse.Namespace) -> int:
    return _control(client, args, "resume", {"message": args.message} if args.message else None)


def cmd_abort(client: GatewayClient, args: argparse.Namespace) -> int:
    return _control(client, args, "abort", {"reason": args.reason} if args.reason else None)


def cmd_record(client: GatewayClient, args: argparse.Namespace) -> int:
    """Print (or write) the scenario that replays a stopped session's iterations."""
    write_recording(record_loop(client, loop_id(client, args.session_id)), args.output)
    return 0


def cmd_compare(client: GatewayClient, args: argparse.Namespace) -> int:
    """Check a replayed session against a recording; name the first event that differs (exit 1)."""
    recording = load_recording(args.recording, "loop")
    return print_comparison(recording, loop_replay_of(client, loop_id(client, args.session_id)), as_json=args.json)


def cmd_fork(client: GatewayClient, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"atIteration": args.at_iteration}
    if args.branch:
        body["branchName"] = args.branch
    if args.script:
        body["script"] = args.script
    original = loop_id(client, args.session_id)
    view = client.post(f"/api/pulse/{original}/fork", body)
    if args.json:
        print_json(view)
    else:
        print(describe(view))
        print(f"  forked from {original} after its iteration {args.at_iteration}, on branch {view['branch_name']}")
    return 0


def watch_loop(client: GatewayClient, given: str, *, reconnect_for: float = 60.0) -> int | None:
    """For ``autarch watch``: follow ``given`` if it is a loop session id, else None (not a session)."""
    try:
        session_id = str(uuid.UUID(given))
        client.get(f"/api/pulse/{session_id}")
    except (ValueError, GatewayError):
        return None
    return follow_loop(client, session_id, reconnect_for=reconnect_for)


# --- parsers --------------------------------------------------------------------------------------------


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    loop = sub.add_parser(
        "pulse", aliases=["loop"], help="start, inspect and steer loop sessions (Pulse Protocol, through the gateway)",
        description="Loop sessions: agents iterate on a goal unattended, one commit and one signal per iteration. "
                    "A session id may be shortened to a unique prefix.",
    )
    verbs = loop.add_subparsers(dest="loop_command", metavar="VERB")
    verbs.required = True

    def verb(name: str, action: Any, help_text: str) -> argparse.ArgumentParser:
        parser = verbs.add_parser(name, help=help_text, description=help_text)
        add_connection_arguments(parser)
        parser.add_argument("--json", action="store_true", help="print the gateway's JSON answer")
        parser.set_defaults(handler=gateway_command(action))
        return parser

    start = verb("start", cmd_start, "start a loop session on a repository")
    start.add_argument("--project-path", required=True, metavar="PATH", help="the top of a git repository")
    start.add_argument("--goal", required=True, type=_nonempty, help="what the iterations work towards")
    start.add_argument("--project-name", metavar="NAME", help="default: the repository's directory name")
    start.add_argument("--max-iterations", type=_positive, metavar="N", help="default 10")
    start.add_argument("--anchor", metavar="TURN_ID", help="the recorded agent turn to start from")
    start.add_argument("--branch", metavar="NAME", help="the session's branch (default autarch/loop-<id prefix>)")
    start.add_argument("--context-strategy", choices=("none", "prefetch", "mcp", "hybrid"),
                       help="how past turns reach the agent (default prefetch)")
    start.add_argument("--notify-webhook", action="append", metavar="URL",
                       help="POST the session's notifications to URL (repeatable)")
    start.add_argument("--follow", action="store_true", help="print the iterations live until the session ends")
    start.add_argument("--script", metavar="NAME", help=argparse.SUPPRESS)  # the scripted model's selector

    listing = verb("list", cmd_list, "list the loop sessions")
    listing.add_argument("--status", choices=_STATUSES, help="only sessions with this status")

    show = verb("show", cmd_show, "a session and its iterations")
    show.add_argument("session_id", metavar="ID")

    pause = verb("pause", cmd_pause, "pause after the current iteration")
    pause.add_argument("session_id", metavar="ID")

    resume = verb("resume", cmd_resume, "resume a blocked or paused session")
    resume.add_argument("session_id", metavar="ID")
    resume.add_argument("--message", help="for the next iteration (the decision it asked for, …)")

    abort = verb("abort", cmd_abort, "stop a session now (the running turn's work is kept on a recovery commit)")
    abort.add_argument("session_id", metavar="ID")
    abort.add_argument("--reason", help="why (recorded with the abort)")

    record = verb("record", cmd_record, "write a stopped session's model replies as a scripted-model scenario "
                  "(replay it with `autarch model serve-scripted`); --json is ignored")
    record.add_argument("session_id", metavar="ID")
    record.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: standard output)")

    compare = verb("compare", cmd_compare, "check a stopped replay against a recording: the first event that "
                   "differs (exit 1), or that it is the same run")
    compare.add_argument("recording", metavar="RECORDING", help="the file `autarch pulse record` wrote")
    compare.add_argument("session_id", metavar="ID", help="the replayed session")
    fork = verb("fork", cmd_fork, "a new session from this one's history up to iteration K, on a branch cut from "
                "that iteration's commit; it goes on with iteration K+1 (the original is not changed)")
    fork.add_argument("session_id", metavar="ID")
    fork.add_argument("--at-iteration", required=True, type=_positive, metavar="K",
                      help="an ended iteration (before the session's last allowed one)")
    fork.add_argument("--branch", metavar="NAME", help="the fork's branch (default autarch/loop-<id prefix>)")
    fork.add_argument("--script", metavar="NAME", help=argparse.SUPPRESS)  # the scripted model's selector
