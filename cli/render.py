"""What ``autarch watch`` prints: one readable line per event, and the server-sent-events parser it reads.

:func:`render_event` is pure (an event as decoded from the stream → a line, or None for events not worth
a line); :class:`Watch` adds what needs memory: which step (or swarm worker and bead) each session works for,
each worker's nickname, the running token/cost totals, the workflow's :class:`Progress` (stage k of 5, pulse
n of N, beads closed) and, when asked, the agents' text as it streams (from the live deltas).
:func:`parse_sse` turns the lines of a ``text/event-stream`` into messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "DELTA_EVENTS",
    "STAGES",
    "SWARM_FAMILIES",
    "TERMINAL_EVENTS",
    "Progress",
    "SseComment",
    "SseMessage",
    "Watch",
    "approval_hint",
    "card_summary",
    "comment_summary",
    "halt_hint",
    "parse_sse",
    "printable",
    "render_event",
    "short_input",
]

TERMINAL_EVENTS = frozenset({"workflow:completed", "workflow:abandoned"})
"""After one of these the workflow records nothing more: ``watch`` exits."""

DELTA_EVENTS = frozenset({"turn:message_delta", "turn:thought_delta"})
"""Live pieces of a turn's text (never stored; ``turn:completed`` has the whole text)."""

SWARM_FAMILIES = frozenset({"swarm", "bead", "worker", "lease", "mail"})
"""Event families of a workflow's epic when its plan is a bead plan (seed 002): they carry the workflow's id."""

STAGES = ("scoping", "research", "planning", "execution", "review")
"""The stages in order (``done`` follows); the quick path skips research and planning."""

_CMD = "autarch workflow"


# --- server-sent events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SseMessage:
    event: str
    data: str
    id: str | None = None


@dataclass(frozen=True)
class SseComment:
    text: str


def parse_sse(lines: Iterable[str]) -> Iterator[SseMessage | SseComment]:
    """Messages (and comments, e.g. ``connected`` and ``keep-alive``) of a ``text/event-stream``.

    Follows the HTML spec's rules: ``field: value`` lines (one leading space dropped), several ``data``
    lines joined with newlines, a blank line dispatches, a message without data is dropped.
    """
    data: list[str]
    event, data, last_id = "", [], None
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SseMessage(event=event or "message", data="\n".join(data), id=last_id)
            event, data = "", []
            continue
        if line.startswith(":"):
            yield SseComment(line[1:].strip())
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id" and "\0" not in value:
            last_id = value
    # A stream cut before its final blank line dispatches nothing (as in browsers).


# --- formatting helpers ---------------------------------------------------------------------------------


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: Any) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``), so what a client stored can
    never drive the terminal (ANSI sequences, NUL, bells); events recorded before the gateway refused
    them still render safely."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def _cut(text: Any, limit: int = 100) -> str:
    """One line of at most ``limit`` characters, control characters escaped."""
    one = printable(" ".join(str(text).split()))
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _first_line(text: Any, limit: int = 100) -> str:
    lines = str(text).strip().splitlines()
    return _cut(lines[0] if lines else "", limit)


def _time(event: Mapping[str, Any]) -> str:
    at = event.get("occurred_at")
    try:
        return datetime.fromisoformat(str(at).replace("Z", "+00:00")).astimezone().strftime("%H:%M:%S")
    except (TypeError, ValueError):
        return "--:--:--"


def _tokens(n: int) -> str:
    return f"{n:,}"


_PREFERRED_KEYS = ("path", "file_path", "command", "pattern", "query", "url", "old_str", "glob", "name")


