"""``autarch workflow …``: create, list, inspect and steer workflows through the gateway's HTTP API.

Every command takes ``--url``, ``--token-file`` and ``--data-dir`` (see :mod:`.gateway_client`). A
workflow id may be shortened to a unique prefix (``99f31dc9``). Errors are printed as
``autarch: <code>: <message>`` with exit code 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .gateway_client import (
    CliError,
    GatewayClient,
    GatewayError,
    add_connection_arguments,
    connection_from_args,
    print_json,
)
from .recording import load_recording, print_comparison, record_workflow, replay_of
from .render import approval_hint, card_summary, comment_summary, halt_hint, printable

__all__ = ["bead_rows", "describe", "epic_get", "epic_verbs", "gateway_command", "is_bead_plan", "register",
           "show_lines", "write_recording"]

Action = Callable[[GatewayClient, argparse.Namespace], int | None]


def gateway_command(action: Action) -> Callable[[argparse.Namespace], int]:
    """A handler running ``action`` with a client of the gateway; a :class:`CliError` goes to stderr."""

    def handler(args: argparse.Namespace) -> int:
        try:
            with GatewayClient(connection_from_args(args)) as client:
                return int(action(client, args) or 0)
        except CliError as exc:
            print(f"autarch: {exc.message}", file=sys.stderr)
            return exc.exit_code

    return handler


def epic_verbs(sub: argparse._SubParsersAction, name: str, *, help_text: str,
               description: str) -> Callable[[str, Action, str], argparse.ArgumentParser]:
    """Add ``autarch <name>`` and return how to add its verbs, each of which takes an epic, ``--json`` and the
    gateway connection arguments (``autarch beads …``, ``autarch mail …``)."""
    group = sub.add_parser(name, help=help_text, description=description)
    verbs = group.add_subparsers(dest=f"{name}_command", metavar="VERB")
    verbs.required = True

    def verb(verb_name: str, action: Action, verb_help: str) -> argparse.ArgumentParser:
        parser = verbs.add_parser(verb_name, help=verb_help, description=verb_help)
        add_connection_arguments(parser)
        parser.add_argument("--json", action="store_true", help="print the gateway's JSON answer")
        parser.add_argument("epic", metavar="EPIC", help="the workflow id (or a unique prefix)")
        parser.set_defaults(handler=gateway_command(action))
        return parser

    return verb


def _status(view: dict[str, Any]) -> str:
    status = view.get("status") or ("awaiting_approval" if view.get("awaiting_approval") else "active")
    return status.replace("_", " ")


def describe(view: dict[str, Any]) -> str:
    """One line: the workflow's id, stage and status (and what it waits for)."""
    line = f"{view['id']}  stage {view['stage']}, {_status(view)}"
    halt = view.get("halt")
    if halt:
        reason = halt.get("reason", "")
        line += f" ({reason}): {halt.get('message', '')}\n  → {halt_hint(view['id'], reason)}"
    elif view.get("awaiting_approval"):
        line += f"\n  → {approval_hint(view['id'], view['stage'])}"
    return line


# --- new, list, show ------------------------------------------------------------------------------------


def cmd_new(client: GatewayClient, args: argparse.Namespace) -> int:
    repo = Path(args.repo).expanduser().resolve()
    body: dict[str, Any] = {"title": args.title, "request": " ".join(args.request), "repo": str(repo)}
    for key in ("base_branch", "branch", "script"):
        if getattr(args, key):
            body[key] = getattr(args, key)
    view = client.post("/api/workflows", body)
    if args.json:
        print_json(view)
    else:
        print(f"{view['id']}  {view['stage']}")
        print(f"  follow it:  autarch watch {view['id']}")
    return 0


LIST_PAGE = 500
"""Workflows asked for per request: a page the bus carries whatever the workflows hold."""


def cmd_list(client: GatewayClient, args: argparse.Namespace) -> int:
    listed = client.get("/api/workflows", limit=LIST_PAGE)
    while len(listed["items"]) < listed["total"]:  # the rest, a page at a time
        page = client.get("/api/workflows", limit=LIST_PAGE, offset=len(listed["items"]))
        if not page["items"]:
            break
        listed["items"] += page["items"]
    if args.json:
        print_json(listed)
        return 0
    items = listed.get("items", [])
    if not items:
        print("no workflows")
        return 0
    rows = [(w["id"], w["stage"], _status(w), w.get("updated_at", "")[:19].replace("T", " "), printable(w["title"]))
            for w in items]
    header = ("ID", "STAGE", "STATUS", "UPDATED (UTC)", "TITLE")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + str(row[4]))
    return 0


