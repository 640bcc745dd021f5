"""What a finished agent turn means for its workflow: a card, a pulse completion, a nudge, a halt.

:func:`handle_turn` runs under the workflow's lock on the recorded state and records its meaning;
everything it needs from other services (the pulse session's refusals, the worktree's tracked
changes) is asked for by the driver beforehand, so this stays a pure function of its inputs.
"""

from __future__ import annotations

from typing import Any

import msgspec

from autarch.contracts.agents import (
    BLOCK_TOOL_ARGUMENTS,
    AskQuestionsArgs,
    CompletePreflightArgs,
    CompletePulseArgs,
    RequestExtensionArgs,
    SessionView,
    SubmitPlanArgs,
    SubmitResearchArgs,
    SubmitScopeArgs,
)
from autarch.contracts.events import TurnCompleted
from autarch.contracts.git import TrackedChanges
from autarch.runtime.settings import OrchestratorSettings

from . import kickoffs
from .completion import CONVENTIONAL_COMMIT, completion_rejections
from .lifecycle import BLOCK_OF_STEP, LifecycleError
from .model import Workflow
from .state import HaltDetails, PulseRun, StageCard
from .steps import step_over

__all__ = ["handle_turn"]



def handle_turn(wf: Workflow, step: str, event: TurnCompleted, settings: OrchestratorSettings, *,
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
            wf.halt_for("stopped", event.detail or "the agent's turn was cancelled", details=HaltDetails(step=step),
                        pulse_id=run.id if run else None)
            if run is not None:
                wf.end_pulse_as(run.id, "stopped", event.detail or "cancelled")
        return
    if outcome in ("error", "budget_exceeded", "step_limit", "refusal", "context_overflow"):
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
                wf.halt_for("error", message, details=HaltDetails(step=step))
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
    elif run is not None and outcome in ("error", "refusal", "context_overflow") and again:
        # Asked again by a resume, the pulse's agent failed at once the same way: its conversation cannot go on
        # (a model request refused whatever is added to it), and resuming it again would fail for ever. The
        # pulse fails (its work kept in a recovery commit), so the next resume runs it as a new attempt.
        wf.end_pulse_as(run.id, "failed", f"its agent failed again after a resume: {detail}")
    else:
        # The pulse (or stage) stays open: resume asks the same agent session to carry on.
        wf.record_error(stage=wf.stage, message=f"{step}: {detail}")
        wf.halt_for("error", f"the {step} agent {'stopped' if outcome == 'refusal' else 'failed'}: {detail}",
                    details=HaltDetails(step=step),
                    pulse_id=run.id if run else None)


def _block(wf: Workflow, step: str, run: PulseRun | None, tool: str, arguments: dict[str, Any],
           tracked: TrackedChanges | None) -> None:
    if tool == "complete_review":
        if not wf.awaiting_approval:
            wf.nudge(step, kickoffs.nudge(step, BLOCK_OF_STEP[step]))
        return
    kind = BLOCK_TOOL_ARGUMENTS.get(tool)
    if kind is None:
        return
    try:
        # Decoded once, here: the runner accepted the call only with arguments of this shape, so a failure means
        # a runner of another version; the agent is told rather than the workflow stalled.
        args = msgspec.convert(arguments, kind)
    except msgspec.ValidationError as exc:
        wf.queue_message(step, f"{tool} was not accepted: its arguments are invalid ({exc}). Call {tool} again.")
        return
    if isinstance(args, AskQuestionsArgs):
        wf.halt_for("questions", "the agent asks questions; answer them to continue",
                    pulse_id=run.id if run else None, details=HaltDetails(step=step, questions=list(args.questions)))
    elif isinstance(args, RequestExtensionArgs):
        if run is not None:
            wf.extend_pulse(run.id)
        wf.halt_for("extension_requested", f"the {step} agent asks for more time: {args.reason}",
                    pulse_id=run.id if run else None,
                    details=HaltDetails(step=step, reason=args.reason, completed=list(args.completed),
                                        remaining=list(args.remaining)))
    elif isinstance(args, SubmitScopeArgs | SubmitResearchArgs | SubmitPlanArgs):
        _submit(wf, step, tool, args)
    elif isinstance(args, CompletePreflightArgs):
        _complete_preflight(wf, args, tracked)
    elif isinstance(args, CompletePulseArgs) and run is not None:
        _complete_pulse(wf, step, run, args)


def _submit(wf: Workflow, step: str, tool: str, card: StageCard) -> None:
    try:
        wf.submit_artifact(step, card)  # the turn id already made this once-only (TurnHandled)
    except LifecycleError as exc:
        wf.queue_message(step, f"{tool} was refused: {exc.message}. Fix it and call {tool} again.")


def _complete_preflight(wf: Workflow, args: CompletePreflightArgs, tracked: TrackedChanges | None) -> None:
    modified = [f"{f.path} ({f.change})" for f in tracked.files] if tracked is not None else []
    if modified:
        # Seed 000's critical constraint: preflight may only create untracked files (node_modules, bin/…).
        error: str | None = f"preflight modified tracked files, which it must not do: {', '.join(modified)}"
    elif not args.build_success:
        error = "the baseline build does not succeed"
    else:
        error = None
    wf.complete_preflight(status="failed" if error else "completed", summary=args.summary,
                          setup_commands=list(args.setup_commands), build_success=args.build_success,
                          baselines_recorded=args.baselines_recorded, error=error)
    if args.recommended_mode is not None:
        wf.advise_swarm(args.recommended_mode)
    if modified:
        wf.abandon(f"preflight failed: {error}")
    elif not args.build_success:
        wf.abandon(f"preflight failed: {args.summary}")


def _complete_pulse(wf: Workflow, step: str, run: PulseRun, args: CompletePulseArgs) -> None:
    # The runner only lets complete_pulse end a turn once no tool failure is left unresolved, or once the
    # escape hatch was revealed and the agent listed what it could not fix.
    summary = args.summary.strip()
    if not CONVENTIONAL_COMMIT.match(summary.partition("\n")[0]):
        wf.queue_message(step, "complete_pulse was not accepted: the summary's first line must be a Conventional "
                               "Commit such as `feat(auth): validate JWT tokens`. Call complete_pulse again.")
        return
    wf.accept_completion(run.id, description=summary, files_changed=list(args.files_changed),
                         unresolved_issues=list(args.unresolved_issues or []))
