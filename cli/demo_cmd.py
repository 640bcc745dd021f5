"""``autarch demo``: a whole workflow, offline, on a sample repository, in well under a minute.

It creates a small git repository from the bundled ``demo`` scenario's files, starts the scripted model
(in this process) and the real system (``autarch up`` as a subprocess with its own data directory and free
ports), creates the workflow over HTTP, follows its events over SSE printing a line per interesting event,
approves every card (or asks, with ``--interactive``), and ends by showing the workflow branch, one commit per
pulse, and the review's verdict. The system is stopped in every case (success, failure, Ctrl-C).

The helpers (:func:`make_sample_repo`, :class:`DemoSystem`, :class:`Gateway`, :func:`drive`) are also used by
``tests/benchmarks/workflows.py``, which runs many demo workflows at once.
"""

from __future__ import annotations

import argparse
import contextlib
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BRANCH",
    "REQUEST",
    "SERVICES",
    "TITLE",
    "Decision",
    "DemoError",
    "DemoSystem",
    "Gateway",
    "Outcome",
    "demo_scenario",
    "drive",
    "make_sample_repo",
    "pid_alive",
    "register",
    "scrubbed_env",
]

SCENARIO = "demo"
SERVICES = ("orchestrator", "tools", "git", "agent_runner")
"""What the demo workflow needs (the indexer is not used by the demo scenario)."""
TITLE = "Greet the world"
REQUEST = "Make greet() greet the world when the name is empty"
BRANCH = "autarch/demo"
CARD_OF_STAGE = {"scoping": "scope", "research": "research", "planning": "plan", "review": "review"}
"""The artifacts key of each stage's card."""
_BLOCK_TOOLS = {"scoping": "submit_scope", "research": "submit_research", "plan": "submit_plan",
                "review": "complete_review"}
_REVISED_FIELD = {"submit_scope": "title", "submit_research": "summary", "submit_plan": "approachSummary",
                  "complete_review": "summary"}
REVISIONS = 3
"""Change requests the scripted model answers per card in ``--interactive`` mode."""


