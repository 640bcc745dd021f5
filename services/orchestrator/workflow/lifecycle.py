"""The stage machine's rules, as pure functions of the workflow's state (no events, no I/O)."""

from __future__ import annotations

import re
from typing import Any

from autarch.contracts.agents import PlannedPulse, Question, SubmitScopeArgs
from autarch.contracts.errors import ErrorCode
from autarch.contracts.workflows import WorkflowErrorCode

from ..refusal import Refusal
from .state import Stage

__all__ = [
    "ARTIFACT_STAGES",
    "BLOCK_OF_STEP",
    "LifecycleError",
    "next_stage",
    "quick_pulse",
    "revision_request",
    "validate_answers",
    "validate_plan",
]

ARTIFACT_STAGES = ("scoping", "research", "planning", "review")
"""The stages that end with a card the user approves (execution ends by itself)."""

_FULL_NEXT: dict[str, Stage] = {"scoping": "research", "research": "planning", "planning": "execution",
                                 "review": "done"}


class LifecycleError(Refusal):
    """A command the workflow's current state does not allow; nothing is recorded."""

    @classmethod
    def wrong_stage(cls, stage: str, expected: str, what: str) -> LifecycleError:
        return cls(WorkflowErrorCode.WRONG_STAGE, f"{what} belongs to the {expected} stage; the workflow is in {stage}",
                   stage=stage, expected=expected)

    @classmethod
    def not_found(cls, message: str, **details: Any) -> LifecycleError:
        return cls(ErrorCode.NOT_FOUND, message, **details)


def next_stage(stage: str, path: str | None) -> Stage:
    """The stage that approval of ``stage``'s card leads to (quick skips research and planning)."""
    if stage == "scoping" and path == "quick":
        return "execution"
    return _FULL_NEXT[stage]


_PULSE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,55}\Z")


def validate_plan(pulses: list[dict[str, Any]]) -> None:
    """Raise ``invalid_plan`` unless pulse ids are unique and ``dependsOn`` names known pulses without a cycle."""
    ids = [p["id"] for p in pulses]
    if not pulses:
        raise LifecycleError(WorkflowErrorCode.INVALID_PLAN, "a plan needs at least one pulse")
    bad = [i for i in ids if not _PULSE_ID.match(i)]
    if bad:
        # Pulse ids name git branches and event subjects: letters, digits, '-' and '_' only.
        raise LifecycleError(WorkflowErrorCode.INVALID_PLAN,
                             f"pulse ids must be 1-56 letters, digits, '-' or '_' (starting alphanumeric): {bad}",
                             pulses=bad)
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise LifecycleError(WorkflowErrorCode.INVALID_PLAN, f"duplicate pulse ids: {duplicates}", pulses=duplicates)
    deps = {p["id"]: list(p.get("dependsOn") or []) for p in pulses}
    for pulse_id, needs in deps.items():
        unknown = [d for d in needs if d not in deps]
        if unknown:
            raise LifecycleError(WorkflowErrorCode.INVALID_PLAN, f"pulse {pulse_id!r} depends on unknown {unknown}",
                                 pulse=pulse_id, unknown=unknown)
    # Depth-first search with colours: meeting a grey node again means a cycle.
    colour: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        colour[node] = 1
        for dep in deps[node]:
            if colour.get(dep) == 1:
                cycle = [*trail[trail.index(dep):], dep] if dep in trail else [node, dep]
                raise LifecycleError(WorkflowErrorCode.INVALID_PLAN, f"dependency cycle: {' -> '.join(cycle)}",
                                     cycle=cycle)
            if colour.get(dep) is None:
                visit(dep, [*trail, dep])
        colour[node] = 2

    for pulse_id in deps:
        if pulse_id not in colour:
            visit(pulse_id, [pulse_id])


def quick_pulse(scope: SubmitScopeArgs) -> PlannedPulse:
    """The one pulse of the quick path, made from the approved scope card."""
    return PlannedPulse(id="pulse-1", title=scope.title, description=scope.description, expected_changes=[],
                        estimated_size="small")


BLOCK_OF_STEP = {"scoping": "submit_scope", "research": "submit_research", "planning": "submit_plan",
                 "preflight": "complete_preflight", "review": "complete_review"}
"""The tool that ends each stage step (pulse steps end with ``complete_pulse``)."""


def revision_request(stage: str, feedback: str) -> str:
    """The message that hands the user's change request to the stage's agent."""
    return (f"The user reviewed your {stage} submission and requests changes:\n\n{feedback}\n\n"
            f"Revise it accordingly, then call {BLOCK_OF_STEP[stage]} again with the complete revised version.")


def validate_answers(questions: list[Question], answers: list[str]) -> None:
    """Raise ``bad_request`` unless there is one non-blank answer per question and every ``single_select``
    answer is one of its options (the agent asked the user to pick one)."""
    if len(answers) != len(questions):
        raise LifecycleError(ErrorCode.BAD_REQUEST,
                             f"{len(questions)} question(s) wait for one answer each, in the order asked; "
                             f"got {len(answers)} answer(s)", field="answers", expected=len(questions),
                             given=len(answers))
    for n, (question, answer) in enumerate(zip(questions, answers, strict=True)):
        if not answer.strip():
            raise LifecycleError(ErrorCode.BAD_REQUEST, f"answers[{n}] is blank; answer {question.prompt!r}",
                                 field=f"answers[{n}]")
        options = question.options or []
        if question.type == "single_select" and options and answer.strip() not in options:
            raise LifecycleError(ErrorCode.BAD_REQUEST,
                                 f"answers[{n}] must be one of the options of {question.prompt!r}: "
                                 + ", ".join(repr(o) for o in options), field=f"answers[{n}]", options=options)
