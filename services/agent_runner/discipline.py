"""A swarm worker's discipline (seed 002), kept by the runner rather than asked of the model.

- **Verification**: when a worker calls ``complete_pulse``, the runner runs the bead's ``verify`` commands (and,
  for a ``tdd-required`` bead, its green step) fresh, through the tools service, before it lets the turn end.
  A failure refuses the close with the command's output, in the same turn, and the model can act on it; a
  pass ends the turn with the evidence in its outcome.
- **TDD**: for a ``tdd-required`` bead, a production file (one that is not a test) may be written or edited
  only after the red step ran in this session and failed. Edits before it are refused.

The edit rule and the red step are functions of the session's recorded tool calls, so a turn replayed after a
crash decides exactly as it did; verification runs are recorded (``Session.record_verification``) before the
turn acts on them, and their tool call ids are derived from the ``complete_pulse`` call, so a repeat is
answered by the tools service with the recorded result.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Literal

from autarch.contracts.beads import VerificationEvidence, VerificationRun, WorkerDiscipline

from .domainmodel import ToolCall

__all__ = ["decisions_command", "edit_refusal", "is_test_path", "red_run", "refusal_text", "run_verification", "unread",
           "without_red_runs"]

_EDIT_TOOLS = ("write_file", "edit_file", "multi_edit")
_TEST_PATH = re.compile(
    r"(^|/)(tests?|spec|specs|__tests__)/|(^|/)test_[^/]*$|(^|/)[^/]*_test\.[^/]+$|(^|/)[^/]*\.(test|spec)\.[^/]+$"
    r"|(^|/)conftest\.py$")
"""Where tests live in the common layouts (pytest, go, jest, rspec): everything else is production code."""
_EXCERPT = 1500
_POLICY = '"policy": '
"""Marks an error result that is the discipline's refusal (see ``without_red_runs``)."""

RunShell = Callable[[str, str], Awaitable[tuple[str, bool, float]]]
"""(tool call id, command) → (the tool's output, is_error, milliseconds)."""

VerifyStep = Literal["verify", "tdd-red", "tdd-green", "decisions"]


def is_test_path(path: str) -> bool:
    return bool(_TEST_PATH.search(path.replace("\\", "/").removeprefix("./")))


def _exit_code(output: str | None) -> int | None:
    try:
        body = json.loads(output or "")
    except ValueError:
        return None
    code = body.get("exit_code") if isinstance(body, dict) else None
    return code if isinstance(code, int) else None


def red_run(history: Iterable[ToolCall], red: str) -> ToolCall | None:
    """The session's first run of the red command that failed (the proof a test was red), if any."""
    wanted = red.strip()
    for call in history:
        if call.name != "shell" or not call.done or not isinstance(call.input, dict):
            continue
        if str(call.input.get("command", "")).strip() != wanted:
            continue
        code = _exit_code(call.output)
        if code is not None and code != 0:
            return call
    return None


def without_red_runs(discipline: WorkerDiscipline | None, history: list[ToolCall]) -> list[ToolCall]:
    """``history`` without the runs of a tdd-required bead's red command: their failure is the point, not a
    failure left unresolved (the runner runs green itself before it lets the bead close)."""
    if discipline is None:
        return history
    # A write the discipline refused is a rule kept, not a failure to put right.
    history = [c for c in history if not (c.is_error and c.output and _POLICY in c.output)]
    if discipline.testing_mode != "tdd-required" or discipline.tdd_steps is None:
        return history
    red = discipline.tdd_steps.red.strip()
    return [c for c in history if not (c.name == "shell" and isinstance(c.input, dict)
                                       and str(c.input.get("command", "")).strip() == red)]


def unread(discipline: WorkerDiscipline, history: Iterable[ToolCall]) -> list[str]:
    """The ``read_first`` files this session has not read yet (a resumed worker re-reads before acting)."""
    read = {str(c.input.get("path", "")).removeprefix("./") for c in history
            if c.name == "read_file" and c.done and not c.is_error and isinstance(c.input, dict)}
    return [p for p in discipline.read_first if p.removeprefix("./") not in read]


def edit_refusal(discipline: WorkerDiscipline | None, history: Iterable[ToolCall], name: str,
                 args: Any, *, reread_needed: bool = False) -> str | None:
    """The error a write or edit gets before the red step failed (tdd-required), or before a resumed worker
    re-read what its handoff names; else None."""
    if discipline is None or name not in _EDIT_TOOLS or not isinstance(args, dict):
        return None
    history = list(history)
    if reread_needed and discipline.bead_file:
        return json.dumps({"error": f"{name} refused: your context was just compacted. Read your bead again "
                                    f"first ({discipline.bead_file}: its scope, checks and decisions), then edit.",
                           "policy": "reread-after-compaction"})
    missing = unread(discipline, history)
    if missing:
        return json.dumps({"error": f"{name} refused: this session resumes bead {discipline.bead_id} from a "
                                    f"handoff; read these first with read_file: {', '.join(missing)}.",
                           "policy": "read-first"})
    if discipline.testing_mode != "tdd-required" or discipline.tdd_steps is None:
        return None
    path = str(args.get("path", ""))
    if not path or is_test_path(path):
        return None
    if red_run(history, discipline.tdd_steps.red) is not None:
        return None
    return json.dumps({"error": f"{name} {path} refused: bead {discipline.bead_id} is tdd-required, and its red "
                               f"step has not failed yet in this session. Write the test first, run "
                               f"`{discipline.tdd_steps.red}` with shell and see it fail for the expected reason, "
                               "then change production code.", "policy": "tdd-red-first"})


