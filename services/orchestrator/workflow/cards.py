"""The workflow's cards as typed replies (``get_artifacts``, ``get_scope_card``), decoded from aggregate state."""

from __future__ import annotations

import copy

import msgspec

from autarch.contracts.execution import PreflightView, PulseRunView
from autarch.contracts.orchestrator_tools import ScopeCard
from autarch.contracts.workflows import WorkflowArtifacts

from .model import Workflow

__all__ = ["artifacts_of", "scope_card_of"]

def artifacts_of(workflow: Workflow) -> WorkflowArtifacts:
    """Every card, note and baseline of ``workflow``."""
    return WorkflowArtifacts(
        workflow_id=str(workflow.id),
        stage=workflow.stage,
        awaiting_approval=workflow.awaiting_approval,
        path=workflow.path,
        # Copies: the reply must not share mutable state with the aggregate.
        scope=copy.deepcopy(workflow.artifacts.scoping),
        research=copy.deepcopy(workflow.artifacts.research),
        plan=copy.deepcopy(workflow.artifacts.planning),
        pulses=copy.deepcopy(workflow.pulses),
        review=copy.deepcopy(workflow.review),
        notes=copy.deepcopy(workflow.notes),
        baselines=copy.deepcopy(workflow.baselines),
        feedback=[{"stage": f.stage, "feedback": f.feedback} for f in workflow.feedback],
        preflight=_preflight(workflow),
        pulse_runs=_pulse_runs(workflow),
        fix_rounds=copy.deepcopy(workflow.fix_rounds),
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
    runs = [msgspec.convert({**{k: v for k, v in msgspec.to_builtins(run).items() if k in _RUN_FIELDS},
                             "initiating_message_id": _kickoff_turn(workflow, f"pulse:{run.id}")}, PulseRunView)
            for run in workflow.runs]
    started = {run.planned_pulse_id for run in workflow.runs}
    runs += [PulseRunView(id=p.id, planned_pulse_id=p.id, title=p.title, attempt=0, status="proposed")
             for p in workflow.pulses if p.id not in started]
    runs += [PulseRunView(id=p.pulse_id, planned_pulse_id=p.pulse_id, title=p.title, attempt=0, status="proposed",
                          fix_round=r.round)
             for r in workflow.fix_rounds for p in r.pulses if p.pulse_id not in started]
    return runs


def scope_card_of(workflow: Workflow) -> ScopeCard | None:
    """The approved scope card in the shape the review tools expect; None before approval."""
    scope = workflow.approved_scope()
    if scope is None:
        return None
    return ScopeCard(
        title=scope.title,
        description=scope.description,
        in_scope=list(scope.in_scope),
        out_of_scope=list(scope.out_of_scope),
        constraints=list(scope.constraints or []),
    )