def _pulse_rows(artifacts: dict[str, Any]) -> list[str]:
    runs = artifacts.get("pulse_runs") or []
    if runs:
        rows = []
        for run in runs:
            commit = str(run.get("checkpoint_commit") or "")[:8]
            extra = run.get("description") or run.get("failure_reason") or run.get("title") or ""
            flag = " (recovery checkpoint)" if run.get("is_recovery_checkpoint") else ""
            if run.get("has_unresolved_issues"):
                flag += f" ({len(run.get('unresolved_issues') or [])} unresolved issues)"
            if run.get("fix_round"):
                flag += f" (fix round {run['fix_round']})"
            rows.append(f"{run['id']:<14} {run.get('status', '?'):<10} {commit or '-':<8}  {extra}{flag}")
        return rows
    # Before execution starts only the plan's pulses exist.
    return [f"{p.get('id', '?'):<14} {'planned':<10} {'-':<8}  {p.get('title', '')}"
            for p in artifacts.get("pulses") or []]


def is_bead_plan(artifacts: dict[str, Any]) -> bool:
    """Whether the workflow's plan is a bead plan (a pulse carries ``verify``): only then may it have an epic."""
    plan: dict[str, Any] = artifacts["plan"] if isinstance(artifacts.get("plan"), dict) else {}
    pulses = [*(artifacts.get("pulses") or []), *(plan.get("pulses") or [])]
    return any(isinstance(p, dict) and p.get("verify") for p in pulses)


def epic_get(client: GatewayClient, path: str, workflow_id: str) -> dict[str, Any] | None:
    """``GET path?epic_id=workflow_id`` (``/api/beads``, ``/api/beads/swarm``), or None when there is no epic.

    A workflow whose plan is not a bead plan (or not approved yet) has none: the gateway answers ``no_epic``
    or 404, and a gateway without the bead routes answers 404 to every workflow.
    """
    try:
        answer = client.get(path, epic_id=workflow_id)
    except GatewayError as exc:
        if exc.status == 404 or exc.code == "no_epic":
            return None
        raise
    return answer if isinstance(answer, dict) else None


def bead_rows(beads: list[dict[str, Any]]) -> list[str]:
    """One row per bead (a BeadView): id, status, assignee, attempt, commit, title."""
    if not beads:
        return []
    id_width = max(len(str(b.get("id", "?"))) for b in beads)
    who_width = max(len(str(b.get("assignee") or "-")) for b in beads)
    rows = []
    for bead in beads:
        commit = str(bead.get("commit") or "")[:8] or "-"
        status = str(bead.get("status", "?")).replace("_", " ")
        why = bead.get("bounce_reason") if bead.get("status") == "bounced" else None
        title = str(bead.get("title", "")) + (f" ({why})" if why else "")
        rows.append(f"{bead.get('id', '?'):<{id_width}}  {status:<11} {bead.get('assignee') or '-':<{who_width}}  "
                    f"attempt {bead.get('attempt', 0)}  {commit:<8}  {title}")
    return rows


