"""Where each step of a workflow stands, as pure functions of its recorded state (no events, no I/O).

A step is a stage's agent (``scoping``, ``research``, ``planning``, ``preflight``, ``review``) or one pulse
run (``pulse:<run id>``). The driver decides its next action from these answers alone.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import msgspec

from autarch.contracts.agents import Baseline, PlannedPulse
from autarch.contracts.workflows import FixRoundView

from .model import STAGES, Workflow
from .state import PulseRun

__all__ = [
    "agent_waits",
    "all_pulses_done",
    "close_reason",
    "current_step",
    "fixing",
    "needs_driving",
    "next_pulse",
    "preflight_overdue",
    "session_baselines",
    "session_notes",
    "sessions_to_close",
    "stage_of_step",
    "step_over",
    "swarm_executes",
]

log = logging.getLogger("orchestrator.steps")


def stage_of_step(step: str) -> str:
    """The stage a step belongs to (preflight and every pulse are execution)."""
    return step if step in STAGES else "execution"


def fixing(workflow: Workflow) -> FixRoundView | None:
    """The fix round being worked on: the latest one while the workflow is back in execution (else None)."""
    if workflow.stage == "execution" and workflow.fix_rounds:
        return workflow.fix_rounds[-1]
    return None


def _queue(workflow: Workflow) -> list[PlannedPulse]:
    """What execution runs now: the open fix round's pulses, one after another, else the planned pulses."""
    fix_round = fixing(workflow)
    if fix_round is None:
        return workflow.pulses
    return [PlannedPulse(id=p.pulse_id, title=p.title, description=p.title,
                         expected_changes=[p.file_path] if p.file_path else [], estimated_size="small")
            for p in fix_round.pulses]


def next_pulse(workflow: Workflow) -> PlannedPulse | None:
    """The first pulse to run whose dependencies succeeded and whose latest run did not (None: none can run)."""
    latest: dict[str, PulseRun] = {}
    for run in workflow.runs:
        latest[run.planned_pulse_id] = run
    done = {pid for pid, run in latest.items() if run.status == "succeeded"}
    for pulse in _queue(workflow):
        if pulse.id in done:
            continue
        if all(dep in done for dep in pulse.depends_on or []):
            return pulse
    return None


def all_pulses_done(workflow: Workflow) -> bool:
    latest = {run.planned_pulse_id: run.status for run in workflow.runs}
    return all(latest.get(p.id) == "succeeded" for p in _queue(workflow))


def swarm_executes(wf: Workflow) -> bool:
    """Workers of a bead plan run the execution now: preflight passed, no pulse runs, no fix round is open."""
    return (wf.execution_mode == "swarm" and wf.stage == "execution" and wf.preflight is not None
            and wf.preflight.status == "completed" and wf.running_run() is None and fixing(wf) is None)


def current_step(wf: Workflow) -> str | None:
    """The step whose agent works now (or last worked), if any."""
    if wf.stage in ("scoping", "research", "planning", "review"):
        return wf.stage if wf.stage in wf.sessions else None
    if wf.stage != "execution":
        return None
    run = wf.running_run()
    if run is not None:
        return f"pulse:{run.id}"
    if wf.preflight is None and "preflight" in wf.sessions:
        return "preflight"
    return None


def step_over(wf: Workflow, step: str) -> bool:
    """True once ``step``'s work is finished for good: its agent will never be asked anything again."""
    if wf.abandoned or wf.stage == "done":
        return True
    if step.startswith("pulse:"):
        return wf.run(step.split(":", 1)[1]).status != "running"
    if step == "preflight":
        return wf.preflight is not None
    return STAGES.index(wf.stage) > STAGES.index(step)


def agent_waits(wf: Workflow, step: str | None) -> bool:
    """True when ``step``'s started session is idle mid-work, so a message makes its agent carry on."""
    if step is None or step not in wf.sessions or not wf.sessions[step].started or step_over(wf, step):
        return False
    if step.startswith("pulse:"):
        return wf.run(step.split(":", 1)[1]).ending is None  # an ending pulse only needs its git step
    if step == "preflight":
        return True
    return wf.stage == step and not wf.awaiting_approval


def sessions_to_close(wf: Workflow) -> list[str]:
    """Started sessions whose step is over and that are not closed yet."""
    return [step for step, s in wf.sessions.items()
            if s.started and not s.closed and step_over(wf, step)]


def needs_driving(wf: Workflow) -> bool:
    """Whether ``wf`` may still have a step for the driver: it is not finished, or a finished one's worktree
    is not removed or a session of it is not closed yet (a process that died before doing that)."""
    if not (wf.abandoned or wf.stage == "done"):
        return True
    if wf.execution is None and wf.fork_start_commit is not None:
        return True  # a fork of a finished workflow whose branch is not cut yet (``forks.py``)
    return (wf.execution is not None and not wf.worktree_removed) or bool(sessions_to_close(wf))


def close_reason(wf: Workflow, step: str) -> str:
    """Why ``step``'s session closes (the ``reason`` of ``session:completed``)."""
    if wf.abandoned:
        return f"the workflow was abandoned: {wf.abandoned}"
    if step.startswith("pulse:"):
        run = wf.run(step.split(":", 1)[1])
        return f"pulse {run.id} {run.status}"
    if step == "preflight" and wf.preflight is not None:
        return f"preflight {wf.preflight.status}"
    if wf.stage == "done":
        return "the workflow is done"
    return f"the {step} card was approved"


def preflight_overdue(wf: Workflow, timeout: float, now: datetime | None = None) -> bool:
    """True when the preflight agent has been running for ``timeout`` seconds, halts not counted."""
    session = wf.sessions.get("preflight")
    if wf.preflight is not None or session is None or wf.abandoned or wf.halt is not None:
        return False
    return wf.running_seconds("preflight", (now or datetime.now(UTC)).isoformat()) >= timeout


def session_notes(wf: Workflow, step: str) -> list[str]:
    """The notes taken so far in ``step``'s stage: seed 004 gives them to every agent of the stage, on every
    turn (message isolation between pulses is about their conversations, not the stage's notes)."""
    stage = stage_of_step(step)
    return [n.note for n in wf.notes if n.stage == stage]


def session_baselines(wf: Workflow, step: str) -> list[Baseline]:
    """Preflight's baselines for a pulse session (a tool failure that only repeats one is not the pulse's).

    A baseline the runner cannot match (an empty pattern) is left out rather than holding up the pulse.
    """
    if not step.startswith("pulse:"):
        return []
    found = []
    for baseline in wf.baselines:
        try:
            found.append(msgspec.convert(msgspec.structs.asdict(baseline), Baseline))
        except msgspec.ValidationError:
            log.warning("workflow %s: baseline %s cannot be matched; not given to pulses", wf.id,
                        baseline.baseline_id)
    return found
