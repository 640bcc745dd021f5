"""``autarch demo``: a whole workflow, offline, on a sample repository, in well under a minute.

It creates a small git repository from the bundled ``demo`` scenario's files, starts the scripted model
(in this process) and the real system (``autarch up`` as a subprocess with its own data directory and free
ports), creates the workflow over HTTP, follows its events over SSE printing a line per interesting event,
approves every card (or asks, with ``--interactive``), and ends by showing the workflow branch, one commit per
pulse, and the review's verdict. The system is stopped in every case (success, failure, Ctrl-C).

``autarch demo --swarm`` runs the same flow on the ``swarm`` scenario, whose plan is a bead plan: execution
is a swarm of three workers (see :mod:`.demo_swarm`), described to :func:`run_demo` by a :class:`DemoKind`.

The system is a :class:`~.local_system.LocalSystem`; every HTTP call goes through the commands' client
(:class:`~.gateway_client.GatewayClient`) and the events are followed as ``autarch watch`` follows them
(:class:`~.follow.WorkflowEvents`). The helpers (:func:`make_sample_repo`, :func:`create_workflow`,
:func:`drive`) are also used by ``tests/benchmarks/workflows.py``, which runs many demo workflows at once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .demo_kit import (
    BRANCH,
    REQUEST,
    SCENARIO,
    TITLE,
    DemoError,
    DemoKind,
    check_target,
    git_in,
    make_sample_repo,
)
from .gateway_client import CliError, GatewayClient

__all__ = [
    "BRANCH",
    "REQUEST",
    "SERVICES",
    "TITLE",
    "WORKFLOW",
    "Decision",
    "DemoError",
    "DemoKind",
    "Outcome",
    "create_workflow",
    "demo_scenario",
    "drive",
    "make_sample_repo",
    "register",
]

SERVICES = ("orchestrator", "tools", "git", "agent_runner")
"""What the demo workflow needs (the indexer is not used by the demo scenario)."""
CARD_OF_STAGE = {"scoping": "scope", "research": "research", "planning": "plan", "review": "review"}
"""The artifacts key of each stage's card."""
_BLOCK_TOOLS = {"scoping": "submit_scope", "research": "submit_research", "plan": "submit_plan",
                "review": "complete_review"}
_REVISED_FIELD = {"submit_scope": "title", "submit_research": "summary", "submit_plan": "approachSummary",
                  "complete_review": "summary"}
REVISIONS = 3
"""Change requests the scripted model answers per card in ``--interactive`` mode."""


WORKFLOW = DemoKind()
"""``autarch demo``: the ``demo`` scenario, its pulses one after another."""


# --- the sample repository ------------------------------------------------------------------------------


def demo_scenario(*, revisable: bool = False, path: Path | None = None, name: str = SCENARIO) -> dict[str, Any]:
    """The bundled scenario ``name`` (default ``demo``; or the JSON scenario at ``path``) as a dict.

    With ``revisable``, each card's agent answers up to :data:`REVISIONS` change requests by submitting its card
    again (marked "revised"), so ``--interactive`` can send cards back; the bundled scenario answers none.
    """
    from autarch.services.scripted_model.scenario import ScenarioError, bundled_scenario_path, parse_scenario

    source = path or bundled_scenario_path(name)
    try:
        scenario: dict[str, Any] = json.loads(source.read_text())
        parse_scenario(scenario, source=source.name)
    except (OSError, ValueError, ScenarioError) as exc:
        raise DemoError(f"cannot use scenario {source}: {exc}", code=2) from None
    if not revisable:
        return scenario
    for role, tool in _BLOCK_TOOLS.items():
        steps = scenario["scripts"].get(role)
        at = max((i for i, step in enumerate(steps or []) if isinstance(step, dict)
                  and any(b.get("type") == "tool_use" and b.get("name") == tool for b in step["content"])),
                 default=None)
        if steps is None or at is None:
            continue
        block = next(b for b in steps[at]["content"] if b.get("name") == tool)
        revisions = []
        for n in range(1, REVISIONS + 1):
            again = json.loads(json.dumps(block))
            key = _REVISED_FIELD[tool]
            again["input"][key] = f"{again['input'].get(key, '')} (revised after your feedback, #{n})".strip()
            revisions.append({"content": [{"type": "text", "text": "Revised as you asked."}, again]})
        scenario["scripts"][role] = [*steps[: at + 1], *revisions, steps[-1] if isinstance(steps[-1], str) else "Done."]
    return scenario


