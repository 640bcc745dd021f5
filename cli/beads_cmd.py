"""``autarch beads …``: an epic's bead graph through the gateway — list, show, ranked ready work, and edits.

The epic is the workflow of a bead plan (its id, or a unique prefix of it). ``ready`` prints the ready beads
highest impact first with their score and a ``*`` on the critical path. Every verb takes ``--json`` to print
the gateway's answer as is. ``record`` writes a finished epic as a scripted-model scenario and ``compare`` checks
a replay of it (``cli/recording.py``).
"""

from __future__ import annotations

import argparse
from typing import Any

from .gateway_client import CliError, GatewayClient, print_json
from .recording import load_recording, print_comparison, record_epic, replay_of
from .render import printable
from .workflow_cmd import epic_verbs, write_recording

__all__ = ["bead_line", "ready_lines", "register"]

_STATUSES = ("open", "in_progress", "closed", "bounced")


def bead_line(bead: dict[str, Any]) -> str:
    """One line: id, status, who has it (attempt), its commit, its title (control characters escaped)."""
    return printable(_bead_line(bead))


def _bead_line(bead: dict[str, Any]) -> str:
    who = f" {bead['assignee']} (attempt {bead['attempt']})" if bead.get("assignee") else ""
    commit = f" {bead['commit'][:10]}" if bead.get("commit") else ""
    deps = [d["bead_id"] for d in bead.get("dependencies", []) if d.get("type", "blocks") == "blocks"]
    after = f"  after {', '.join(deps)}" if deps else ""
    return f"{bead['id']:<16} {bead['status']:<12}{who}{commit}  {bead['title']}{after}"


def show_lines(bead: dict[str, Any]) -> list[str]:
    """Every field worth reading, one line each, control characters escaped (what people typed is shown as is)."""
    return [printable(line) for line in _show_lines(bead)]


def _show_lines(bead: dict[str, Any]) -> list[str]:
    lines = [_bead_line(bead)]
    if bead.get("description"):
        lines.append(f"  {bead['description']}")
    for label, key in (("files", "files"), ("verify", "verify"), ("decisions", "decision_refs"),
                       ("learnings", "learning_refs")):
        if bead.get(key):
            lines.append(f"  {label}: {', '.join(bead[key])}")
    lines.append(f"  testing: {bead.get('testing_mode', 'standard')}, priority {bead.get('priority', 2)}")
    if bead.get("tdd_steps"):
        lines.append(f"  tdd: red `{bead['tdd_steps']['red']}`, green `{bead['tdd_steps']['green']}`")
    if bead.get("verification_evidence"):
        lines.append(f"  evidence: {bead['verification_evidence']}")
    for reason_key in ("bounce_reason", "close_reason"):
        if bead.get(reason_key):
            lines.append(f"  {reason_key.split('_')[0]}: {bead[reason_key]}")
    for conflict in bead.get("conflicts", []):
        held = f" (held by {conflict['holder']})" if conflict.get("holder") else ""
        lines.append(f"  attempt {conflict['attempt']}: {conflict['kind']} conflict on "
                     f"{', '.join(conflict['files'])}{held}")
    return lines


def ready_lines(ready: dict[str, Any]) -> list[str]:
    return [printable(line) for line in _ready_lines(ready)]


def _ready_lines(ready: dict[str, Any]) -> list[str]:
    if not ready.get("ready"):
        return ["no bead is ready"]
    lines = [f"{'':1} {'bead':<16} {'score':>6}  {'pagerank':>8} {'between':>7} {'blocks':>6} {'stale':>5} pri"]
    for r in ready["ready"]:
        mark = "*" if r["on_critical_path"] else " "
        lines.append(f"{mark} {r['bead_id']:<16} {r['score']:>6.3f}  {r['pagerank']:>8.3f} {r['betweenness']:>7.3f} "
                     f"{r['blocker_ratio']:>6.2f} {r['staleness']:>5.2f} {r['priority']:>3}  {r['title']}")
    if ready.get("critical_path"):
        lines.append(f"critical path: {' → '.join(ready['critical_path'])}")
    return lines


def _epic(client: GatewayClient, args: argparse.Namespace) -> str:
    return client.workflow_id(args.epic)


def cmd_list(client: GatewayClient, args: argparse.Namespace) -> int:
    listed = client.get("/api/beads", epic_id=_epic(client, args), status=args.status)
    if args.json:
        print_json(listed)
        return 0
    for bead in listed["beads"]:
        print(bead_line(bead))
    if listed.get("critical_path"):
        print(f"critical path: {' → '.join(listed['critical_path'])}")
    return 0


def cmd_show(client: GatewayClient, args: argparse.Namespace) -> int:
    bead = client.get(f"/api/beads/{_epic(client, args)}/{args.bead}")
    if args.json:
        print_json(bead)
    else:
        print("\n".join(show_lines(bead)))
    return 0


