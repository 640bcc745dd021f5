"""A worker's discipline as the runner keeps it: what counts as a test, the red step, edits before it, refusals."""

from __future__ import annotations

import asyncio
import json

from autarch.contracts.beads import TddSteps, VerificationEvidence, WorkerDiscipline
from autarch.services.agent_runner.discipline import (
    edit_refusal,
    is_test_path,
    red_run,
    refusal_text,
    run_verification,
    without_red_runs,
)
from autarch.services.agent_runner.domainmodel import ToolCall

RED = "python3 -m pytest -q tests/test_area.py"
TDD = WorkerDiscipline(bead_id="area", verify=["python3 -m pytest -q"], testing_mode="tdd-required",
                       tdd_steps=TddSteps(red=RED, green=RED))


def shell(command: str, exit_code: int, n: int = 0) -> ToolCall:
    call = ToolCall(tool_use_id=f"t{n}", name="shell", input={"command": command, "reason": "r"}, step=n)
    call.output = json.dumps({"success": True, "exit_code": exit_code, "stdout": "", "stderr": "boom"})
    call.is_error = exit_code != 0
    return call


def test_test_paths_in_the_usual_layouts() -> None:
    for path in ("tests/test_area.py", "pkg/tests/helpers.py", "area_test.go", "src/area.test.ts",
                 "spec/area_spec.rb", "conftest.py", "test_area.py", "web/__tests__/x.js"):
        assert is_test_path(path), path
    for path in ("shapes/area.py", "src/testing_utils.py", "latest.py", "contest/x.py"):
        assert not is_test_path(path), path


def test_red_counts_only_a_failed_run_of_the_exact_command() -> None:
    assert red_run([shell(RED, 0)], RED) is None
    assert red_run([shell("python3 -m pytest -q", 1)], RED) is None
    found = shell(RED, 1, 3)
    assert red_run([shell(RED, 0, 1), found], RED) is found


def test_production_edits_wait_for_red_and_tests_do_not() -> None:
    refused = edit_refusal(TDD, [], "edit_file", {"path": "shapes/area.py"})
    assert refused is not None and "tdd-required" in json.loads(refused)["error"]
    assert edit_refusal(TDD, [], "write_file", {"path": "tests/test_area.py"}) is None
    assert edit_refusal(TDD, [shell(RED, 1)], "edit_file", {"path": "shapes/area.py"}) is None
    standard = WorkerDiscipline(bead_id="b", verify=["true"])
    assert edit_refusal(standard, [], "edit_file", {"path": "shapes/area.py"}) is None
    assert edit_refusal(TDD, [], "read_file", {"path": "shapes/area.py"}) is None


def test_the_red_runs_are_no_unresolved_failure() -> None:
    history = [shell(RED, 1, 0), shell("ruff check .", 1, 1)]
    assert [c.input["command"] for c in without_red_runs(TDD, history)] == ["ruff check ."]
    assert without_red_runs(None, history) == history


def test_verification_runs_green_then_verify_and_stops_at_the_first_failure() -> None:
    ran: list[tuple[str, str]] = []

    async def fake_shell(call_id: str, command: str) -> tuple[str, bool, float]:
        ran.append((call_id, command))
        code = 1 if command == "python3 -m pytest -q" else 0
        return json.dumps({"success": True, "exit_code": code, "stdout": "out", "stderr": ""}), code != 0, 5.0

    evidence = asyncio.run(run_verification(TDD, history=[shell(RED, 1)], call_id="toolu_9", shell=fake_shell))
    assert ran == [("toolu_9.tdd-green.0", RED), ("toolu_9.verify.1", "python3 -m pytest -q")]
    assert [(r.step, r.passed) for r in evidence.runs] == [("tdd-red", True), ("tdd-green", True),
                                                          ("verify", False)]
    assert not evidence.passed and evidence.runs[2].exit_code == 1
    assert evidence.runs[1].output_digest.startswith("sha256:") and evidence.runs[1].output_excerpt == "out"
    text = json.loads(refusal_text(evidence))
    assert "exited 1" in text["error"] and "python3 -m pytest -q" in text["error"]


