"""What a finished agent turn means for its workflow: a card, a pulse completion, a nudge, a halt.

:func:`handle_turn` runs in the workflow's mailbox on the recorded state and records its meaning;
everything it needs from other services (the pulse session's refusals, the worktree's tracked
changes) is asked for by the driver beforehand, so this stays a pure function of its inputs.
"""

from __future__ import annotations

from typing import Any

import msgspec

from autarch.contracts.agents import BLOCK_TOOL_ARGUMENTS, SessionView
from autarch.contracts.events import TurnCompleted
from autarch.contracts.git import TrackedChanges
from autarch.runtime.settings import Settings

from . import kickoffs
from .completion import CONVENTIONAL_COMMIT, completion_rejections
from .domainmodel import Workflow
from .lifecycle import BLOCK_OF_STEP, LifecycleError
from .state import PulseRun, StageCard
from .steps import step_over

__all__ = ["handle_turn"]



def handle_turn(wf: Workflow, step: str, event: TurnCompleted, settings: Settings, *,
                session: SessionView | None = None, tracked: TrackedChanges | None = None) -> None:
    """Record the meaning of one finished turn of ``step``'s session (idempotent on the turn id).

    Args:
        session: the pulse's agent session (its refused ``complete_pulse`` calls), for pulse steps.
        tracked: the worktree's modified tracked files, for a ``complete_preflight`` turn.
    """
    if event.turn_id in wf.seen:
        return
    previous = wf.sessions[step].last_outcome if step in wf.sessions else None
    wf.turn_handled(turn_id=event.turn_id, step=step, outcome=event.outcome)
    if step_over(wf, step):
        return  # a late outcome (a turn cancelled as its finished step's session closed) changes nothing
    run = wf.run(step.split(":", 1)[1]) if step.startswith("pulse:") else None
    if run is not None and run.ending is not None:
        return  # the pulse is ending (stopped by the user, or failed): a late outcome changes nothing
    if run is not None and session is not None:
        # The run counts the refusals it recorded, so each refusal is recorded once whatever turn reports it.
        for _, message, revealed in completion_rejections(session)[run.completion_rejections:]:
            wf.reject_completion(run.id, [message], revealed)
    outcome = event.outcome
    if outcome == "cancelled":
        if wf.halt is None:  # cancelled by someone else than the workflow's stop
            wf.halt_for("stopped", event.detail or "the agent's turn was cancelled", details={"step": step},
                        pulse_id=run.id if run else None)
            if run is not None:
                wf.end_pulse_as(run.id, "stopped", event.detail or "cancelled")
        return
    if outcome in ("error", "budget_exceeded", "step_limit"):
        _failed_turn(wf, step, run, outcome, event.detail or outcome, again=previous == outcome)
        return
    turns = sum(1 for m in wf.outbox if m.step == step) + 1
    if run is not None and turns >= settings.pulse_max_turns and not (
            outcome == "block" and event.tool == "complete_pulse"):
        wf.end_pulse_as(run.id, "failed", f"iteration limit: {turns} turns without completing the pulse")
        return
    block = BLOCK_OF_STEP.get(step, "complete_pulse")
    if outcome == "end_turn":
        if wf.nudges.get(step, 0) >= settings.stage_nudges:
            message = f"the {step} agent ended its turn without {block} {settings.stage_nudges + 1} times"
            if run is not None:
                wf.end_pulse_as(run.id, "failed", message)
            else:
                wf.record_error(stage=wf.stage, message=message)
                wf.halt_for("error", message, details={"step": step})
        else:
            wf.nudge(step, kickoffs.nudge(step, block))
        return
    _block(wf, step, run, event.tool or "", event.arguments or {}, tracked)