# --- driving one workflow -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What to do with a card awaiting approval: ``approve``, ``changes`` (with ``feedback``) or ``quit``."""

    action: str
    feedback: str = ""


APPROVE = Decision("approve")


@dataclass
class Outcome:
    """How the workflow ended (for the demo: ``completed`` is success, anything else a failure)."""

    workflow_id: str
    status: str
    """``completed``, ``abandoned``, ``halted``, ``quit`` or ``timeout``."""
    message: str = ""
    events: int = 0
    turns: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


def _time_of(event: Mapping[str, Any]) -> str:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(event.get("occurred_at")).replace("Z", "+00:00")).astimezone().strftime(
            "%H:%M:%S")
    except ValueError:
        return time.strftime("%H:%M:%S")


_HIDDEN = frozenset({"workflow:session_assigned", "session:started", "session:completed"})
"""Events the demo does not print (the step and turn lines already say it)."""


def create_workflow(client: GatewayClient, repo: Path, *, title: str = TITLE, request: str = REQUEST,
                    branch: str = BRANCH) -> str:
    """Create the demo's workflow on ``repo``; its id."""
    body = {"title": title, "request": request, "repo": str(repo), "branch": branch}
    return str(client.post("/api/workflows", body)["id"])


READ_TIMEOUT = 30.0
"""Seconds of silence before the demo's event stream counts as dead: generous, as many demo workflows may share
a loaded machine (the workflows benchmark), and a reconnection resumes where the stream broke anyway."""


def drive(
    client: GatewayClient,
    workflow_id: str,
    *,
    decide: Callable[[str, Mapping[str, Any]], Decision] | None = None,
    out: Callable[[str], None] | None = None,
    timeout: float = 300,
    alive: Callable[[], bool] | None = None,
    on_event: Callable[[Mapping[str, Any], float], None] | None = None,
) -> Outcome:
    """Follow ``workflow_id``'s events from its start until it completes, is abandoned or halts.

    Each card awaiting approval goes to ``decide(stage, approval_needed event)`` (default: approve); ``out``
    gets a readable line per interesting event; ``on_event(event, received_at)`` sees every event (wall-clock
    receive time). ``timeout`` counts seconds spent waiting on the system, not on ``decide``. A dropped stream
    is resumed after the last event seen (for up to 30 s) while ``alive()`` says the system runs.
    """
    from .follow import StreamLost, WorkflowEvents
    from .render import SseComment, Watch, card_summary

    decide = decide or (lambda _stage, _event: APPROVE)
    say = out or (lambda _line: None)
    watch = Watch()
    outcome = Outcome(workflow_id, "timeout", f"no end within {timeout:g}s")
    deadline = time.monotonic() + timeout
    running: set[str] = set()
    """Sessions whose turn started and has not completed."""
    ended: tuple[str, str] | None = None

    def finish(status: str, message: str) -> Outcome:
        outcome.status, outcome.message = status, message
        outcome.turns, outcome.tokens, outcome.cost_usd = watch.turns, watch.tokens, watch.cost_usd
        return outcome

    with WorkflowEvents(client, workflow_id, since=0, reconnect_for=30, read_timeout=READ_TIMEOUT) as events:
        for item in events:
            if time.monotonic() > deadline:
                break
            if isinstance(item, StreamLost):
                if alive is not None and not alive():
                    raise DemoError(f"the system stopped while the workflow ran ({item.problem})")
                continue
            if isinstance(item, SseComment):
                continue
            received = time.time()
            event, kind = item, item["type"]
            outcome.events += 1
            if on_event is not None:
                on_event(event, received)
            if kind == "workflow:approval_needed":
                watch.feed(event)  # not printed (the line below says more), but the plan card sets the pulse count
                stage = str(event.get("stage", ""))
                say(f"{_time_of(event)}  APPROVAL NEEDED — {card_summary(stage, event.get('artifact') or {})}")
                asked = time.monotonic()
                decision = decide(stage, event)
                deadline += time.monotonic() - asked
                if decision.action == "quit":
                    return finish("quit", f"you quit at the {stage} card")
                if decision.action == "changes":
                    client.post(f"/api/workflows/{workflow_id}/request-changes", {"feedback": decision.feedback})
                    say(f"{'':8}  → changes requested: {decision.feedback}")
                else:
                    client.post(f"/api/workflows/{workflow_id}/approve")
                    say(f"{'':8}  → approved")
                continue
            if kind == "workflow:halted":
                reason, text = event.get("reason", "?"), event.get("message", "")
                say(f"{_time_of(event)}  HALTED ({reason}): {text}")
                return finish("halted", f"the workflow halted ({reason}): {text}")
            line = watch.feed(event)
            if line is not None and kind not in _HIDDEN:
                # Hints naming `autarch workflow …` commands do not apply: the demo answers itself.
                say("\n".join(part for part in line.split("\n") if not part.strip().startswith("→")))
            if kind == "turn:started":
                running.add(str(event.get("session_id")))
            elif kind == "turn:completed":
                running.discard(str(event.get("session_id")))
            if kind == "workflow:abandoned":
                ended = ("abandoned", f"the workflow was abandoned: {event.get('reason', '')}")
            elif kind == "workflow:completed":
                ended = ("completed", "")
            if ended is not None:
                # The last agent's turn often completes just after the stage change: wait briefly for it, so
                # the totals count it.
                if not running:
                    return finish(*ended)
                deadline = min(deadline, time.monotonic() + 1.5)
    return finish(*ended) if ended is not None else finish("timeout", outcome.message)