def _run_of(step: VerifyStep, command: str, output: str, is_error: bool, ms: float, at: datetime,
            *, expect_failure: bool = False) -> VerificationRun:
    code = _exit_code(output)
    failed = is_error or code != 0
    passed = (code is not None and code != 0) if expect_failure else (not failed and code == 0)
    return VerificationRun(step=step, command=command, exit_code=code, passed=passed,
                           output_excerpt=_excerpt(output), output_digest=_digest(output), ran_at=at,
                           duration_ms=round(ms, 3))


def _excerpt(output: str) -> str:
    try:
        body = json.loads(output)
    except ValueError:
        body = None
    if isinstance(body, dict):
        text = "\n".join(str(body.get(k) or "") for k in ("stdout", "stderr", "error") if body.get(k))
    else:
        text = output
    return text[-_EXCERPT:]


def _digest(output: str) -> str:
    return "sha256:" + hashlib.sha256(output.encode()).hexdigest()


async def run_verification(discipline: WorkerDiscipline, *, history: list[ToolCall], call_id: str,
                           shell: RunShell) -> VerificationEvidence:
    """The bead's verification, run now: red from the session's record, then green and every verify command."""
    runs: list[VerificationRun] = []
    now = datetime.now(UTC)
    if discipline.testing_mode == "tdd-required" and discipline.tdd_steps is not None:
        red = red_run(history, discipline.tdd_steps.red)
        if red is None:
            runs.append(VerificationRun(step="tdd-red", command=discipline.tdd_steps.red, exit_code=None,
                                        passed=False, output_excerpt="the red step never failed in this session",
                                        ran_at=now))
        else:
            runs.append(_run_of("tdd-red", discipline.tdd_steps.red, red.output or "", False,
                                red.duration_ms or 0.0, now, expect_failure=True))
        commands: list[tuple[VerifyStep, str]] = [("tdd-green", discipline.tdd_steps.green)]
    else:
        commands = []
    commands += [("verify", c) for c in discipline.verify]
    check = decisions_command(discipline)
    if check is not None:
        commands.append(("decisions", check))
    for i, (step, command) in enumerate(commands):
        started = time.perf_counter()
        at = datetime.now(UTC)
        output, is_error, ms = await shell(f"{call_id}.{step}.{i}", command)
        runs.append(_run_of(step, command, output, is_error, ms or (time.perf_counter() - started) * 1000, at))
        if not runs[-1].passed:
            break  # the rest would only be noise beside the first failure
    return VerificationEvidence(bead_id=discipline.bead_id, testing_mode=discipline.testing_mode,
                                passed=bool(runs) and all(r.passed for r in runs), runs=runs,
                                recorded_at=datetime.now(UTC))


def decisions_command(discipline: WorkerDiscipline) -> str | None:
    """The shell check that every decision reference of the bead is defined in its feature's CONTEXT.md, when the
    file exists (none to check, or no file: passes saying so). Run like a verify command, so it is sandboxed,
    recorded and part of the evidence."""
    if not discipline.decision_refs or not discipline.context_file:
        return None
    path = shlex.quote(discipline.context_file)
    refs = " ".join(shlex.quote(ref) for ref in discipline.decision_refs)
    # A reference counts as defined when it appears as a word of the file (``D1``, ``**D1**:``, ``### D1 —``).
    return (f"if [ ! -f {path} ]; then echo no {path}: decisions not checked; exit 0; fi; "
            f"missing=''; for d in {refs}; do grep -qw -F -- \"$d\" {path} || missing=\"$missing $d\"; done; "
            f"if [ -n \"$missing\" ]; then echo not defined in {path}:\"$missing\"; exit 1; fi; "
            f"echo decisions defined in {path}: {refs}")


def refusal_text(evidence: VerificationEvidence) -> str:
    """What the model is told when its ``complete_pulse`` is refused for a failed verification."""
    failed = next((r for r in evidence.runs if not r.passed), None)
    if failed is None:
        return "Completion refused: the bead has no verification that passed."
    if failed.step == "decisions":
        return json.dumps({"error": f"Completion refused: bead {evidence.bead_id} references decisions its feature's "
                                    "CONTEXT.md does not define (see the output). Report it to the coordinator: "
                                    "the bead's decision references need a person.",
                           "output": failed.output_excerpt})
    if failed.step == "tdd-red":
        what = f"the red step `{failed.command}` never failed in this session"
    else:
        how = "did not finish" if failed.exit_code is None else f"exited {failed.exit_code}"
        what = f"`{failed.command}` ({failed.step}) {how}"
    return json.dumps({"error": f"Completion refused: verification of bead {evidence.bead_id} failed: {what}. "
                                "Fix it within the bead's files, then call complete_pulse again.",
                       "output": failed.output_excerpt})