def short_input(tool_input: Any, limit: int = 70) -> str:
    """A tool call's input in a few characters: the telling arguments first (``path=…``), ``reason`` last."""
    if not isinstance(tool_input, Mapping) or not tool_input:
        return ""
    keys = sorted(tool_input, key=lambda k: (k not in _PREFERRED_KEYS, k == "reason",
                                            _PREFERRED_KEYS.index(k) if k in _PREFERRED_KEYS else 0))
    parts = []
    for key in keys:
        value = tool_input[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        parts.append(f"{key}={_cut(shown, 40)}")
    return _cut(" ".join(parts), limit)


def card_summary(stage: str, card: Mapping[str, Any]) -> str:
    """One line about a stage's card (the artifact of ``workflow:approval_needed``)."""
    if stage == "scoping":
        title = card.get("title", "?")
        ins, outs = len(card.get("in_scope") or []), len(card.get("out_of_scope") or [])
        return f"scope “{_cut(title, 60)}”: {ins} in scope, {outs} out; recommends {card.get('recommended_path', '?')}"
    if stage == "research":
        files = len(card.get("keyFiles") or [])
        return f"research: {_first_line(card.get('summary', ''), 80)} ({files} key file{'s' if files != 1 else ''})"
    if stage == "planning":
        pulses = [p.get("id", "?") for p in card.get("pulses") or [] if isinstance(p, Mapping)]
        return (f"plan: {_first_line(card.get('approachSummary', ''), 70)} "
                f"({len(pulses)} pulse{'s' if len(pulses) != 1 else ''}: {', '.join(pulses)})")
    if stage == "review":
        summary = card.get("summary")
        return f"review: recommends {card.get('recommendation', '?')}" + (f" — {_cut(summary, 80)}" if summary else "")
    return f"{stage} card"


def _questions(details: Mapping[str, Any]) -> list[str]:
    lines = []
    for n, q in enumerate(details.get("questions") or [], 1):
        if not isinstance(q, Mapping):
            continue
        options = q.get("options") or []
        kind = q.get("type", "free_text")
        choice = f" [{' / '.join(str(o) for o in options)}]" if options else ""
        kind_note = f" ({kind})" if kind != "free_text" else ""
        lines.append(f"    {n}. {_cut(q.get('prompt', ''), 120)}{choice}{kind_note}")
    return lines


def approval_hint(workflow_id: str, stage: str = "") -> str:
    """The commands that answer a card awaiting approval."""
    options = " [--path quick|full]" if stage == "scoping" else ""
    fix = " [--fix]" if stage == "review" else ""
    return f"{_CMD} approve {workflow_id}{options}   or   {_CMD} request-changes {workflow_id} FEEDBACK{fix}"


def halt_hint(workflow_id: str, reason: str) -> str:
    """The command that lets a workflow halted for ``reason`` go on."""
    if reason == "questions":
        return f"{_CMD} answer {workflow_id} ANSWER..."
    if reason == "extension_requested":
        return f"{_CMD} approve-extension {workflow_id}"
    if reason == "disk_full":
        return f"goes on by itself once the path has room again (or: {_CMD} resume {workflow_id})"
    return f"{_CMD} resume {workflow_id} [--message TEXT]"


def comment_summary(comment: Mapping[str, Any]) -> str:
    """``[High bug] api/mw.py:3-5: the description``: one review comment (a ReviewCommentView or its event)."""
    where = comment.get("file_path") or "(whole change)"
    if comment.get("start_line") is not None:
        end = comment.get("end_line")
        where += f":{comment['start_line']}" + (f"-{end}" if end not in (None, comment["start_line"]) else "")
    return (f"[{_cut(comment.get('severity'), 10)} {_cut(comment.get('category'), 30)}] {_cut(where, 120)}: "
            f"{_cut(comment.get('description', ''), 90)}")


# --- events ---------------------------------------------------------------------------------------------


def _label(event: Mapping[str, Any], sessions: Mapping[str, str]) -> str:
    sid = str(event.get("session_id", ""))
    return f"[{sessions.get(sid) or 'session ' + sid[:8]}] "


def _workflow_line(kind: str, e: Mapping[str, Any]) -> str | None:
    wf = e.get("workflow_id", "?")
    if kind == "created":
        return f"created “{_cut(e.get('title', ''), 60)}” on {e.get('repo')} (base {e.get('base_branch')})"
    if kind == "stage_changed":
        path = f" (path {e['path']})" if e.get("path") else ""
        return f"stage {e.get('from_stage')} → {e.get('to_stage')}{path}"
    if kind == "approval_needed":
        stage = str(e.get("stage", ""))
        return f"APPROVAL NEEDED — {card_summary(stage, e.get('artifact') or {})}\n    → {approval_hint(wf, stage)}"
    if kind == "changes_requested":
        fix = " (the work goes back to be fixed)" if e.get("fix") else ""
        return f"changes requested for {e.get('stage')}{fix}: {_cut(e.get('feedback', ''), 100)}"
    if kind == "completed":
        rec = e.get("recommendation")
        return "workflow completed" + (f" (review recommended {rec})" if rec else "")
    if kind == "error":
        return f"ERROR in {e.get('stage')}: {_cut(e.get('message', ''), 200)}"
    if kind == "note_taken":
        return f"note ({e.get('stage')}): {_cut(e.get('note', ''), 100)}"
    if kind == "baseline_recorded":
        return f"baseline ({e.get('source')} {e.get('issue_type')}): {_cut(e.get('pattern', ''), 80)}"
    if kind == "review_comment_added":
        return f"review comment {comment_summary(e)}"
    if kind == "fix_round_opened":
        pulses = [p for p in e.get("pulses") or [] if isinstance(p, Mapping)]
        sent = len(e.get("comment_ids") or [])
        where = ", ".join(f"{p.get('pulse_id')} ({p.get('file_path') or 'no file'})" for p in pulses)
        return (f"review sent back (fix round {e.get('round')}): {sent} comment{'s' if sent != 1 else ''} → "
                f"{len(pulses)} fix pulse{'s' if len(pulses) != 1 else ''}: {_cut(where, 120)}")
    if kind == "session_assigned":
        return f"session {str(e.get('session_id', ''))[:8]} assigned to {e.get('step')} ({e.get('role')})"
    if kind == "halted":
        reason = str(e.get("reason", ""))
        pulse = f" in {e['pulse_id']}" if e.get("pulse_id") else ""
        lines = [f"HALTED ({reason}){pulse}: {_cut(e.get('message', ''), 160)}"]
        if reason == "questions":
            lines += _questions(e.get("details") or {})
        lines.append(f"    → {halt_hint(str(wf), reason)}")
        return "\n".join(lines)
    if kind == "resumed":
        message = e.get("message")
        return f"resumed ({e.get('reason')})" + (f": {_cut(message, 100)}" if message else "")
    if kind == "abandoned":
        return f"ABANDONED in {e.get('stage')}: {_cut(e.get('reason', ''), 200)}"
    return None


def _preflight_line(kind: str, e: Mapping[str, Any]) -> str | None:
    if kind == "started":
        return (f"preflight started: branch {e.get('branch')} from {str(e.get('base_commit', ''))[:8]} "
                f"(worktree {e.get('worktree_path')})")
    if kind == "completed":
        if e.get("status") != "completed":
            return f"preflight FAILED: {_cut(e.get('error') or e.get('summary') or '', 160)}"
        build = {True: "build ok", False: "build FAILING", None: "build not checked"}[e.get("build_success")]
        n = e.get("baselines_recorded", 0)
        return (f"preflight completed: {_cut(e.get('summary') or '', 80)}; {build}; "
                f"{n} baseline{'s' if n != 1 else ''}")
    return None


def _pulse_line(kind: str, e: Mapping[str, Any]) -> str | None:
    pulse = e.get("pulse_id", "?")
    if kind == "started":
        attempt = e.get("attempt", 1)
        again = f" (attempt {attempt})" if attempt and attempt > 1 else ""
        fix = f" (fix round {e['fix_round']})" if e.get("fix_round") else ""
        return f"pulse {pulse} started{again}{fix}: {_cut(e.get('title', ''), 80)}"
    if kind == "completion_rejected":
        failures = "; ".join(_cut(f, 60) for f in e.get("failures") or [])
        hatch = " (told about unresolvedIssues)" if e.get("escape_hatch") else ""
        return f"pulse {pulse}: completion rejected #{e.get('rejections')}{hatch}: {_cut(failures, 140)}"
    if kind == "completed":
        status = e.get("status")
        commit = str(e.get("commit") or "")[:8]
        if status == "succeeded":
            issues = len(e.get("unresolved_issues") or [])
            extra = ""
            if e.get("has_unresolved_issues"):
                extra = f" ({issues} unresolved issue{'s' if issues != 1 else ''})"
            summary = _first_line(e.get("description") or "", 80)
            return f"pulse {pulse} succeeded: commit {commit or '?'} — {summary}{extra}"
        checkpoint = f" (recovery checkpoint {commit})" if commit else ""
        if status == "stopped":
            return f"pulse {pulse} stopped{checkpoint}"
        return f"pulse {pulse} FAILED{checkpoint}: {_cut(e.get('failure_reason') or '', 140)}"
    return None


def _session_line(kind: str, e: Mapping[str, Any], sessions: Mapping[str, str]) -> str | None:
    label = _label(e, sessions)
    if kind == "session:started":
        return f"{label}session started ({e.get('role')}, {e.get('model')})"
    if kind == "session:completed":
        return f"{label}session closed: {_cut(e.get('reason', ''), 80)}"
    if kind == "session:error":
        return f"{label}session ERROR: {_cut(e.get('message', ''), 200)}"
    if kind == "turn:started":
        if not e.get("index"):
            return None  # the kickoff: the session_assigned/session_started lines already say what runs
        return f"{label}message: {_cut(e.get('text', ''), 100)}"
    if kind == "turn:tool_started":
        shown = short_input(e.get("input"))
        return f"{label}{e.get('tool')}" + (f" {shown}" if shown else "")
    if kind == "turn:tool_completed":
        if not e.get("is_error"):
            return None
        return f"{label}{e.get('tool')} failed: {_first_line(e.get('output', ''), 120)}"
    if kind == "turn:completed":
        outcome = str(e.get("outcome", ""))
        if outcome == "block" and e.get("tool"):
            outcome = f"{outcome} {e['tool']}"
        elif e.get("detail"):
            outcome = f"{outcome}: {_cut(e['detail'], 80)}"
        tokens_in = (e.get("input_tokens", 0) + e.get("cache_read_input_tokens", 0)
                     + e.get("cache_creation_input_tokens", 0))
        calls = e.get("tool_calls", 0)
        return (f"{label}turn done ({outcome}): {_tokens(tokens_in)} in / {_tokens(e.get('output_tokens', 0))} out "
                f"tokens, ${e.get('cost_usd', 0.0):.4f}, {calls} tool call{'s' if calls != 1 else ''}")
    return None


def _loop_line(name: str, e: Mapping[str, Any]) -> str | None:
    """A loop session's events (seed 001): iteration k/N, its signal, its commit."""
    k, n = e.get("iteration_number", "?"), e.get("max_iterations", "?")
    if name == "started":
        return (f"loop started on {e.get('project_path')} (branch {e.get('branch_name')}, at most "
                f"{e.get('max_iterations')} iterations): {_cut(str(e.get('goal', '')), 80)}")
    if name == "iteration_started":
        anchor = e.get("anchor_strategy") or "none"
        return f"iteration {k}/{n} started (anchor: {anchor})"
    if name == "iteration_completed":
        commit = f" · {str(e['commit_hash'])[:8]}" if e.get("commit_hash") else " · no commit"
        status = "" if e.get("status") == "complete" else f" ({e.get('status')})"
        return f"iteration {k}/{n}{status} {e.get('signal')}{commit} · {_cut(str(e.get('output_summary', '')), 80)}"
    if name == "paused":
        return f"loop paused after iteration {e.get('iteration_number')}"
    if name == "resumed":
        message = e.get("message")
        return "loop resumed" + (f": {_cut(str(message), 80)}" if message else "")
    if name == "blocked":
        return f"loop BLOCKED: {e.get('reason')}"
    if name == "completed":
        commits = e.get("commits", 0)
        return (f"loop complete ({e.get('iterations')} iterations, {commits} commit{'s' if commits != 1 else ''}): "
                f"{e.get('reason')}")
    if name == "failed":
        return f"loop FAILED: {e.get('reason')}"
    if name == "aborted":
        return f"loop aborted: {e.get('reason')}"
    return None


def _worker(name: Any, workers: Mapping[str, str]) -> str:
    """``w2 AmberFalcon``: the runtime nickname (once ``worker:joined`` told it) and the registered name."""
    nickname = workers.get(str(name))
    return f"{nickname} {name}" if nickname else str(name)


def _files(patterns: Any, limit: int = 90) -> str:
    return _cut(", ".join(str(p) for p in patterns or []) or "(no files)", limit)


def _conflict(conflict: Any, workers: Mapping[str, str]) -> str:
    """`` (files a.py; landed since 01234567)``: the files that stopped an attempt, and what held them."""
    if not isinstance(conflict, Mapping):
        return ""
    files = _files(conflict.get("files"), 60)
    if conflict.get("kind") == "lease":
        holder = f" held by {_worker(conflict['holder'], workers)}" if conflict.get("holder") else ""
        return f" (files {files}{holder})"
    landed = [str(c)[:8] for c in conflict.get("landed_since") or []]
    return f" (files {files}" + (f"; landed since {', '.join(landed)})" if landed else ")")


def _bead_summary(bead: Mapping[str, Any]) -> str:
    after = [str(d.get("bead_id")) for d in bead.get("dependencies") or []
             if isinstance(d, Mapping) and d.get("type", "blocks") == "blocks"]
    extra = [f"after {', '.join(after)}"] if after else []
    if bead.get("files"):
        extra.append(f"files {_files(bead['files'], 60)}")
    return f"“{_cut(bead.get('title', ''), 60)}”" + (f" ({'; '.join(extra)})" if extra else "")


def _swarm_line(kind: str, e: Mapping[str, Any], workers: Mapping[str, str]) -> str | None:
    """A swarm's events (seed 002): workers, claims, leases, reopenings, merges. None: not worth a line."""
    if kind == "swarm:started":
        n, workers_n = e.get("beads", 0), e.get("max_workers", 0)
        mode = str(e.get("mode", "?"))
        why = ": preflight advised a single worker" if mode == "standalone" else ""
        return (f"swarm started: {n} bead{'s' if n != 1 else ''}, {workers_n} worker{'s' if workers_n != 1 else ''} "
                f"(mode {mode}{why})")
    if kind == "swarm:finished":
        merged = [str(b) for b in e.get("merged") or []]
        if not merged:
            return "swarm finished: nothing merged"
        return f"swarm finished: {len(merged)} bead{'s' if len(merged) != 1 else ''} merged, in order " + _cut(
            " → ".join(merged), 140)
    if kind == "worker:joined":
        where = f" (worktree {e['worktree_path']})" if e.get("worktree_path") else ""
        return f"[{e.get('nickname', '?')} {e.get('worker', '?')}] joined{where}"
    if kind == "worker:status":
        # working and idle say nothing the claim and close lines do not.
        if e.get("status") == "waiting":
            return f"[{_worker(e.get('worker'), workers)}] waiting: the files of the next ready bead are leased"
        if e.get("status") == "retired":
            return f"[{_worker(e.get('worker'), workers)}] retired"
        return None
    if kind == "bead:claimed":
        return f"[{_worker(e.get('worker'), workers)}] claimed {e.get('bead_id')} (attempt {e.get('attempt', '?')})"
    if kind == "bead:closed":
        commit = f"commit {str(e['commit'])[:8]} — " if e.get("commit") else ""
        text = f"{commit}{_first_line(e.get('reason', ''), 90)}"
        if e.get("worker"):
            return f"[{_worker(e['worker'], workers)}] closed {e.get('bead_id')}: {text}"
        return f"bead {e.get('bead_id')} closed: {text}"
    if kind == "bead:reopened":
        return (f"bead {e.get('bead_id')} reopened after attempt {e.get('attempt', '?')}: "
                f"{_cut(e.get('reason', ''), 120)}{_conflict(e.get('conflict'), workers)}")
    if kind == "bead:bounced":
        reason = str(e.get("reason", ""))
        missing = [str(m) for m in e.get("missing") or [] if str(m) not in reason]
        return f"bead {e.get('bead_id')} BOUNCED: {_cut(reason, 120)}" + (
            f" (missing {', '.join(missing)})" if missing else "")
    if kind in ("bead:created", "bead:updated"):
        bead = e.get("bead") or {}
        if not isinstance(bead, Mapping):
            return kind
        verb = "created" if kind == "bead:created" else f"updated ({bead.get('status', '?')})"
        return f"bead {bead.get('id', '?')} {verb}: {_bead_summary(bead)}"
    if kind == "worker:handoff":
        handoff = e.get("handoff") or {}
        pct = (handoff.get("payload") or {}).get("context_snapshot", {}).get("tokens_used_pct") \
            if isinstance(handoff, Mapping) else None
        at = f" at {pct:.0%} of its context" if isinstance(pct, int | float) else ""
        return (f"[{_worker(e.get('worker'), workers)}] handed off {e.get('bead_id')}{at}: "
                f"{e.get('owner_file', '?')} (a fresh session resumes)")
    if kind == "bead:scope_requested":
        return (f"[{_worker(e.get('worker'), workers)}] asks to widen {e.get('bead_id')} by "
                f"{_files(e.get('paths'))}: {_cut(str(e.get('why', '')), 80)}")
    if kind == "bead:widened":
        return (f"[{_worker(e.get('worker'), workers)}] {e.get('bead_id')} widened by {_files(e.get('added'))} "
                "(coordinator)")
    if kind == "bead:scope_refused":
        return (f"[{_worker(e.get('worker'), workers)}] widening of {e.get('bead_id')} refused: "
                f"{_cut(str(e.get('reason', '')), 100)}")
    if kind == "bead:evidence":
        evidence = e.get("evidence") or {}
        runs = evidence.get("runs") or [] if isinstance(evidence, Mapping) else []
        steps = ", ".join(f"{r.get('step')} {'ok' if r.get('passed') else 'FAILED'}" for r in runs
                          if isinstance(r, Mapping))
        verdict = "passed" if isinstance(evidence, Mapping) and evidence.get("passed") else "FAILED"
        return f"bead {e.get('bead_id')} verification {verdict}" + (f": {steps}" if steps else "")
    if kind == "mail:posted":
        message = e.get("message") or {}
        if not isinstance(message, Mapping):
            return kind
        to = ", ".join(_worker(t, workers) for t in message.get("to") or [])
        return (f"mail [{_worker(message.get('sender'), workers)} → {to}] "
                f"{_cut(str(message.get('subject', '')), 100)}")
    if kind == "lease:granted":
        shared = " (shared)" if e.get("mode") == "shared" else ""
        bead = f" for {e['bead_id']}" if e.get("bead_id") else ""
        return f"[{_worker(e.get('holder'), workers)}] leased {_files(e.get('patterns'))}{bead}{shared}"
    if kind == "lease:released":
        return f"[{_worker(e.get('holder'), workers)}] released {_files(e.get('patterns'))} ({e.get('reason', '?')})"
    if kind == "lease:conflict":
        held = ", ".join(_worker(h, workers) for h in e.get("held_by") or []) or "another worker"
        return (f"[{_worker(e.get('holder'), workers)}] cannot lease {_files(e.get('files'))} for "
                f"{e.get('bead_id')}: held by {held}")
    return kind  # an event of these families this version does not know: its type


def render_event(event: Mapping[str, Any], sessions: Mapping[str, str] | None = None,
                 workers: Mapping[str, str] | None = None) -> str | None:
    """One line (``HH:MM:SS  text``; rarely a few indented more) for ``event``, or None when it is not shown.

    ``sessions`` maps session ids to the workflow step they work for (from ``workflow:session_assigned``),
    used to label session and turn events; without it they are labelled by the session id. ``workers`` maps
    a swarm worker's registered name to its runtime nickname (from ``worker:joined``), so swarm lines read
    ``[w2 AmberFalcon] …``; without it they show the name alone.
    """
    kind = str(event.get("type", ""))
    family, _, name = kind.partition(":")
    if family in ("session", "turn") or family in SWARM_FAMILIES:
        # Hidden when None on purpose (kickoff turns, tool calls that worked, a worker turning idle).
        if family in SWARM_FAMILIES:
            text = _swarm_line(kind, event, workers or {})
        else:
            text = _session_line(kind, event, sessions or {})
        return None if text is None else f"{_time(event)}  {text}"
    renderers = {"workflow": _workflow_line, "preflight": _preflight_line, "pulse": _pulse_line, "loop": _loop_line}
    text = renderers[family](name, event) if family in renderers else None
    # An event this version does not know still gets a line: its type.
    return f"{_time(event)}  {text or kind or '(event without a type)'}"


# --- progress -------------------------------------------------------------------------------------------


@dataclass
class Progress:
    """Where a workflow stands: its stage among the five, and its pulses once a plan is known."""

    stage: str = ""
    plan: list[tuple[str, str]] = field(default_factory=list)
    """The planned pulses in order: (id, title). The quick path's single pulse is ``pulse-1``."""
    current: str | None = None
    """The planned id of the pulse started last."""
    done: set[str] = field(default_factory=set)
    """Planned ids of the pulses that succeeded."""
    runs: dict[str, str] = field(default_factory=dict)
    """Pulse run id (``pulse-1-a2`` for a retry) → planned id."""
    scope_title: str = ""
    beads_planned: int = 0
    """The beads a swarm started with (``swarm:started``); 0 while no swarm runs."""
    beads_added: set[str] = field(default_factory=set)
    """Beads a person added to the epic since (``bead:created`` by a user)."""
    beads_closed: set[str] = field(default_factory=set)
    fixes: list[tuple[str, str]] = field(default_factory=list)
    """The latest fix round's pulses in order: (id, title); a fix pulse is counted among them, not the plan's."""
    fix_round: int = 0

    @classmethod
    def from_state(cls, view: Mapping[str, Any], artifacts: Mapping[str, Any] | None = None) -> Progress:
        """The progress of a workflow as ``GET /api/workflows/{id}`` (and ``/artifacts``) describe it now."""
        progress = cls(stage=str(view.get("stage") or ""))
        cards = artifacts or {}
        scope = cards.get("scope")
        if isinstance(scope, Mapping):
            progress.scope_title = str(scope.get("title") or "")
        progress.plan = _pulses(cards.get("pulses"))
        rounds = [r for r in cards.get("fix_rounds") or [] if isinstance(r, Mapping)]
        if rounds:
            progress.know_fix_round(rounds[-1])
        for run in cards.get("pulse_runs") or []:
            if not isinstance(run, Mapping) or run.get("status") == "proposed":
                continue
            planned = str(run.get("planned_pulse_id") or run.get("id"))
            progress.runs[str(run.get("id"))] = planned
            progress.current = planned
            if run.get("status") == "succeeded":
                progress.done.add(planned)
        return progress

    def feed(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "workflow:created":
            self.stage = "scoping"
        elif kind == "workflow:approval_needed":
            artifact = event.get("artifact") or {}
            if event.get("stage") == "scoping" and isinstance(artifact, Mapping):
                self.scope_title = str(artifact.get("title") or "")
            elif event.get("stage") == "planning" and isinstance(artifact, Mapping):
                self.plan = _pulses(artifact.get("pulses"))  # a revised plan replaces the last
        elif kind == "workflow:stage_changed":
            self.stage = str(event.get("to_stage") or "")
            if self.stage == "execution" and not self.plan and event.get("from_stage") == "scoping":
                # The quick path: one pulse made from the scope card. After planning, the count comes from the
                # plan card only: a plan not seen leaves the pulses uncounted rather than counted wrong.
                self.plan = [("pulse-1", self.scope_title)]
        elif kind == "pulse:started":
            planned = str(event.get("planned_pulse_id") or event.get("pulse_id"))
            self.runs[str(event.get("pulse_id"))] = planned
            self.current = planned
        elif kind == "pulse:completed" and event.get("status") == "succeeded":
            pulse = str(event.get("pulse_id"))
            self.done.add(self.runs.get(pulse, pulse))
        elif kind == "workflow:fix_round_opened":
            self.know_fix_round(event)
        elif kind == "swarm:started":
            self.beads_planned = int(event.get("beads") or 0)
        elif kind == "bead:created":
            bead = event.get("bead")
            # The planned beads are counted by swarm:started already.
            if isinstance(bead, Mapping) and bead.get("created_by") == "user":
                self.beads_added.add(str(bead.get("id")))
        elif kind == "bead:closed":
            self.beads_closed.add(str(event.get("bead_id")))

    def know_fix_round(self, fix_round: Mapping[str, Any]) -> None:
        """Count the pulses of a fix round (a ``workflow:fix_round_opened`` event, or a FixRoundView)."""
        self.fix_round = int(fix_round.get("round") or 0)
        self.fixes = [(str(p.get("pulse_id", "?")), str(p.get("title", ""))) for p in fix_round.get("pulses") or []
                      if isinstance(p, Mapping)]

    def know_swarm(self, swarm: Mapping[str, Any]) -> None:
        """Count the beads of a running swarm as ``GET /api/beads/swarm`` describes it (a SwarmView)."""
        beads = [b for b in swarm.get("beads") or [] if isinstance(b, Mapping)]
        self.beads_planned = sum(1 for b in beads if b.get("created_by", "plan") != "user")
        self.beads_added = {str(b.get("id")) for b in beads if b.get("created_by") == "user"}
        self.beads_closed = {str(b.get("id")) for b in beads if b.get("status") == "closed"}

    def bead_tag(self) -> str | None:
        """``3/6 beads closed`` once a swarm runs."""
        total = self.beads_planned + len(self.beads_added)
        if not total:
            return None
        return f"{len(self.beads_closed)}/{total} beads closed"

    def stage_tag(self) -> str | None:
        """``stage 3/5``, or None for ``done`` and unknown stages."""
        if self.stage not in STAGES:
            return None
        return f"stage {STAGES.index(self.stage) + 1}/{len(STAGES)}"

    def pulse_tag(self, planned: str | None = None) -> str | None:
        """``pulse 2/3`` for ``planned`` (default: the current pulse), or None before the plan is known; a fix
        pulse is ``fix 1/2 of round 1``."""
        planned = planned or self.current
        fix_ids = [pulse_id for pulse_id, _ in self.fixes]
        if planned is not None and planned in fix_ids:
            return f"fix {fix_ids.index(planned) + 1}/{len(fix_ids)} of round {self.fix_round}"
        ids = [pulse_id for pulse_id, _ in self.plan]
        if not ids or planned is None:
            return None
        n = ids.index(planned) + 1 if planned in ids else "?"
        return f"pulse {n}/{len(ids)}"

    def done_tag(self, planned: str | None = None) -> str | None:
        """``1/3 pulses done`` once the plan is known; ``1/2 fixes done`` when ``planned`` is a fix pulse."""
        fix_ids = {p for p, _ in self.fixes}
        if planned is not None and planned in fix_ids:
            return f"{len(self.done & fix_ids)}/{len(fix_ids)} fixes done"
        if not self.plan:
            return None
        return f"{len(self.done & {p for p, _ in self.plan})}/{len(self.plan)} pulses done"

    def summary(self) -> str:
        """``execution (stage 4/5), pulse 1/2 “middleware”``: the stage, and the pulse while one runs."""
        text = self.stage or "?"
        tag = self.stage_tag()
        if tag:
            text += f" ({tag})"
        pulse = self.pulse_tag()
        beads = self.bead_tag()
        if self.stage == "execution" and beads:
            text += f", {beads}"  # a swarm runs beads, not pulses one after another
        elif self.stage == "execution" and pulse:
            title = dict([*self.plan, *self.fixes]).get(self.current or "", "")
            text += f", {pulse}" + (f" “{_cut(title, 60)}”" if title else "")
        return text


def _pulses(value: Any) -> list[tuple[str, str]]:
    return [(str(p.get("id", "?")), str(p.get("title", ""))) for p in value or [] if isinstance(p, Mapping)]


# --- a watch, with memory -------------------------------------------------------------------------------

def _said(label: str, text: str) -> str:
    """A line of an agent's streamed text: no time (deltas have none), indented to the events' text column."""
    return f"{' ' * 10}{label}» {text}"


@dataclass
class Watch:
    """Feeds events to :func:`render_event` with the session labels; keeps the totals and the progress.

    With ``text``, the agents' messages are shown as they stream (``turn:message_delta``): each completed line
    of a reply once, shortened, indented under the events and labelled like them; what is left of a line is
    shown when the reply ends (the next reply's first delta, or the end of the turn). Thinking is not shown.
    """

    sessions: dict[str, str] = field(default_factory=dict)
    """Session id → its label: the workflow step, or a swarm worker's nickname and bead (``w2 square``)."""
    workers: dict[str, str] = field(default_factory=dict)
    """A swarm worker's registered name → its runtime nickname (``AmberFalcon`` → ``w2``)."""
    tokens: int = 0
    cost_usd: float = 0.0
    turns: int = 0
    progress: Progress = field(default_factory=Progress)
    text: bool = False
    _partial: dict[str, str] = field(default_factory=dict)
    """Turn id → the streamed line not finished yet."""
    _shown: dict[str, int] = field(default_factory=dict)
    """Turn id → lines shown of its current reply (to say so when a reply starts again)."""
    _step: dict[str, int] = field(default_factory=dict)
    """Turn id → the reply its latest delta belonged to."""

    def feed(self, event: Mapping[str, Any]) -> str | None:
        kind = event.get("type")
        if kind in DELTA_EVENTS:
            return self._delta(event) if self.text else None
        if kind == "workflow:session_assigned" and event.get("session_id"):
            self.sessions[str(event["session_id"])] = str(event.get("step", ""))
        elif kind == "worker:joined" and event.get("worker"):
            self.workers[str(event["worker"])] = str(event.get("nickname") or event["worker"])
        elif kind == "bead:claimed" and event.get("session_id"):
            # A worker's session has no workflow step: its turns are labelled by the worker and the bead.
            self._label_worker_session(str(event["session_id"]), event.get("worker"), event.get("bead_id"))
        self.progress.feed(event)
        line = render_event(event, self.sessions, self.workers)
        if kind == "turn:completed":
            self.turns += 1
            self.tokens += sum(int(event.get(k, 0) or 0) for k in (
                "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
            self.cost_usd += float(event.get("cost_usd", 0.0) or 0.0)
            if line is not None:
                line += f"  [total {self.total()}]"
        if line is not None:
            line = self._tagged(event, line)
        # A reply's last line is complete when the next reply starts (a delta of a new step) or the turn ends.
        # Not at turn:tool_started: recorded events reach the stream a little after the live deltas, so the
        # next reply's text may already be arriving.
        if kind == "turn:completed":
            rest = self._end_reply(event)
            if rest:
                line = rest if line is None else f"{rest}\n{line}"
        return line

    def total(self) -> str:
        return f"{_tokens(self.tokens)} tokens, ${self.cost_usd:.4f}"

    def know_swarm(self, swarm: Mapping[str, Any]) -> None:
        """Learn a running swarm's workers, their sessions and the beads closed from its SwarmView
        (``GET /api/beads/swarm``), for a watch that joins after ``swarm:started``."""
        for worker in swarm.get("workers") or []:
            if not isinstance(worker, Mapping) or not worker.get("name"):
                continue
            self.workers[str(worker["name"])] = str(worker.get("nickname") or worker["name"])
            if worker.get("session_id") and worker.get("bead_id"):
                self._label_worker_session(str(worker["session_id"]), worker["name"], worker["bead_id"])
        self.progress.know_swarm(swarm)

    def _label_worker_session(self, session_id: str, worker: Any, bead_id: Any) -> None:
        who = self.workers.get(str(worker)) or str(worker)
        self.sessions[session_id] = f"{who} {bead_id}"

    def _tagged(self, event: Mapping[str, Any], line: str) -> str:
        kind = event.get("type")
        tag = None
        if kind == "workflow:stage_changed":
            tag = self.progress.stage_tag()
        elif kind == "pulse:started":
            tag = self.progress.pulse_tag(self.progress.runs.get(str(event.get("pulse_id"))))
        elif kind == "pulse:completed" and event.get("status") == "succeeded":
            pulse = str(event.get("pulse_id"))
            tag = self.progress.done_tag(self.progress.runs.get(pulse, pulse))
        elif kind == "bead:closed":
            tag = self.progress.bead_tag()
        return f"{line}  [{tag}]" if tag else line

    def _delta(self, event: Mapping[str, Any]) -> str | None:
        if event.get("type") != "turn:message_delta":
            return None
        turn = str(event.get("turn_id", ""))
        label = _label(event, self.sessions)
        lines = []
        step = int(event.get("step", 0) or 0)
        if self._step.get(turn, step) != step:
            # A new reply of the same turn: what is left of the previous one's last line is complete.
            rest = self._partial.pop(turn, "")
            if rest.strip():
                lines.append(_said(label, _cut(rest, 110)))
        self._step[turn] = step
        buffered = self._partial.get(turn, "")
        if event.get("restart"):
            if self._shown.get(turn) or buffered.strip():
                lines.append(_said(label, "(the model's reply broke off; it starts again)"))
            buffered, self._shown[turn] = "", 0
        *complete, buffered = (buffered + str(event.get("text", ""))).split("\n")
        self._partial[turn] = buffered
        for text in complete:
            if text.strip():
                lines.append(_said(label, _cut(text, 110)))
                self._shown[turn] = self._shown.get(turn, 0) + 1
        return "\n".join(lines) or None

    def _end_reply(self, event: Mapping[str, Any]) -> str | None:
        """The rest of the reply's last line, now that the reply ended."""
        turn = str(event.get("turn_id", ""))
        rest = self._partial.pop(turn, "")
        self._shown.pop(turn, None)
        self._step.pop(turn, None)
        return _said(_label(event, self.sessions), _cut(rest, 110)) if rest.strip() else None
