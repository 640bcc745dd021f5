"""A bead's verification evidence as the Markdown file its commit carries (seed 002's evidence record)."""

from __future__ import annotations

from autarch.contracts.beads import VerificationEvidence

from .model import Attempt, Bead

__all__ = ["evidence_markdown"]


def evidence_markdown(bead: Bead, attempt: Attempt, evidence: VerificationEvidence) -> str:
    """The record: bead, testing mode, and each command exactly as run with its exit code, time and output."""
    lines = [f"# Verification of {bead.id}: {bead.title}", "",
             f"- testing mode: {evidence.testing_mode}",
             f"- attempt: {attempt.number}, worker: {attempt.worker}",
             f"- result: {'passed' if evidence.passed else 'failed'}",
             f"- recorded: {evidence.recorded_at.isoformat() if evidence.recorded_at else '-'}", ""]
    for n, run in enumerate(evidence.runs, 1):
        exit_code = "did not finish" if run.exit_code is None else str(run.exit_code)
        expected = " (must fail)" if run.step == "tdd-red" else ""
        lines += [f"## {n}. {run.step}{expected}", "",
                  f"- command: `{run.command}`",
                  f"- exit code: {exit_code} ({'as required' if run.passed else 'NOT as required'})",
                  f"- ran at: {run.ran_at.isoformat() if run.ran_at else '-'}, {run.duration_ms:.0f} ms",
                  f"- output digest: {run.output_digest or '-'}", ""]
        if run.output_excerpt:
            lines += ["```", run.output_excerpt.rstrip(), "```", ""]
    return "\n".join(lines)