def show_lines(view: dict[str, Any], artifacts: dict[str, Any], beads: dict[str, Any] | None = None) -> list[str]:
    """What ``workflow show`` prints for a workflow, its artifacts and its epic's beads (a BeadList), if any."""
    lines = [f"{view['title']}  ({view['id']})"]

    def add(label: str, text: Any) -> None:
        lines.append(f"  {label:<10}{text}")

    add("request", " ".join(str(view.get("request", "")).split())[:200])
    branch = f" → branch {view['branch']}" if view.get("branch") else ""
    add("repo", f"{view['repo']} (base {view['base_branch']}{branch})")
    add("stage", f"{view['stage']}, {_status(view)}" + (f", path {view['path']}" if view.get("path") else ""))
    if view.get("forked_from"):
        add("forked", f"from {view['forked_from']} at its event {view.get('forked_at')}")
    halt = view.get("halt")
    if halt:
        pulse = f" in {halt['pulse_id']}" if halt.get("pulse_id") else ""
        add("halted", f"{halt.get('reason')}{pulse}: {halt.get('message', '')}")
        for n, q in enumerate((halt.get("details") or {}).get("questions") or [], 1):
            options = f" [{' / '.join(map(str, q.get('options') or []))}]" if q.get("options") else ""
            add("", f"  {n}. {q.get('prompt', '')}{options}")
        add("", f"→ {halt_hint(view['id'], halt.get('reason', ''))}")
    elif view.get("awaiting_approval"):
        add("waiting", "your approval")
        add("", f"→ {approval_hint(view['id'], view['stage'])}")
    if view.get("last_error"):
        add("error", view["last_error"])
    if view.get("last_feedback"):
        add("feedback", view["last_feedback"])
    rows = bead_rows([b for b in (beads or {}).get("beads") or [] if isinstance(b, dict)])
    # A swarm runs the plan's pulses as beads: their planned rows would only repeat the beads' rows.
    pulses = _pulse_rows(artifacts) if not rows or artifacts.get("pulse_runs") else []
    if pulses:
        add("pulses", pulses[0])
        for row in pulses[1:]:
            add("", row)
    if rows:
        add("beads", rows[0])
        for row in rows[1:]:
            add("", row)
        critical = (beads or {}).get("critical_path") or []
        if critical:
            add("", f"critical path: {' → '.join(map(str, critical))}")
    preflight = artifacts.get("preflight")
    if preflight:
        text = str(preflight.get("status"))
        if preflight.get("summary"):
            text += f": {preflight['summary']}"
        if preflight.get("error"):
            text += f" ({preflight['error']})"
        add("preflight", text)
    for stage, key in (("scoping", "scope"), ("research", "research"), ("planning", "plan")):
        if artifacts.get(key):
            add(key, card_summary(stage, artifacts[key]))
    review = artifacts.get("review")
    if review:
        comments = [c for c in review.get("comments") or [] if isinstance(c, dict)]
        text = card_summary("review", review) if review.get("recommendation") else "in progress"
        add("review", f"{text} ({len(comments)} comment{'s' if len(comments) != 1 else ''})")
        for comment in comments:
            add("", f"  {str(comment.get('comment_id', '?'))[:8]} {comment_summary(comment)}")
    for fix_round in artifacts.get("fix_rounds") or []:
        fixed = ", ".join(f"{p.get('pulse_id')} {p.get('file_path') or '(no file)'}" for p in fix_round.get("pulses")
                           or [])
        sent = len(fix_round.get("comment_ids") or [])
        add("fixes" if fix_round is artifacts["fix_rounds"][0] else "",
            printable(f"round {fix_round.get('round')}: {sent} comment{'s' if sent != 1 else ''} sent back → "
                      f"{fixed}"))
    counts = [f"{view.get(k, 0)} {k.removesuffix('_count').replace('_', ' ')}" for k in ("notes_count",
                                                                                          "baselines_count")]
    add("recorded", ", ".join(counts))
    return lines


def cmd_show(client: GatewayClient, args: argparse.Namespace) -> int:
    wf = client.workflow_id(args.workflow_id)
    view = client.get(f"/api/workflows/{wf}")
    artifacts = client.get(f"/api/workflows/{wf}/artifacts")
    # Asked only of a bead plan's workflow: any other has no epic, and would cost a request to say so.
    beads = epic_get(client, "/api/beads", wf) if is_bead_plan(artifacts) else None
    if args.json:
        print_json({"workflow": view, "artifacts": artifacts, **({"beads": beads} if beads is not None else {})})
    else:
        print("\n".join(show_lines(view, artifacts, beads)))
    return 0


def cmd_diff(client: GatewayClient, args: argparse.Namespace) -> int:
    """Print the workflow branch's diff against its base (or one pulse's), every page of it."""
    wf = client.workflow_id(args.workflow_id)
    route = f"/api/workflows/{wf}/pulses/{args.pulse}/diff" if args.pulse else f"/api/workflows/{wf}/diff"
    offset: int | None = 0
    while offset is not None:
        # --stat needs only the ref, which every page carries: ask for the smallest page.
        page = client.get(route, offset=offset, limit=1) if args.stat else client.get(route, offset=offset)
        if args.stat and offset == 0:
            ref = page["ref"]
            print(f"{ref['from_commit'][:8]}..{ref['to_commit'][:8]}: {ref['files_changed']} files changed, "
                  f"+{ref['insertions']} -{ref['deletions']}")
            return 0
        sys.stdout.write(page["diff"])
        offset = page.get("next_offset")
    return 0


# --- approvals and controls -----------------------------------------------------------------------------


def _post_and_describe(client: GatewayClient, args: argparse.Namespace, route: str, body: Any = None) -> int:
    wf = client.workflow_id(args.workflow_id)
    view = client.post(f"/api/workflows/{wf}/{route}", body)
    if getattr(args, "json", False):
        print_json(view)
    else:
        print(describe(view))
    return 0


