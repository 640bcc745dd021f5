"""The user's controls over a halted workflow, as commands on the recorded state (they run under its lock).

Each raises ``LifecycleError`` before recording anything when it does not fit, so a refused control
changes nothing; the driver then carries the workflow on from what was recorded.
"""

from __future__ import annotations

from autarch.contracts.execution import RESUMABLE
from autarch.contracts.workflows import WorkflowErrorCode

from . import kickoffs
from .lifecycle import LifecycleError, validate_answers
from .model import Workflow
from .state import Halt
from .steps import agent_waits

__all__ = ["abandon_waiting", "answer_questions", "approve_extension", "check_open", "resume"]



def check_open(wf: Workflow) -> None:
    """Raise ``finished`` for a workflow that is done or abandoned."""
    if wf.abandoned or wf.stage == "done":
        raise LifecycleError(WorkflowErrorCode.FINISHED,
                             f"the workflow is {'abandoned' if wf.abandoned else 'done'}", stage=wf.stage)


def resume(wf: Workflow, message: str | None, *, source: str | None = None,
           halt_version: int | None = None) -> None:
    """Lift a resumable halt.

    An agent whose turn failed or was stopped mid-work — a running pulse's included — is asked to carry on
    in its own session, with its conversation and the worktree as they are. A failed or stopped pulse
    runs again as a new attempt, and a step the driver could not do is retried (both by ``next_action``).
    """
    check_open(wf)
    halt = wf.resume(RESUMABLE, message, source=source, halt_version=halt_version)
    step = halt.step
    # A turn interrupted for lack of space is run again by the agent runner itself: nothing to tell its agent.
    if step is not None and halt.reason != "disk_full" and agent_waits(wf, step):
        wf.queue_message(step, kickoffs.resume_note(halt.reason, message))


def abandon_waiting(wf: Workflow, version: int, reason: str, source: str) -> None:
    """End the workflow for good while it still waits for the user where ``version`` says: at the card recorded
    at that version, or at the halt. Nothing works meanwhile, so there is no agent to stop (the driver closes
    the sessions and removes the worktree, as for any abandoned workflow)."""
    check_open(wf)
    at_card = wf.awaiting_approval and wf.card_version == version
    at_halt = wf.halt is not None and wf.halt_version == version
    if not (at_card or at_halt):
        where = ("another card awaits approval" if wf.awaiting_approval else
                 f"it is halted again ({wf.halt.reason})" if wf.halt is not None else "it went on")
        raise LifecycleError(WorkflowErrorCode.CARD_MOVED_ON,
                             f"the workflow no longer waits where this answers (version {version}): {where}",
                             stage=wf.stage, card_version=version)
    wf.abandon(reason, source=source)


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
