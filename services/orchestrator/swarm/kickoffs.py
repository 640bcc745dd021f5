"""The messages a swarm worker gets: its bead's kickoff, a failed verification, a nudge.

A worker sees the scope, the plan's approach and its own bead, never another worker's conversation
(seed 000's message isolation, kept by seed 002's workers). Its identities come first, as the seed's
startup acknowledgment names them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..workflow.kickoffs import _bullets, _scope

if TYPE_CHECKING:
    from ..workflow.model import Workflow
    from .model import Attempt, Bead, Swarm

__all__ = ["bead_card", "bead_kickoff", "bead_nudge", "commit_summary"]

_CONVENTIONAL_PREFIX = re.compile(r"^[a-z]+(\([^)]*\))?!?:\s*")


def bead_kickoff(workflow: Workflow, swarm: Swarm, bead: Bead, attempt: Attempt) -> str:
    worker = swarm.workers[attempt.worker]
    plan = workflow.artifacts.planning
    lines = [f"# Request: {workflow.title}", "", workflow.request, "", _scope(workflow.artifacts.scoping), ""]
    if plan is not None:
        lines += ["## Plan approach", plan.approach_summary, ""]
    landed = [swarm.beads[b] for b in swarm.merged]
    if landed:
        lines += ["## Beads already landed on the workflow branch",
                  *[f"- {b.id}: {b.title}" for b in landed], ""]
    lines += [
        "## You are a swarm worker",
        f"Runtime nickname: {worker.nickname}. Registered name: {worker.name}. Other workers work other beads "
        "of this epic at the same time, each in its own worktree; the files below are reserved for you.",
        "",
        "## Startup (before anything else)",
        "Read AGENTS.md if the repository has one. Then report in on the epic thread: send_message to the "
        f"coordinator with the subject `[STARTUP] {worker.nickname} / {worker.name}` and a body that gives both "
        "identities, says whether you read AGENTS.md, and that pulse:executing is loading. Then run fetch_inbox "
        f"on the topic `epic-{workflow.id}` and take in what it holds.",
        "",
        f"## Your bead: {bead.id} — {bead.title}", bead.description, "",
        "Files (your bead's scope: writes and edits outside them are refused, and what a command changes outside "
        "them is put back; if the bead truly needs another file, ask with request_scope and wait for the grant):",
        _bullets(bead.files), "",
        "Verification (run fresh by the platform when you call complete_pulse; a failure refuses the close and "
        "shows you the output; all must pass before your commit):",
        _bullets(bead.verify), "",
    ]
    if bead.testing_mode == "tdd-required" and bead.tdd_steps is not None:
        lines += ["Testing mode: tdd-required. Run the red step and see it fail before writing production code:",
                  f"- red: {bead.tdd_steps.red}", f"- green: {bead.tdd_steps.green}", ""]
    if bead.decision_refs:
        lines += ["Decisions to keep (locked in history/<feature>/CONTEXT.md when it exists: read them there; at "
                  "complete_pulse each must be defined in that file):", _bullets(bead.decision_refs), ""]
    if bead.learning_refs:
        lines += ["Read these learnings first:", _bullets(bead.learning_refs), ""]
    if workflow.baselines:
        lines += ["## Known issues from preflight (not yours to fix)",
                  *[f"- {b.issue_type} {b.source}: {b.pattern}" for b in workflow.baselines], ""]
    if attempt.number > 1:
        reason = _last_reason(swarm, bead)
        lines += [f"This is attempt {attempt.number}: your worktree starts from the current tip of the workflow "
                  f"branch.{f' The last attempt ended: {reason}.' if reason else ''}", ""]
    lines.append("Read every file before you change it. Do only this bead, within its files. When it is done, end "
                 "with complete_pulse: its summary (one line) becomes the commit message "
                 f"`feat({bead.id}): <summary>`. Do not commit yourself.")
    return "\n".join(lines)


def bead_card(bead: Bead) -> str:
    """The bead as a file in the worker's worktree (``.pulse/beads/<id>.md``): what to re-read after compaction."""
    lines = [f"# {bead.id}: {bead.title}", "", bead.description, "", "## Files", _bullets(bead.files), "",
             "## Verification", _bullets(bead.verify), "", f"Testing mode: {bead.testing_mode}"]
    if bead.tdd_steps is not None:
        lines += [f"- red: {bead.tdd_steps.red}", f"- green: {bead.tdd_steps.green}"]
    if bead.decision_refs:
        lines += ["", "## Decisions to keep", _bullets(bead.decision_refs)]
    if bead.learning_refs:
        lines += ["", "## Learnings", _bullets(bead.learning_refs)]
    return "\n".join(lines) + "\n"


def _last_reason(swarm: Swarm, bead: Bead) -> str | None:
    previous = swarm.attempts.get((bead.id, bead.attempt - 1))
    return previous.end_reason if previous is not None else None


def bead_nudge(bead: Bead) -> str:
    return (f"Your turn ended without complete_pulse. Finish bead {bead.id} within its files and call "
            "complete_pulse.")


def commit_summary(summary: str, bead: Bead) -> str:
    """The ``<summary>`` of ``feat(<bead-id>): <summary>``: the agent's first line without its own prefix."""
    first = summary.strip().partition("\n")[0]
    text = _CONVENTIONAL_PREFIX.sub("", first).strip() or bead.title
    return text[:200]