# --- the interactive prompt -----------------------------------------------------------------------------


_ITEM_KEYS = ("id", "path", "file_path", "category", "title", "issue", "purpose", "description")
"""The fields that name an item of a card's list (a pulse, a key file, a pattern), in order of preference."""


def _card_lines(value: Any, indent: str = "    ", width: int = 110) -> list[str]:
    """A card as short indented lines: ``key: value``, lists as ``- item``."""
    from .render import short_input

    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if item in (None, [], {}, ""):
                continue
            if isinstance(item, list | dict):
                lines.append(f"{indent}{key}:")
                lines.extend(_card_lines(item, indent + "  ", width))
            else:
                wrapped = textwrap.wrap(" ".join(str(item).split()), width=width, initial_indent=f"{indent}{key}: ",
                                        subsequent_indent=indent + "  ") or [f"{indent}{key}:"]
                lines.extend(wrapped[:6] + ([f"{indent}  …"] if len(wrapped) > 6 else []))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping):
                named = [str(item[k]) for k in _ITEM_KEYS if item.get(k) not in (None, "")][:2]
                shown = ": ".join(named) if named else short_input(item, width)
                lines.append(f"{indent}- {_one_line(shown, width - len(indent))}")
            else:
                lines.append(f"{indent}- {_one_line(item, width - len(indent))}")
    else:
        lines.append(f"{indent}{_one_line(value, width - len(indent))}")
    return lines


def _one_line(value: Any, limit: int) -> str:
    text = " ".join(str(value).split())
    limit = max(limit, 20)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ask(prompt: str) -> str:
    """``input`` that also shows the answer when it comes from a pipe (so the transcript reads right)."""
    answer = input(prompt)
    if not sys.stdin.isatty():
        print(answer, flush=True)
    return answer


def interactive_decider(client: GatewayClient, workflow_id: str, *, read: Callable[[str], str] = _ask,
                        out: Callable[[str], None] = print) -> Callable[[str, Mapping[str, Any]], Decision]:
    """Show each card and ask: approve, request changes (with feedback) or quit. End of input quits."""

    def decide(stage: str, _event: Mapping[str, Any]) -> Decision:
        card = client.get(f"/api/workflows/{workflow_id}/artifacts").get(CARD_OF_STAGE.get(stage, stage)) or {}
        out(f"\n  The {stage} card:")
        for line in (_verdict_lines(card, "    ") if stage == "review" else _card_lines(card)):
            out(line)
        while True:
            try:
                answer = read("  [a]pprove, [r]equest changes, [q]uit? ").strip().lower()
                if answer in ("a", "approve", "y", "yes", ""):
                    return APPROVE
                if answer in ("q", "quit"):
                    return Decision("quit")
                if answer in ("r", "request", "changes", "request changes"):
                    feedback = read("  What should change? ").strip()
                    if feedback:
                        return Decision("changes", feedback)
                    out("  (no feedback given)")
                    continue
                out("  please answer a, r or q")
            except EOFError:
                return Decision("quit")

    return decide


