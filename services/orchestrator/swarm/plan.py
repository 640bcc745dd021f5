"""From an approved plan to an epic's beads (seed 002), and the check that bounces an incomplete plan.

A plan is a *bead plan* when any of its pulses gives ``verify``: its pulses then run as beads by parallel
workers, and each must carry what a worker needs (``verify``, its files as ``expectedChanges``, ``tddSteps``
when ``tdd-required``). A pulse missing one is bounced back to planning; nothing is guessed from its prose.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from autarch.contracts.agents import PlannedPulse, SubmitPlanArgs
from autarch.contracts.beads import Dependency, TddSteps

from .model import Bead, missing_fields
from .rank import BlocksGraph

__all__ = ["auto_workers", "bead_dicts", "bead_of", "bounce_feedback", "bounced_pulses", "is_bead_plan", "level_width",
           "plan_feature"]


def is_bead_plan(plan: SubmitPlanArgs | None) -> bool:
    return plan is not None and any(p.verify is not None for p in plan.pulses)


def plan_feature(workflow_branch: str) -> str:
    """The feature name evidence paths use: the workflow branch's last segment."""
    return workflow_branch.rsplit("/", 1)[-1] or "feature"


def bead_of(pulse: PlannedPulse, *, feature: str) -> Bead:
    """The bead one planned pulse becomes (dependsOn → ``blocks`` dependencies, expectedChanges → files)."""
    tdd = TddSteps(red=pulse.tdd_steps.red, green=pulse.tdd_steps.green) if pulse.tdd_steps else None
    return Bead(
        id=pulse.id, title=pulse.title, description=pulse.description,
        dependencies=[Dependency(bead_id=d, type="blocks") for d in pulse.depends_on or []],
        files=list(pulse.expected_changes), verify=list(pulse.verify or []),
        verification_evidence=pulse.verification_evidence or f"history/{feature}/verification/{pulse.id}.md",
        testing_mode=pulse.testing_mode or "standard", tdd_steps=tdd, decision_refs=list(pulse.decision_refs or []),
        learning_refs=list(pulse.learning_refs or []), priority=2 if pulse.priority is None else pulse.priority)


def bounced_pulses(plan: SubmitPlanArgs) -> dict[str, list[str]]:
    """Pulse id → the required bead fields it lacks (empty when the plan can run as beads)."""
    out: dict[str, list[str]] = {}
    for pulse in plan.pulses:
        missing = missing_fields(bead_of(pulse, feature="x"))
        if missing:
            out[pulse.id] = ["expectedChanges" if m == "files" else ("tddSteps" if m == "tdd_steps" else m)
                             for m in missing]
    return out


def level_width(beads: list[Bead]) -> int:
    """The widest level of the ``blocks`` graph among beads not closed: how many could run at once."""
    graph = BlocksGraph(beads)
    if not graph.is_dag():
        return 1
    counts: dict[int, int] = {}
    for depth in graph.levels().values():
        counts[depth] = counts.get(depth, 0) + 1
    return max(counts.values(), default=1)


def auto_workers(beads: list[Bead], setting: int, *, standalone: bool) -> int:
    """Workers to run: 1 standalone; else the setting, or (0) the graph's width capped by the machine."""
    if standalone:
        return 1
    if setting > 0:
        return setting
    # Workers wait on the model most of the time, so two per core is still far from busy; eight is plenty.
    return max(1, min(level_width(beads), 2 * (os.cpu_count() or 1), 8))


def bounce_feedback(bounced: dict[str, list[str]]) -> str:
    lines = [f"- {pulse}: missing {', '.join(fields)}" for pulse, fields in bounced.items()]
    return ("Bounced back to planning: these pulses lack fields a worker needs (seed 002: never guessed from "
            "the description). Give every pulse `verify` (commands that prove it works), its files as "
            "`expectedChanges`, and `tddSteps` for `tdd-required`, then submit the plan again.\n" + "\n".join(lines))


def bead_dicts(plan: SubmitPlanArgs, *, feature: str, at: str) -> list[dict[str, Any]]:
    out = []
    for pulse in plan.pulses:
        bead = bead_of(pulse, feature=feature)
        bead.created_at = bead.updated_at = at
        out.append(msgspec.to_builtins(bead))
    return out