def cmd_fork(client: GatewayClient, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"at": args.at}
    for key in ("branch", "script"):
        if getattr(args, key):
            body[key] = getattr(args, key)
    wf = client.workflow_id(args.workflow_id)
    view = client.post(f"/api/workflows/{wf}/fork", body)
    if args.json:
        print_json(view)
    else:
        print(f"{describe(view)}\n  forked from {wf} at its event {args.at}; follow it:  autarch watch {view['id']}")
    return 0


def cmd_approve(client: GatewayClient, args: argparse.Namespace) -> int:
    return _post_and_describe(client, args, "approve", {"path": args.path} if args.path else None)


FIX_FEEDBACK = "Fix the review's comments."
"""The feedback of ``request-changes --fix`` given no words of its own."""


def _comment_ids(client: GatewayClient, workflow_id: str, given: list[str]) -> list[str]:
    """The review card's comment ids that ``given`` names, each in full or by a unique prefix (as ``show`` prints
    them); an id matching none (or several) is sent as given, for the gateway to refuse with its reason."""
    review = client.get(f"/api/workflows/{workflow_id}/artifacts").get("review") or {}
    known = [str(c.get("comment_id")) for c in review.get("comments") or [] if isinstance(c, dict)]
    chosen = []
    for prefix in given:
        matches = [c for c in known if c.startswith(prefix.lower())]
        chosen.append(matches[0] if len(matches) == 1 else prefix)
    return chosen


def cmd_request_changes(client: GatewayClient, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"feedback": " ".join(args.feedback) or FIX_FEEDBACK}
    if args.comment:
        body["fix"] = _comment_ids(client, client.workflow_id(args.workflow_id), args.comment)
    elif args.fix:
        body["fix"] = True
    return _post_and_describe(client, args, "request-changes", body)


def _feedback_or_fix(parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int]
                     ) -> Callable[[argparse.Namespace], int]:
    # Checked before the gateway is asked anything: a usage error, like a missing argument.
    def run(args: argparse.Namespace) -> int:
        if not args.feedback and not args.fix and not args.comment:
            parser.error("FEEDBACK is required, unless --fix or --comment sends the work back to be fixed")
        return handler(args)

    return run


def cmd_stop(client: GatewayClient, args: argparse.Namespace) -> int:
    return _post_and_describe(client, args, "stop", {"reason": args.reason} if args.reason else None)


def cmd_resume(client: GatewayClient, args: argparse.Namespace) -> int:
    return _post_and_describe(client, args, "resume", {"message": args.message} if args.message else None)


def cmd_approve_extension(client: GatewayClient, args: argparse.Namespace) -> int:
    return _post_and_describe(client, args, "extension/approve", {"message": args.message} if args.message else None)


def cmd_answer(client: GatewayClient, args: argparse.Namespace) -> int:
    return _post_and_describe(client, args, "answers", {"answers": list(args.answers)})


# --- the parser -----------------------------------------------------------------------------------------


def write_recording(document: dict[str, Any], output: str | None) -> None:
    """``record``'s output: the scenario on standard output, or in ``output`` with a line on stderr."""
    text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    if not output:
        sys.stdout.write(text)
        return
    Path(output).write_text(text)
    recording = document["recording"]
    print(f"recorded {len(document['scripts'])} scripts, {len(recording['events'])} {recording['kind']} events "
          f"and {len(recording['commits'])} commits to {output}", file=sys.stderr)


def cmd_record(client: GatewayClient, args: argparse.Namespace) -> int:
    """Print (or write) the scenario that replays the finished workflow's model replies."""
    write_recording(record_workflow(client, client.workflow_id(args.workflow_id)), args.output)
    return 0