# --- the command ----------------------------------------------------------------------------------------


def _print(line: str = "") -> None:
    print(line, flush=True)


def _verdict_lines(review: Mapping[str, Any] | None, indent: str = "  ") -> list[str]:
    if not review:
        return [f"{indent}(no review card)"]
    lines = [f"{indent}recommendation: {review.get('recommendation') or '?'}"]
    if review.get("summary"):
        lines.append(f"{indent}summary: {review['summary']}")
    for comment in review.get("comments") or []:
        where = comment.get("file_path") or "(whole change)"
        if comment.get("start_line") is not None:
            end = comment.get("end_line")
            where += f":{comment['start_line']}" + (f"-{end}" if end not in (None, comment["start_line"]) else "")
        lines.append(f"{indent}comment [{comment.get('severity')} {comment.get('category')}] {where}: "
                     f"{comment.get('description', '')}")
    return lines


def _wait_worktree_removed(client: GatewayClient, workflow_id: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    view = client.get(f"/api/workflows/{workflow_id}")
    while view.get("worktree_path") and time.monotonic() < deadline:
        time.sleep(0.1)
        view = client.get(f"/api/workflows/{workflow_id}")
    return view


def _raise_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def run_demo(target: Path, *, interactive: bool = False, keep: bool = False, timeout: float = 300,
             read: Callable[[str], str] = _ask, scenario_path: Path | None = None, kind: DemoKind = WORKFLOW) -> int:
    from autarch.services.scripted_model import ScriptedModelServer

    from .local_system import LocalSystem

    if shutil.which("git") is None:
        raise DemoError("the demo needs git on PATH", code=2)
    target = target.expanduser().absolute()
    check_target(target)
    scenario = demo_scenario(revisable=interactive, path=scenario_path, name=kind.scenario)
    started = time.monotonic()
    _print(f"Autarch demo — {kind.headline}, offline, with the scripted model (no API key, no network).")
    if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("AUTARCH_ANTHROPIC_API_KEY"):
        _print("An API key is set, but the demo always plays the scripted model; "
               "`autarch workflow new` runs the same flow on a real model.")
    try:
        base = make_sample_repo(target, scenario["files"])
    except OSError as exc:
        raise DemoError(f"cannot create the sample repository in {target}: {exc}") from None
    _print(f"Sample repository: {target}  (main at {base[:8]}: {', '.join(sorted(scenario['files']))})")

    data_dir = Path(tempfile.mkdtemp(prefix="autarch-demo-data-"))
    system: LocalSystem | None = None
    client: GatewayClient | None = None
    outcome: Outcome | None = None
    workflow_id: str | None = None
    main_thread = threading.current_thread() is threading.main_thread()
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_on_sigterm) if main_thread else None
    try:
        with ScriptedModelServer(scenario) as model:
            system = LocalSystem(data_dir, model.base_url, services=SERVICES, extra_env=dict(kind.env))
            _print(f"Starting Autarch ({', '.join(SERVICES)} + gateway) on {system.url} …")
            system.start()
            _print(f"  ready in {time.monotonic() - started:.1f}s; scripted model at {model.base_url}")
            client = system.client()
            workflow_id = create_workflow(client, target, title=kind.title, request=kind.request,
                                          branch=kind.branch)
            _print(f"Workflow {workflow_id}: “{kind.title}” — {kind.request}")
            _print("")
            decide = interactive_decider(client, workflow_id, read=read) if interactive else None
            outcome = drive(client, workflow_id, decide=decide, out=_print, timeout=timeout, alive=system.alive)
            _print("")
            if outcome.status != "completed":
                view = client.get(f"/api/workflows/{workflow_id}")
                _print(f"demo {'stopped' if outcome.status == 'quit' else 'failed'}: {outcome.message}")
                if view.get("last_error"):
                    _print(f"  last error: {view['last_error']}")
                _print(f"  stage {view.get('stage')}, status {view.get('status')}")
                if outcome.status == "timeout":
                    _print(f"  the system's log ends with:\n{system.log_tail()}")
                return 1
            view = _wait_worktree_removed(client, workflow_id)
            branch = view.get("branch") or kind.branch
            review = client.get(f"/api/workflows/{workflow_id}/artifacts").get("review")
            log = git_in(target, "log", "--oneline", f"main..{branch}").strip().splitlines()
            _print(f"Branch {branch}: {len(log)} commit{'s' if len(log) != 1 else ''} on top of main "
                   f"(one per {kind.unit}; main is untouched)")
            for line in log:
                _print(f"  {line}")
            for line in kind.epilogue(client, workflow_id) if kind.epilogue else []:
                _print(line)
            _print("Review verdict:")
            for line in _verdict_lines(review):
                _print(line)
            _print(f"Done in {time.monotonic() - started:.1f}s: {outcome.turns} agent turns, {outcome.tokens:,} "
                   f"tokens, ${outcome.cost_usd:.4f} at list prices (the scripted model is free).")
            return 0
    except CliError as exc:  # the demo's own failures, the system's, the gateway's
        _print(f"demo failed: {exc.message}")
        return exc.exit_code
    except Exception as exc:  # a bug or an environment problem: say what, and what the system logged
        _print(f"demo failed: {type(exc).__name__}: {exc}")
        if system is not None:
            _print(f"  the system's log ends with:\n{system.log_tail()}")
        return 1
    except KeyboardInterrupt:
        _print("\ninterrupted")
        raise
    except SystemExit:
        _print("\nterminated")
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
        try:
            if client is not None:
                client.close()
            if system is not None and system.proc is not None:
                _print("Stopping Autarch …")
                system.stop()
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, previous_sigterm)
        if keep:
            _print(f"Data directory kept: {data_dir}  (e.g. autarch replay --data-dir {data_dir} "
                   f"{workflow_id or '<workflow id>'})")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
            # A workflow stopped midway may leave a worktree registered in the repository: forget it.
            subprocess.run(["git", "-C", str(target), "worktree", "prune"], capture_output=True, check=False)
        _print(f"The sample repository stays at {target}"
               + (f"; see the work with: git -C {target} log -p main..{kind.branch}" if outcome
                  and outcome.status == "completed" else ""))