class DemoError(Exception):
    """The demo cannot go on; ``code`` is the exit code (2: bad usage, 1: a failure)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# --- the sample repository ------------------------------------------------------------------------------


def demo_scenario(*, revisable: bool = False, path: Path | None = None) -> dict[str, Any]:
    """The bundled demo scenario (or the JSON scenario at ``path``) as a dict.

    With ``revisable``, each card's agent answers up to :data:`REVISIONS` change requests by submitting its card
    again (marked "revised"), so ``--interactive`` can send cards back; the bundled scenario answers none.
    """
    from autarch.services.scripted_model.scenario import ScenarioError, bundled_scenario_path, parse_scenario

    source = path or bundled_scenario_path(SCENARIO)
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


def _git(repo: Path, *args: str) -> str:
    # A user's git configuration must not break the demo: no signing, no hooks, a fixed identity.
    cmd = ["git", "-C", str(repo), "-c", "user.name=Autarch demo", "-c", "user.email=demo@autarch.invalid",
           "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise DemoError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def check_target(target: Path) -> None:
    """Refuse (exit code 2) a target that exists and is not an empty directory."""
    if target.exists() and not target.is_dir():
        raise DemoError(f"{target} exists and is not a directory; choose another --dir", code=2)
    if target.is_dir() and any(target.iterdir()):
        raise DemoError(f"{target} exists and is not empty; choose a new or empty directory with --dir", code=2)


def make_sample_repo(root: Path, files: Mapping[str, str]) -> str:
    """A git repository at ``root`` on branch ``main`` holding ``files`` in one commit; its commit id."""
    root.mkdir(parents=True, exist_ok=True)
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "Initial commit: the greeter sample")
    return _git(root, "rev-parse", "HEAD").strip()


# --- the system -----------------------------------------------------------------------------------------


def scrubbed_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) without ``AUTARCH_*``/``ANTHROPIC_*`` and with loopback
    exempt from proxies: a user's settings, keys or proxy must not reach the demo's system."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith(("AUTARCH_", "ANTHROPIC_"))}
    for key in ("NO_PROXY", "no_proxy"):
        given = [p for p in env.get(key, "").split(",") if p]
        env[key] = ",".join([*given, *(h for h in ("127.0.0.1", "localhost") if h not in given)])
    return env


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return not Path("/proc").is_dir()


@dataclass
class DemoSystem:
    """``autarch up --services …`` as a subprocess on free ports, with its own data directory."""

    data_dir: Path
    model_url: str
    services: tuple[str, ...] = SERVICES
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    nats_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)
    """The supervisor's children and nats-server, as ``run.json`` listed them once healthy."""

    def __post_init__(self) -> None:
        from autarch.runtime.natsserver import free_port

        self.port = self.port or free_port()
        self.nats_port = self.nats_port or free_port()
        while self.nats_port == self.port:
            self.nats_port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "up.log"

    @property
    def token(self) -> str:
        return (self.data_dir / "token").read_text().strip()

    def env(self) -> dict[str, str]:
        env = scrubbed_env()
        env.update(
            AUTARCH_DATA_DIR=str(self.data_dir), AUTARCH_PORT=str(self.port), AUTARCH_NATS_PORT=str(self.nats_port),
            AUTARCH_ANTHROPIC_BASE_URL=self.model_url, AUTARCH_ANTHROPIC_API_KEY="scripted",
            AUTARCH_REQUEST_TIMEOUT="30", AUTARCH_SSE_KEEPALIVE="2", PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 60) -> DemoSystem:
        """Start ``autarch up`` and return once ``/healthz`` answers 200."""
        import httpx

        from autarch.runtime.natsserver import die_with_parent

        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autarch.cli.main", "up", "--services", ",".join(self.services)],
                env=self.env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                # Its own session: Ctrl-C reaches the demo, which stops the system in order; and the kernel
                # stops it should the demo die without its cleanup.
                start_new_session=True, preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + timeout
        with httpx.Client(trust_env=False, timeout=2) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise DemoError(f"autarch up exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
                try:
                    if http.get(f"{self.url}/healthz").status_code == 200:
                        self.pids = self._run_pids()
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise DemoError(f"the system was not healthy within {timeout:g}s:\n{self.log_tail()}")

    def run_info(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.data_dir / "run.json").read_text())
        except (OSError, ValueError):
            return None

    def _run_pids(self) -> list[int]:
        info = self.run_info() or {}
        return [p for p in [info.get("nats_pid"), *(info.get("children") or {}).values()] if p]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join("    " + line for line in text[-lines:])

    def stop(self, grace: float = 30) -> int | None:
        """SIGTERM ``autarch up`` and wait for it (SIGKILL after ``grace``); then make sure nothing it started
        is left (its children stop with it; any that did not get SIGKILL)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        pids = sorted(set(self.pids) | set(self._run_pids()))
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        deadline = time.monotonic() + 5
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in pids:
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        return proc.returncode


# --- the gateway ----------------------------------------------------------------------------------------


class Gateway:
    """The few gateway calls the demo makes (plain httpx; no proxy from the environment)."""

    def __init__(self, url: str, token: str, *, timeout: float = 30) -> None:
        import httpx

        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout,
                                 trust_env=False)

    def close(self) -> None:
        self.http.close()

    def _check(self, reply: Any, what: str) -> Any:
        if reply.status_code >= 400:
            try:
                body = reply.json()
                detail = f"{body.get('code')}: {body.get('message')}"
            except ValueError:
                detail = reply.text[:300]
            raise DemoError(f"{what} answered {reply.status_code} ({detail})")
        return reply.json()

    def create(self, repo: Path, *, title: str = TITLE, request: str = REQUEST, branch: str = BRANCH) -> str:
        body = {"title": title, "request": request, "repo": str(repo), "branch": branch}
        return str(self._check(self.http.post("/api/workflows", json=body), "creating the workflow")["id"])

    def get(self, workflow_id: str) -> dict[str, Any]:
        return self._check(self.http.get(f"/api/workflows/{workflow_id}"), "reading the workflow")

    def artifacts(self, workflow_id: str) -> dict[str, Any]:
        return self._check(self.http.get(f"/api/workflows/{workflow_id}/artifacts"), "reading the cards")

    def approve(self, workflow_id: str) -> dict[str, Any]:
        return self._check(self.http.post(f"/api/workflows/{workflow_id}/approve"), "approving")

    def request_changes(self, workflow_id: str, feedback: str) -> dict[str, Any]:
        reply = self.http.post(f"/api/workflows/{workflow_id}/request-changes", json={"feedback": feedback})
        return self._check(reply, "requesting changes")

    @contextlib.contextmanager
    def events(self, *, workflow: str | None = None, since: int | None = None,
               read_timeout: float = 30) -> Iterator[Iterator[str]]:
        """The lines of ``GET /api/events`` (server-sent events): recorded events only, no live deltas."""
        import httpx

        params: dict[str, str] = {"deltas": "false"}
        if workflow:
            params["workflow"] = workflow
        if since is not None:
            params["since"] = str(since)
        timeout = httpx.Timeout(10, read=read_timeout)
        with self.http.stream("GET", "/api/events", params=params, timeout=timeout) as reply:
            if reply.status_code != 200:
                reply.read()
                self._check(reply, "the event stream")
            yield reply.iter_lines()


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


def drive(
    gateway: Gateway,
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
    is resumed after the last event seen while ``alive()`` says the system runs.
    """
    import httpx

    from .render import SseComment, Watch, card_summary, parse_sse

    decide = decide or (lambda _stage, _event: APPROVE)
    say = out or (lambda _line: None)
    watch = Watch()
    outcome = Outcome(workflow_id, "timeout", f"no end within {timeout:g}s")
    deadline = time.monotonic() + timeout
    since = 0
    lost_at: float | None = None
    running: set[str] = set()
    """Sessions whose turn started and has not completed."""
    ended: tuple[str, str] | None = None

    def finish(status: str, message: str) -> Outcome:
        outcome.status, outcome.message = status, message
        outcome.turns, outcome.tokens, outcome.cost_usd = watch.turns, watch.tokens, watch.cost_usd
        return outcome

    while time.monotonic() < deadline:
        try:
            with gateway.events(workflow=workflow_id, since=since) as lines:
                for message in parse_sse(lines):
                    if time.monotonic() > deadline:
                        if ended is not None:
                            return finish(*ended)
                        break
                    if isinstance(message, SseComment):
                        lost_at = None
                        continue
                    received = time.time()
                    if message.id and message.id.isdigit():
                        since = int(message.id)
                    try:
                        event = json.loads(message.data)
                    except ValueError:
                        continue
                    if not isinstance(event, dict):
                        continue
                    event.setdefault("type", message.event)
                    kind = event["type"]
                    outcome.events += 1
                    if on_event is not None:
                        on_event(event, received)
                    if kind == "workflow:approval_needed":
                        stage = str(event.get("stage", ""))
                        say(f"{_time_of(event)}  APPROVAL NEEDED — {card_summary(stage, event.get('artifact') or {})}")
                        asked = time.monotonic()
                        decision = decide(stage, event)
                        deadline += time.monotonic() - asked
                        if decision.action == "quit":
                            return finish("quit", f"you quit at the {stage} card")
                        if decision.action == "changes":
                            gateway.request_changes(workflow_id, decision.feedback)
                            say(f"{'':8}  → changes requested: {decision.feedback}")
                        else:
                            gateway.approve(workflow_id)
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
                        # The last agent's turn often completes just after the stage change: wait briefly for
                        # it, so the totals count it.
                        if not running:
                            return finish(*ended)
                        deadline = min(deadline, time.monotonic() + 1.5)
            problem = "the gateway closed the event stream"
        except httpx.HTTPError as exc:
            problem = f"the event stream broke ({type(exc).__name__}: {exc})"
        if alive is not None and not alive():
            raise DemoError(f"the system stopped while the workflow ran ({problem})")
        now = time.monotonic()
        lost_at = lost_at or now
        if now - lost_at > 30:
            raise DemoError(f"{problem}; gave up after 30s of reconnecting")
        time.sleep(0.25)
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


