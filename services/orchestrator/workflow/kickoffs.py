"""The messages the orchestrator sends agents: each stage's kickoff and the messages that steer a running one.

Each kickoff carries what the stage needs and nothing more (seed 000: message isolation per pulse —
a pulse sees the scope, the plan and its own task, never another pulse's conversation).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import msgspec

from autarch.contracts.agents import Question, SubmitScopeArgs

from .fixes import comment_line
from .lifecycle import revision_request

if TYPE_CHECKING:
    from .model import Workflow
    from .state import HaltDetails, PulseRun

__all__ = [
    "extension_approved",
    "kickoff",
    "nudge",
    "questions_answered",
    "resume_note",
]


def _bullets(items: list[str] | None) -> str:
    return "\n".join(f"- {item}" for item in items or []) or "- (none)"


def _scope(scope: SubmitScopeArgs | None) -> str:
    # Every step after scoping starts from the approved scope.
    assert scope is not None, "no approved scope"
    parts = [f"## Approved scope: {scope.title}", scope.description, "",
             "In scope:", _bullets(scope.in_scope), "", "Out of scope:", _bullets(scope.out_of_scope)]
    if scope.constraints:
        parts += ["", "Constraints (binding):", _bullets(scope.constraints)]
    return "\n".join(parts)


def _card(title: str, card: msgspec.Struct | None) -> str:
    if card is None:
        return ""
    # The card as the agent submitted it (its wire shape: the tool's own field names).
    return f"## {title}\n```json\n{json.dumps(msgspec.to_builtins(card), indent=2, ensure_ascii=False)}\n```"


def kickoff(step: str, workflow: Workflow, run: PulseRun | None = None) -> str:
    """The first message of the session that works on ``step`` of ``workflow``."""
    text = _kickoff(step, workflow, run)
    card = {"scoping": workflow.artifacts.scoping, "research": workflow.artifacts.research,
            "planning": workflow.artifacts.planning}.get(step)
    if card is not None and workflow.last_feedback is not None:
        # A card sent back with no session of this workflow to revise it (a fork: the card came with the
        # original's history): the new session gets the card and the change request together.
        text += (f"\n\n{_card('Your earlier submission', card)}\n\n"
                 f"{revision_request(step, workflow.last_feedback)}")
    return text


def _kickoff(step: str, workflow: Workflow, run: PulseRun | None) -> str:
    request = f"# Request: {workflow.title}\n\n{workflow.request}"
    scope = workflow.artifacts.scoping
    if step == "scoping":
        return (f"{request}\n\nScope this request against the repository. Ask with ask_questions if you cannot "
                "proceed without the user's decision; end with submit_scope.")
    if step == "research":
        return (f"{request}\n\n{_scope(scope)}\n\nResearch how the codebase works where this change lands, "
                "then end with submit_research.")
    if step == "planning":
        return (f"{request}\n\n{_scope(scope)}\n\n{_card('Approved research', workflow.artifacts.research)}"
                "\n\nVerify the research against the code and plan the work as pulses; end with submit_plan.")
    if step == "preflight":
        return (f"{request}\n\n{_scope(scope)}\n\nPrepare the environment in this worktree before any pulse runs: "
                "install dependencies, initialise submodules, run a baseline build, and record every pre-existing "
                "error or warning with record_baseline. Do not modify tracked files. End with complete_preflight.")
    if step == "review":
        done = [r for r in workflow.runs if r.status == "succeeded"]
        pulses = "\n".join(f"- {r.planned_pulse_id}: {r.description}" for r in done) or "- (none)"
        return (f"{request}\n\n{_scope(scope)}\n\n## Pulses committed\n{pulses}\n\nReview the workflow's diff "
                "against the approved scope with get_diff and get_scope_card, comment where it matters, and end "
                "with complete_review.")
    assert run is not None
    if run.fix_round is not None:
        return _fix_kickoff(workflow, run, request, scope)
    return _pulse_kickoff(workflow, run, request, scope)


def _committed(workflow: Workflow) -> list[str]:
    done = [r for r in workflow.runs if r.status == "succeeded"]
    if not done:
        return []
    return ["## Pulses already committed on this branch", *[f"- {r.planned_pulse_id}: {r.description}"
                                                            for r in done], ""]


def _known_issues(workflow: Workflow, run: PulseRun) -> list[str]:
    lines = []
    if workflow.baselines:
        lines += ["## Known issues from preflight (not yours to fix)",
                  *[f"- {b.issue_type} {b.source}: {b.pattern}" for b in workflow.baselines], ""]
    if run.attempt > 1:
        lines += [f"This is attempt {run.attempt}: the worktree is back at the branch head.", ""]
    return lines


def _pulse_kickoff(workflow: Workflow, run: PulseRun, request: str, scope: SubmitScopeArgs | None) -> str:
    pulse = next(p for p in workflow.pulses if p.id == run.planned_pulse_id)
    plan = workflow.artifacts.planning
    lines = [request, "", _scope(scope), ""]
    if plan is not None:
        lines += ["## Plan approach", plan.approach_summary, ""]
    lines += _committed(workflow)
    lines += [f"## Your pulse: {pulse.id} — {pulse.title}", pulse.description, "",
              "Expected changes:", _bullets(pulse.expected_changes), ""]
    lines += _known_issues(workflow, run)
    lines.append("Do only this pulse. When it is complete and clean, end with complete_pulse; its summary becomes "
                 "the commit message (a Conventional Commit). If you run long, call request_extension.")
    return "\n".join(lines)


def _fix_kickoff(workflow: Workflow, run: PulseRun, request: str, scope: SubmitScopeArgs | None) -> str:
    """A fix pulse's kickoff: the review comments it fixes, the user's feedback, and which files are others'."""
    fix_round = next(r for r in workflow.fix_rounds if r.round == run.fix_round)
    pulse = next(p for p in fix_round.pulses if p.pulse_id == run.planned_pulse_id)
    comments = {c.comment_id: c for c in fix_round.review.comments}
    lines = [request, "", _scope(scope), "", *_committed(workflow),
             f"## Your pulse: {pulse.pulse_id} — {pulse.title}",
             f"The review of this branch made these comments, and the user sent them back to be fixed (fix round "
             f"{fix_round.round}):", *[f"- {comment_line(comments[i])}" for i in pulse.comment_ids], "",
             "The user's feedback on this round (it steers every fix pulse of the round; act on what concerns your "
             "comments):", *[f"> {line}" for line in fix_round.feedback.splitlines()], ""]
    others = [p for p in fix_round.pulses if p.pulse_id != pulse.pulse_id]
    if others:
        lines += ["Other fix pulses of this round handle the rest; leave their comments to them:",
                  *[f"- {p.pulse_id}: {p.file_path or 'the comments on no file'}" for p in others], ""]
    lines += _known_issues(workflow, run)
    lines.append("Line numbers are those of the branch as reviewed: read each file before you edit it. Fix only "
                 "these comments. When they are fixed and the code is clean, end with complete_pulse; its summary "
                 "becomes the commit message, a Conventional Commit such as `fix(<scope>): …` (or `test`, `docs`, "
                 "`refactor` when that is what the change is). If you run long, call request_extension.")
    return "\n".join(lines)


def nudge(step: str, block_tool: str) -> str:
    return (f"Your turn ended without {block_tool}. This stage ends only with that tool call: finish your work "
            f"and call {block_tool} (ask_questions if you need the user's decision).")


def extension_approved(details: HaltDetails, message: str | None) -> str:
    text = "Extension approved. Continue where you stopped."
    if details.remaining:
        text += f"\n\nRemaining, as you listed it:\n{_bullets(details.remaining)}"
    if message:
        text += f"\n\nFrom the user: {message}"
    return text


def questions_answered(questions: list[Question], answers: list[str]) -> str:
    lines = ["The user answered your questions:"]
    for i, answer in enumerate(answers):
        question = questions[i].prompt if i < len(questions) else f"Question {i + 1}"
        lines += [f"Q: {question}", f"A: {answer}", ""]
    lines.append("Continue with these answers.")
    return "\n".join(lines)


def resume_note(reason: str, message: str | None) -> str:
    text = f"The user resumed the workflow (it was halted: {reason}). Continue where you left off."
    if message:
        text += f"\n\nFrom the user: {message}"
    return text