def test_a_close_without_a_failed_red_is_refused() -> None:
    async def passing(call_id: str, command: str) -> tuple[str, bool, float]:
        return json.dumps({"success": True, "exit_code": 0}), False, 1.0

    evidence = asyncio.run(run_verification(TDD, history=[], call_id="c", shell=passing))
    assert not evidence.passed and evidence.runs[0].step == "tdd-red"
    assert "never failed" in json.loads(refusal_text(evidence))["error"]
    assert isinstance(evidence, VerificationEvidence)


def test_after_a_compaction_a_worker_rereads_its_bead_before_editing() -> None:
    from datetime import UTC, datetime

    import msgspec

    from autarch.services.agent_runner.domainmodel import Session

    discipline = WorkerDiscipline(bead_id="area", verify=["true"], bead_file=".pulse/beads/area.md")
    session = Session(session_id="5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f13", role="pulsing", model="m", root="/wt",
                      run_id=None, channel_id=None, script=None, notes=[],
                      discipline=msgspec.to_builtins(discipline))
    session.start_turn(turn_id="t1", index=0, text="go", notes=[], message_id=None, stage_notes=None,
                       at=datetime.now(UTC))
    assert not session.reread_needed
    session.compact(turn_id="t1", through=0, context_tokens=10)
    assert session.reread_needed
    refused = edit_refusal(session.discipline, [], "edit_file", {"path": "shapes/area.py"}, reread_needed=True)
    assert refused is not None and ".pulse/beads/area.md" in json.loads(refused)["error"]
    session.record_reply(turn_id="t1", content=[{"type": "tool_use", "id": "r1", "name": "read_file",
                                                 "input": {"path": ".pulse/beads/area.md"}}],
                         stop_reason="tool_use", usage={}, cost_usd=0.0, model="m", ending_id=None)
    session.complete_tool(turn_id="t1", tool_use_id="r1", name="read_file", output="# area", is_error=False,
                          duration_ms=1.0, replayed=False)
    assert not session.reread_needed


def test_decision_references_are_checked_against_context_md_when_it_exists(tmp_path) -> None:
    import subprocess

    async def bash(call_id: str, command: str) -> tuple[str, bool, float]:
        # The check as the sandboxed shell would run it, in a worktree of our own.
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=False)
        return (json.dumps({"success": done.returncode == 0, "exit_code": done.returncode, "stdout": done.stdout,
                            "stderr": done.stderr}), done.returncode != 0, 1.0)

    bead = WorkerDiscipline(bead_id="area", verify=["true"], decision_refs=["D1", "D'2"],
                            context_file="history/shapes/CONTEXT.md")

    def check() -> VerificationEvidence:
        return asyncio.run(run_verification(bead, history=[], call_id="c", shell=bash))

    # No CONTEXT.md: nothing to check against, and the run says so.
    evidence = check()
    assert evidence.passed and evidence.runs[-1].step == "decisions"
    assert "decisions not checked" in evidence.runs[-1].output_excerpt
    (tmp_path / "history/shapes").mkdir(parents=True)
    (tmp_path / "history/shapes/CONTEXT.md").write_text("# Decisions\n\n## D1 — areas in square units\n")
    evidence = check()
    assert not evidence.passed and "D'2" in evidence.runs[-1].output_excerpt
    refused = json.loads(refusal_text(evidence))
    assert "does not define" in refused["error"] and "D'2" in refused["output"]
    (tmp_path / "history/shapes/CONTEXT.md").write_text("## D1 — areas\n- **D'2**: one module per shape\n")
    assert check().passed
    # A bead without decision references runs no such check.
    plain = asyncio.run(run_verification(WorkerDiscipline(bead_id="b", verify=["true"]), history=[], call_id="c",
                                         shell=bash))
    assert [r.step for r in plain.runs] == ["verify"]
