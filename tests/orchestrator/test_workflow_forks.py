"""What a fork settles on the history it copies (``workflow/forks.py``): the original's agents and worktree are not
the fork's, so in-flight steps start over, and its branch is cut at the last recorded pulse commit."""

from __future__ import annotations

import uuid

from autarch.contracts.workflows import ForkWorkflow
from autarch.services.orchestrator.workflow.forks import branch_commit_at, record_fork
from autarch.services.orchestrator.workflow.kickoffs import kickoff
from autarch.services.orchestrator.workflow.model import Workflow
from autarch.services.orchestrator.workflow.steps import needs_driving, sessions_to_close

from .test_workflow_domain import PLAN, RESEARCH, SCOPE, card
from .test_workflow_driving import executing, run
from .test_workflow_steps import next_step, open_session

C1 = "1" * 40


def second_pulse_running():
    """Pulse 1 committed C1, pulse 2 is running in its session; preflight's session was never closed."""
    wf = executing(PLAN["pulses"])
    open_session(wf, "preflight")
    wf.complete_preflight(status="completed", build_success=True)
    first = run(wf, PLAN["pulses"][0]["id"], "running")
    wf.pulse_ended(run_id=first.id, status="succeeded", commit=C1, diff_artifact_id=None,
                   is_recovery_checkpoint=False, ended_at="2026-11-22T00:00:00+00:00")
    second = run(wf, PLAN["pulses"][1]["id"], "running")
    open_session(wf, f"pulse:{second.id}")
    return wf, second


async def test_a_fork_mid_pulse_drops_the_running_pulse_and_cuts_its_branch_at_the_last_pulse_commit() -> None:
    wf, second = second_pulse_running()
    assert branch_commit_at(wf) == C1
    original = str(wf.id)
    command = ForkWorkflow(workflow_id=str(uuid.uuid4()), forked_from=original, at=wf.version)
    record_fork(wf, command, branch_commit_at(wf))

    assert (wf.forked_from, wf.forked_at, wf.branch) == (original, command.at, f"autarch/{command.workflow_id[:8]}")
    assert [r.id for r in wf.runs] == [PLAN["pulses"][0]["id"]]  # the running pulse runs again, in the fork
    assert f"pulse:{second.id}" not in wf.sessions
    assert wf.sessions["preflight"].closed and sessions_to_close(wf) == []  # the original closes its own
    assert wf.execution is None and wf.fork_start_commit == C1 and wf.fork_base_commit == "0" * 40
    assert needs_driving(wf)
    assert await next_step(wf) == ("prepare_execution", ())
    wf.execution_prepared(branch=wf.branch, worktree_path="/fork", base_commit="0" * 40, repository_id="r" * 16)
    step = await next_step(wf)
    assert step is not None and step[0] == "start_pulse" and step[1][0].id == second.planned_pulse_id


async def test_a_card_awaiting_approval_at_the_fork_is_revised_by_a_new_session_that_is_told_the_change() -> None:
    wf = Workflow(workflow_id=str(uuid.uuid4()), title="JWT", request="validate JWTs", repo="/x", base_branch="main",
                  branch=None, script=None)
    for stage, fields in (("scoping", SCOPE), ("research", RESEARCH)):
        wf.submit_artifact(stage, card(stage, fields))
        wf.approve()
    open_session(wf, "planning")
    wf.submit_artifact("planning", card("planning", PLAN))
    record_fork(wf, ForkWorkflow(workflow_id=str(uuid.uuid4()), forked_from=str(wf.id), at=wf.version,
                                 script="other"), branch_commit_at(wf))
    assert wf.fork_start_commit is None and wf.script == "other" and "planning" not in wf.sessions
    assert wf.awaiting_approval and await next_step(wf) is None  # the plan awaits the user again
    wf.request_changes("One pulse is enough.")
    assert wf.outbox == []  # no session of the original is asked anything
    assert await next_step(wf) == ("open_session", ("planning",))
    text = kickoff("planning", wf)
    assert "One pulse is enough." in text and PLAN["approachSummary"] in text