def cmd_ready(client: GatewayClient, args: argparse.Namespace) -> int:
    ready = client.get("/api/beads/ready", epic_id=_epic(client, args))
    if args.json:
        print_json(ready)
    else:
        print("\n".join(ready_lines(ready)))
    return 0


def cmd_create(client: GatewayClient, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"epic_id": _epic(client, args), "title": args.title, "files": args.file or [],
                            "verify": args.verify or [], "priority": args.priority,
                            "dependencies": [{"bead_id": d, "type": "blocks"} for d in args.depends_on or []]}
    if args.id:
        body["id"] = args.id
    if args.description:
        body["description"] = args.description
    if args.tdd_red or args.tdd_green:
        if not (args.tdd_red and args.tdd_green):
            # One step without the other is no red-green loop; the gateway would only say "too short".
            raise CliError("--tdd-red and --tdd-green go together (a red check, then a green one)", exit_code=2)
        body["testing_mode"] = "tdd-required"
        body["tdd_steps"] = {"red": args.tdd_red, "green": args.tdd_green}
    bead = client.post("/api/beads", body)
    if args.json:
        print_json(bead)
    else:
        print("\n".join(show_lines(bead)))
    return 0


def cmd_dep(client: GatewayClient, args: argparse.Namespace) -> int:
    bead = client.post(f"/api/beads/{_epic(client, args)}/{args.bead}/dependencies",
                       {"depends_on": args.on, "type": args.type})
    if args.json:
        print_json(bead)
    else:
        print(bead_line(bead))
    return 0


def cmd_close(client: GatewayClient, args: argparse.Namespace) -> int:
    bead = client.post(f"/api/beads/{_epic(client, args)}/{args.bead}/close", {"reason": args.reason})
    if args.json:
        print_json(bead)
    else:
        print(bead_line(bead))
    return 0


def cmd_record(client: GatewayClient, args: argparse.Namespace) -> int:
    """Print (or write) the scenario that replays the finished epic: its workflow's sessions and every worker's."""
    write_recording(record_epic(client, _epic(client, args)), args.output)
    return 0


def cmd_compare(client: GatewayClient, args: argparse.Namespace) -> int:
    """Check a replayed epic against a recording; name the first event that differs (exit 1)."""
    recording = load_recording(args.recording, "swarm")
    # Not ``epic=True``: a replay that diverged may have halted before its swarm started, and is compared too.
    return print_comparison(recording, replay_of(client, _epic(client, args), halted_too=True), as_json=args.json)


def _priority(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 4:
        raise argparse.ArgumentTypeError("a priority is 0 (critical) … 4 (backlog)")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    verb = epic_verbs(
        sub, "beads", help_text="an epic's beads: list, show, ranked ready work, create, depend, close, record and "
                                "compare a replay (through the gateway)",
        description="The bead graph of a bead plan's workflow (the epic id is the workflow id; a unique prefix "
                    "will do).",
    )

    listing = verb("list", cmd_list, "every bead of the epic")
    listing.add_argument("--status", choices=_STATUSES, help="only beads with this status")
    verb("show", cmd_show, "one bead with all its fields").add_argument("bead", metavar="BEAD")
    verb("ready", cmd_ready, "the ready beads, highest impact first (* = on the critical path)")
    create = verb("create", cmd_create, "add a bead (bounced until it has files and verify commands)")
    create.add_argument("--title", required=True)
    create.add_argument("--id", help="default: the next free u<n>")
    create.add_argument("--description")
    create.add_argument("--file", action="append", metavar="PATH", help="a file in its scope (repeatable)")
    create.add_argument("--verify", action="append", metavar="CMD", help="a verification command (repeatable)")
    create.add_argument("--depends-on", action="append", metavar="BEAD", help="a bead that blocks it (repeatable)")
    create.add_argument("--priority", type=_priority, default=2, help="0 (critical) … 4 (backlog); default 2")
    create.add_argument("--tdd-red", metavar="CMD", help="tdd-required: the command that must fail first")
    create.add_argument("--tdd-green", metavar="CMD", help="tdd-required: the command that must then pass")
    dep = verb("dep", cmd_dep, "make BEAD depend on another bead")
    dep.add_argument("bead", metavar="BEAD")
    dep.add_argument("--on", required=True, metavar="OTHER", help="the bead it depends on")
    dep.add_argument("--type", choices=("blocks", "parent-child"), default="blocks")
    close = verb("close", cmd_close, "close a bead by hand (done elsewhere, or dropped)")
    close.add_argument("bead", metavar="BEAD")
    close.add_argument("--reason", required=True)
    record = verb("record", cmd_record, "write a finished epic's model replies (its workflow's sessions and one "
                                        "script per bead attempt) as a scripted-model scenario, with what each "
                                        "bead did (replay it with `autarch model serve-scripted`)")
    record.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: standard output)")
    compare = verb("compare", cmd_compare, "check a replayed epic against a recording: the first event that "
                                           "differs (exit 1), or that it is the same run")
    compare.add_argument("recording", metavar="RECORDING", help="the file `autarch beads record` wrote")