def cmd_demo(args: argparse.Namespace) -> int:
    target = Path(args.dir) if args.dir else Path.cwd() / f"autarch-demo-{uuid.uuid4().hex[:6]}"
    try:
        if args.which == "loop":
            if args.swarm:
                raise DemoError("--swarm runs a workflow's execution as a swarm; the loop demo has none", code=2)
            from .demo_loop import run_loop_demo

            return run_loop_demo(target, keep=args.keep, timeout=args.timeout)
        kind = WORKFLOW
        if args.swarm:
            from .demo_swarm import SWARM

            kind = SWARM
        return run_demo(target, interactive=args.interactive, keep=args.keep, timeout=args.timeout,
                        scenario_path=Path(args.scenario) if args.scenario else None, kind=kind)
    except DemoError as exc:
        print(f"autarch demo: {exc.message}", file=sys.stderr, flush=True)
        return exc.exit_code


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo", help="run a whole workflow offline on a sample repository (no API key needed)",
        description="Create a sample git repository, start Autarch with the scripted model, and take the request "
        f"“{REQUEST}” through scoping, research, planning, execution and review, approving each card. Ends with "
        f"the branch {BRANCH} (one commit per pulse) and the review's verdict, then stops everything. With --swarm "
        "the plan is a bead plan on a small geometry package, and its execution runs as a swarm of three workers.",
    )
    demo.add_argument("which", nargs="?", choices=("workflow", "loop"), default="workflow",
                      help="workflow (default): the gated stages; loop: a Pulse Protocol loop session that "
                      "iterates to COMPLETE on its own")
    demo.add_argument("--swarm", action="store_true",
                      help="play a bead plan instead: execution runs as a swarm of three workers (claims, file "
                      "leases, one commit per bead merged onto the workflow branch)")
    demo.add_argument("--interactive", action="store_true",
                      help="show each card and ask: approve, request changes or quit")
    demo.add_argument("--dir", metavar="DIR",
                      help="where to create the sample repository (new or empty; default ./autarch-demo-<id>)")
    demo.add_argument("--keep", action="store_true", help="keep the demo's data directory (event stores, logs)")
    demo.add_argument("--timeout", type=float, default=300, metavar="SECONDS",
                      help="give up when the workflow has not ended after this long (default 300)")
    # Another scenario (JSON) for the scripted model to play, e.g. one whose workflow fails: for tests.
    demo.add_argument("--scenario", metavar="FILE", help=argparse.SUPPRESS)
    demo.set_defaults(handler=cmd_demo)