def _failed_turn(wf: Workflow, step: str, run: PulseRun | None, outcome: str, detail: str, *,
                 again: bool) -> None:
    if step == "preflight":
        wf.complete_preflight(status="failed", error=detail)
        wf.abandon(f"preflight failed: {detail}")
    elif run is not None and outcome == "step_limit":
        wf.end_pulse_as(run.id, "failed", f"iteration limit: {detail}")
    elif run is not None and outcome == "error" and again:
        # Asked again by a resume, the pulse's agent failed at once the same way: its conversation cannot go on
        # (a model request refused whatever is added to it), and resuming it again would fail for ever. The
        # pulse fails (its work kept in a recovery commit), so the next resume runs it as a new attempt.
        wf.end_pulse_as(run.id, "failed", f"its agent failed again after a resume: {detail}")
    else:
        # The pulse (or stage) stays open: resume asks the same agent session to carry on.
        wf.record_error(stage=wf.stage, message=f"{step}: {detail}")
        wf.halt_for("error", f"the {step} agent failed: {detail}", details={"step": step},
                    pulse_id=run.id if run else None)


def _block(wf: Workflow, step: str, run: PulseRun | None, tool: str, args: dict[str, Any],
           tracked: TrackedChanges | None) -> None:
    if tool == "ask_questions":
        wf.halt_for("questions", "the agent asks questions; answer them to continue",
                    pulse_id=run.id if run else None, details={"step": step, "questions": args.get("questions", [])})
    elif tool == "request_extension":
        if run is not None:
            wf.extend_pulse(run.id)
        wf.halt_for("extension_requested", f"the {step} agent asks for more time: {args.get('reason', '')}",
                    pulse_id=run.id if run else None, details={"step": step, **args})
    elif tool in ("submit_scope", "submit_research", "submit_plan"):
        _submit(wf, step, tool, args)
    elif tool == "complete_preflight":
        _complete_preflight(wf, args, tracked)
    elif tool == "complete_pulse" and run is not None:
        _complete_pulse(wf, step, run, args)
    elif tool == "complete_review":
        if not wf.awaiting_approval:
            wf.nudge(step, kickoffs.nudge(step, BLOCK_OF_STEP[step]))


def _submit(wf: Workflow, step: str, tool: str, args: dict[str, Any]) -> None:
    card: StageCard = msgspec.convert(args, BLOCK_TOOL_ARGUMENTS[tool])
    try:
        wf.submit_artifact(step, card)  # the turn id already made this once-only (TurnHandled)
    except LifecycleError as exc:
        wf.queue_message(step, f"{tool} was refused: {exc.message}. Fix it and call {tool} again.")


def _complete_preflight(wf: Workflow, args: dict[str, Any], tracked: TrackedChanges | None) -> None:
    success = bool(args.get("buildSuccess"))
    modified = [f"{f.path} ({f.change})" for f in tracked.files] if tracked is not None else []
    if modified:
        # Seed 000's critical constraint: preflight may only create untracked files (node_modules, bin/…).
        error: str | None = f"preflight modified tracked files, which it must not do: {', '.join(modified)}"
    elif not success:
        error = "the baseline build does not succeed"
    else:
        error = None
    wf.complete_preflight(status="failed" if error else "completed", summary=args.get("summary"),
                          setup_commands=list(args.get("setupCommands") or []), build_success=success,
                          baselines_recorded=int(args.get("baselinesRecorded") or 0), error=error)
    if modified:
        wf.abandon(f"preflight failed: {error}")
    elif not success:
        wf.abandon(f"preflight failed: {args.get('summary', 'the build does not succeed')}")


def _complete_pulse(wf: Workflow, step: str, run: PulseRun, args: dict[str, Any]) -> None:
    # The runner only lets complete_pulse end a turn once no tool failure is left unresolved, or once the
    # escape hatch was revealed and the agent listed what it could not fix.
    summary = str(args.get("summary", "")).strip()
    if not CONVENTIONAL_COMMIT.match(summary.partition("\n")[0]):
        wf.queue_message(step, "complete_pulse was not accepted: the summary's first line must be a Conventional "
                               "Commit such as `feat(auth): validate JWT tokens`. Call complete_pulse again.")
        return
    wf.accept_completion(run.id, description=summary, files_changed=list(args.get("filesChanged") or []),
                         unresolved_issues=list(args.get("unresolvedIssues") or []))
