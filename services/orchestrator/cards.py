"""The workflow's cards as typed replies (``get_artifacts``, ``get_scope_card``), decoded from aggregate state."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from autarch.contracts.agents import PlannedPulse, SubmitPlanArgs, SubmitResearchArgs, SubmitScopeArgs
from autarch.contracts.execution import PreflightView, PulseRunView
from autarch.contracts.orchestrator_tools import ScopeCard
from autarch.contracts.workflows import ReviewCard, StageNote, WorkflowArtifacts, WorkflowBaseline

from .domainmodel import Workflow

__all__ = ["artifacts_of", "scope_card_of"]

T = TypeVar("T")


def _card(value: dict[str, Any] | None, kind: type[T]) -> T | None:
    # Stored cards are the builtins of these very Structs, so converting back cannot fail.
    return None if value is None else msgspec.convert(value, kind)


def artifacts_of(workflow: Workflow) -> WorkflowArtifacts:
    """Every card, note and baseline of ``workflow``."""
    return WorkflowArtifacts(
        workflow_id=str(workflow.id),
        stage=workflow.stage,
        awaiting_approval=workflow.awaiting_approval,
        path=workflow.path,  # type: ignore[arg-type]
        scope=_card(workflow.artifacts.get("scoping"), SubmitScopeArgs),
        research=_card(workflow.artifacts.get("research"), SubmitResearchArgs),
        plan=_card(workflow.artifacts.get("planning"), SubmitPlanArgs),
        pulses=msgspec.convert(workflow.pulses, list[PlannedPulse]),
        review=_card(workflow.review, ReviewCard),
        notes=[msgspec.convert(msgspec.structs.asdict(n), StageNote) for n in workflow.notes],
        baselines=[WorkflowBaseline(**msgspec.structs.asdict(b)) for b in workflow.baselines],
        feedback=[{"stage": f.stage, "feedback": f.feedback} for f in workflow.feedback],
        preflight=_preflight(workflow),
        pulse_runs=_pulse_runs(workflow),
    )


def _preflight(workflow: Workflow) -> PreflightView | None:
    if workflow.preflight is not None:
        done = workflow.preflight
        return PreflightView(status=done.status, session_id=_session(workflow, "preflight"), summary=done.summary,
                             setup_commands=list(done.setup_commands), build_success=done.build_success,
                             baselines_recorded=done.baselines_recorded, error=done.error)
    if "preflight" in workflow.sessions:
        return PreflightView(status="running", session_id=_session(workflow, "preflight"))
    return None


def _session(workflow: Workflow, step: str) -> str | None:
    return workflow.sessions[step].session_id if step in workflow.sessions else None


def _kickoff_turn(workflow: Workflow, step: str) -> str | None:
    return workflow.sessions[step].kickoff_turn_id if step in workflow.sessions else None


_RUN_FIELDS = frozenset(PulseRunView.__struct_fields__)


def _pulse_runs(workflow: Workflow) -> list[PulseRunView]:
    runs = [msgspec.convert({**{k: v for k, v in msgspec.structs.asdict(run).items() if k in _RUN_FIELDS},
                             "initiating_message_id": _kickoff_turn(workflow, f"pulse:{run.id}")}, PulseRunView)
            for run in workflow.runs]
    started = {run.planned_pulse_id for run in workflow.runs}
    runs += [PulseRunView(id=p["id"], planned_pulse_id=p["id"], title=p["title"], attempt=0, status="proposed")
             for p in workflow.pulses if p["id"] not in started]
    return runs


def scope_card_of(workflow: Workflow) -> ScopeCard | None:
    """The approved scope card in the shape the review tools expect; None before approval."""
    scope = workflow.approved_scope()
    if scope is None:
        return None
    return ScopeCard(
        title=scope["title"],
        description=scope["description"],
        in_scope=list(scope.get("in_scope") or []),
        out_of_scope=list(scope.get("out_of_scope") or []),
        constraints=list(scope.get("constraints") or []),
    )