def interactive_decider(gateway: Gateway, workflow_id: str, *, read: Callable[[str], str] = _ask,
                        out: Callable[[str], None] = print) -> Callable[[str, Mapping[str, Any]], Decision]:
    """Show each card and ask: approve, request changes (with feedback) or quit. End of input quits."""

    def decide(stage: str, _event: Mapping[str, Any]) -> Decision:
        card = gateway.artifacts(workflow_id).get(CARD_OF_STAGE.get(stage, stage)) or {}
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


def _wait_worktree_removed(gateway: Gateway, workflow_id: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    view = gateway.get(workflow_id)
    while view.get("worktree_path") and time.monotonic() < deadline:
        time.sleep(0.1)
        view = gateway.get(workflow_id)
    return view


def _raise_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def run_demo(target: Path, *, interactive: bool = False, keep: bool = False, timeout: float = 300,
             read: Callable[[str], str] = _ask, scenario_path: Path | None = None) -> int:
    from autarch.services.scripted_model import ScriptedModelServer

    if shutil.which("git") is None:
        raise DemoError("the demo needs git on PATH", code=2)
    target = target.expanduser().absolute()
    check_target(target)
    scenario = demo_scenario(revisable=interactive, path=scenario_path)
    started = time.monotonic()
    _print("Autarch demo — a whole workflow, offline, with the scripted model (no API key, no network).")
    if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("AUTARCH_ANTHROPIC_API_KEY"):
        _print("An API key is set, but the demo always plays the scripted model; "
               "`autarch workflow new` runs the same flow on a real model.")
    try:
        base = make_sample_repo(target, scenario["files"])
    except OSError as exc:
        raise DemoError(f"cannot create the sample repository in {target}: {exc}") from None
    _print(f"Sample repository: {target}  (main at {base[:8]}: {', '.join(sorted(scenario['files']))})")

    data_dir = Path(tempfile.mkdtemp(prefix="autarch-demo-data-"))
    system: DemoSystem | None = None
    gateway: Gateway | None = None
    outcome: Outcome | None = None
    workflow_id: str | None = None
    main_thread = threading.current_thread() is threading.main_thread()
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_on_sigterm) if main_thread else None
    try:
        with ScriptedModelServer(scenario) as model:
            system = DemoSystem(data_dir, model.base_url)
            _print(f"Starting Autarch ({', '.join(SERVICES)} + gateway) on {system.url} …")
            system.start()
            _print(f"  ready in {time.monotonic() - started:.1f}s; scripted model at {model.base_url}")
            gateway = Gateway(system.url, system.token)
            workflow_id = gateway.create(target)
            _print(f"Workflow {workflow_id}: “{TITLE}” — {REQUEST}")
            _print("")
            decide = interactive_decider(gateway, workflow_id, read=read) if interactive else None
            outcome = drive(gateway, workflow_id, decide=decide, out=_print, timeout=timeout, alive=system.alive)
            _print("")
            if outcome.status != "completed":
                view = gateway.get(workflow_id)
                _print(f"demo {'stopped' if outcome.status == 'quit' else 'failed'}: {outcome.message}")
                if view.get("last_error"):
                    _print(f"  last error: {view['last_error']}")
                _print(f"  stage {view.get('stage')}, status {view.get('status')}")
                if outcome.status == "timeout":
                    _print(f"  the system's log ends with:\n{system.log_tail()}")
                return 1
            view = _wait_worktree_removed(gateway, workflow_id)
            branch = view.get("branch") or BRANCH
            review = gateway.artifacts(workflow_id).get("review")
            log = _git(target, "log", "--oneline", f"main..{branch}").strip().splitlines()
            _print(f"Branch {branch}: {len(log)} commit{'s' if len(log) != 1 else ''} on top of main "
                   f"(one per pulse; main is untouched)")
            for line in log:
                _print(f"  {line}")
            _print("Review verdict:")
            for line in _verdict_lines(review):
                _print(line)
            _print(f"Done in {time.monotonic() - started:.1f}s: {outcome.turns} agent turns, {outcome.tokens:,} "
                   f"tokens, ${outcome.cost_usd:.4f} at list prices (the scripted model is free).")
            return 0
    except DemoError as exc:
        _print(f"demo failed: {exc.message}")
        return exc.code
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
            if gateway is not None:
                gateway.close()
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
               + (f"; see the work with: git -C {target} log -p main..{BRANCH}" if outcome
                  and outcome.status == "completed" else ""))


def cmd_demo(args: argparse.Namespace) -> int:
    target = Path(args.dir) if args.dir else Path.cwd() / f"autarch-demo-{uuid.uuid4().hex[:6]}"
    try:
        return run_demo(target, interactive=args.interactive, keep=args.keep, timeout=args.timeout,
                        scenario_path=Path(args.scenario) if args.scenario else None)
    except DemoError as exc:
        print(f"autarch demo: {exc.message}", file=sys.stderr, flush=True)
        return exc.code


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    demo = sub.add_parser(
        "demo", help="run a whole workflow offline on a sample repository (no API key needed)",
        description="Create a sample git repository, start Autarch with the scripted model, and take the request "
        f"“{REQUEST}” through scoping, research, planning, execution and review, approving each card. Ends with "
        f"the branch {BRANCH} (one commit per pulse) and the review's verdict, then stops everything.",
    )
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
