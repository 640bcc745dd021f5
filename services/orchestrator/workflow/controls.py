"""The user's controls over a halted workflow, as commands on the recorded state (they run under its lock).

Each raises ``LifecycleError`` before recording anything when it does not fit, so a refused control
changes nothing; the driver then carries the workflow on from what was recorded.
"""

from __future__ import annotations

from autarch.contracts.execution import HaltReason
from autarch.contracts.workflows import WorkflowErrorCode

from . import kickoffs
from .lifecycle import LifecycleError, validate_answers
from .model import Workflow
from .state import Halt
from .steps import agent_waits

__all__ = ["answer_questions", "approve_extension", "check_open", "resume"]

RESUMABLE: tuple[HaltReason, ...] = ("unresolved_issues", "pulse_failed", "stopped", "error", "disk_full")
"""Halts that ``resume`` lifts (an extension request and questions have their own control)."""


def check_open(wf: Workflow) -> None:
    """Raise ``finished`` for a workflow that is done or abandoned."""
    if wf.abandoned or wf.stage == "done":
        raise LifecycleError(WorkflowErrorCode.FINISHED,
                             f"the workflow is {'abandoned' if wf.abandoned else 'done'}", stage=wf.stage)


def resume(wf: Workflow, message: str | None) -> None:
    """Lift a resumable halt.

    An agent whose turn failed or was stopped mid-work — a running pulse's included — is asked to carry on
    in its own session, with its conversation and the worktree as they are. A failed or stopped pulse
    runs again as a new attempt, and a step the driver could not do is retried (both by ``next_action``).
    """
    check_open(wf)
    halt = wf.resume(RESUMABLE, message)
    step = halt.step
    # A turn interrupted for lack of space is run again by the agent runner itself: nothing to tell its agent.
    if step is not None and halt.reason != "disk_full" and agent_waits(wf, step):
        wf.queue_message(step, kickoffs.resume_note(halt.reason, message))


def approve_extension(wf: Workflow, message: str | None) -> None:
    """Let the agent that asked for more time continue in a new turn."""
    check_open(wf)
    halt = wf.resume(("extension_requested",), message)
    wf.queue_message(_asking_step(halt), kickoffs.extension_approved(halt.details, message))


def answer_questions(wf: Workflow, answers: list[str]) -> None:
    """Hand the user's answers to the agent that asked; ``bad_request`` unless they fit the questions."""
    check_open(wf)
    if wf.halt is not None and wf.halt.reason == "questions":
        validate_answers(wf.halt.details.questions or [], answers)
    halt = wf.resume(("questions",), "\n".join(answers))
    questions = halt.details.questions or []
    wf.queue_message(_asking_step(halt), kickoffs.questions_answered(questions, answers))


def _asking_step(halt: Halt) -> str:
    # An extension request and questions are always a working agent's (``outcomes._block`` records its step).
    assert halt.step is not None, halt
    return halt.step