def cmd_compare(client: GatewayClient, args: argparse.Namespace) -> int:
    """Check a finished replay against a recording; name the first event that differs (exit 1)."""
    recording = load_recording(args.recording, "workflow", "swarm")
    replay = replay_of(client, client.workflow_id(args.workflow_id), halted_too=True)
    return print_comparison(recording, replay, as_json=args.json)


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def register(sub: argparse._SubParsersAction) -> None:
    workflow = sub.add_parser(
        "workflow", help="create, inspect, approve and steer workflows (through the gateway)",
        description="Talk to the gateway `autarch up` runs. A workflow id may be shortened to a unique prefix.",
    )
    verbs = workflow.add_subparsers(dest="workflow_command", metavar="VERB")
    verbs.required = True

    def verb(name: str, action: Action, help_text: str, *, json_flag: bool = False) -> argparse.ArgumentParser:
        parser = verbs.add_parser(name, help=help_text, description=help_text)
        add_connection_arguments(parser)
        if json_flag:
            parser.add_argument("--json", action="store_true", help="print the gateway's JSON answer")
        parser.set_defaults(handler=gateway_command(action))
        return parser

    new = verb("new", cmd_new, "start a workflow for a request", json_flag=True)
    new.add_argument("--repo", required=True, help="the local git repository to change")
    new.add_argument("--title", required=True, type=_nonempty, help="a short title")
    new.add_argument("--base-branch", metavar="B", help="branch the work starts from (default main)")
    new.add_argument("--branch", metavar="NAME", help="workflow branch to create (default autarch/<id prefix>)")
    new.add_argument("--script", metavar="NAME", help=argparse.SUPPRESS)  # the scripted model's scenario selector
    new.add_argument("request", nargs="+", metavar="REQUEST", help="what to do (the words are joined)")

    verb("list", cmd_list, "list the workflows", json_flag=True)

    show = verb("show", cmd_show, "a workflow's state, halt, pulses (or beads) and cards", json_flag=True)
    show.add_argument("workflow_id", metavar="ID")

    diff = verb("diff", cmd_diff, "the workflow branch's diff against its base, or one pulse's (--pulse)")
    diff.add_argument("workflow_id", metavar="ID")
    diff.add_argument("--pulse", metavar="PULSE_ID", help="one pulse run's diff (pulse-1, pulse-1-a2, …)")
    diff.add_argument("--stat", action="store_true", help="only the commits and the counts")

    approve = verb("approve", cmd_approve, "approve the card awaiting approval", json_flag=True)
    approve.add_argument("workflow_id", metavar="ID")
    approve.add_argument("--path", choices=("quick", "full"), help="at scope approval: the path to take")

    changes = verb("request-changes", cmd_request_changes,
                   "send the awaiting card back with feedback; at review, --fix sends the work back to be fixed",
                   json_flag=True)
    changes.add_argument("workflow_id", metavar="ID")
    changes.add_argument("feedback", nargs="*", metavar="FEEDBACK",
                         help=f"what to change (the words are joined); with --fix default {FIX_FEEDBACK!r}")
    changes.add_argument("--fix", action="store_true",
                         help="at review: fix pulses fix every comment of the review card, then it reviews again")
    changes.add_argument("--comment", action="append", metavar="COMMENT_ID", default=[],
                         help="at review: fix only this comment (its id or a unique prefix, as `show` prints it); "
                              "repeat for more; implies --fix")
    changes.set_defaults(handler=_feedback_or_fix(changes, gateway_command(cmd_request_changes)))

    stop = verb("stop", cmd_stop, "stop the running agent; the workflow halts", json_flag=True)
    stop.add_argument("workflow_id", metavar="ID")
    stop.add_argument("--reason", help="why (recorded with the halt)")

    resume = verb("resume", cmd_resume, "continue a halted workflow", json_flag=True)
    resume.add_argument("workflow_id", metavar="ID")
    resume.add_argument("--message", help="guidance for the agent that continues")

    extension = verb("approve-extension", cmd_approve_extension, "let the agent that asked for more time go on",
                     json_flag=True)
    extension.add_argument("workflow_id", metavar="ID")
    extension.add_argument("--message", help="guidance for the agent")

    record = verb("record", cmd_record, "write a finished workflow's model replies as a scripted-model scenario "
                  "(replay it with `autarch model serve-scripted`; a swarm epic's workers too, as `autarch beads "
                  "record` does)")
    record.add_argument("workflow_id", metavar="ID")
    record.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: standard output)")

    compare = verb("compare", cmd_compare, "check a finished replay against a recording: the first event that "
                   "differs (exit 1), or that it is the same run", json_flag=True)
    compare.add_argument("recording", metavar="RECORDING", help="the file `autarch workflow record` wrote")
    compare.add_argument("workflow_id", metavar="ID", help="the replayed workflow")

    fork = verb("fork", cmd_fork, "make a new workflow from this one's first N events and carry it on from there "
                "(the original is not changed)", json_flag=True)
    fork.add_argument("workflow_id", metavar="ID")
    fork.add_argument("--at", type=int, required=True, metavar="N",
                      help="how many of the original's events the fork starts from (1 … its version)")
    fork.add_argument("--branch", metavar="NAME", help="the fork's branch (default autarch/<id prefix>)")
    fork.add_argument("--script", metavar="NAME", help=argparse.SUPPRESS)  # the scripted model's scenario selector
    answer = verb("answer", cmd_answer, "answer the agent's questions, one argument per question, in order",
                  json_flag=True)
    answer.add_argument("workflow_id", metavar="ID")
    answer.add_argument("answers", nargs="+", type=_nonempty, metavar="ANSWER")
