"""A worker's handoff at the context limit (seed 002), exactly in the seed's schema 2.0, and its manifest.

The runner ends a worker's turn with outcome ``handoff`` once its context passes ``handoff_at`` of the window;
the swarm driver then writes the handoff built here into the worker's worktree (``.pulse/handoffs/``, left out
of bead commits) and resumes the bead in a fresh session whose first rule is to read it. The document is
checked against ``docs/contracts/handoff.schema.json`` in the tests.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from autarch.contracts.beads import HandoffEntry
from autarch.contracts.mail import COORDINATOR

from .model import Attempt, Bead, HandoffDocument, Swarm

__all__ = ["HANDOFF_DIR", "MANIFEST", "STATE_FILE", "handoff_document", "handoff_mail_request", "manifest_document",
           "owner_file", "resume_briefing", "state_document"]

HANDOFF_DIR = ".pulse/handoffs"
MANIFEST = f"{HANDOFF_DIR}/manifest.json"
STATE_FILE = ".pulse/STATE.md"
"""Where a standalone (single-worker) run records each bead it completed (seed 002)."""


def state_document(swarm: Swarm) -> str:
    """A standalone run's ``.pulse/STATE.md``: every bead landed so far, in order, with its summary, files,
    verification and commit; then what is left."""
    lines = ["# Standalone execution state", "", "## Completed beads", ""]
    for bead_id in swarm.merged:
        bead = swarm.beads[bead_id]
        done = next((a for a in swarm.attempts.values() if a.bead_id == bead_id and a.ended == "merged"), None)
        summary = (done.summary if done else None) or bead.title
        files = ", ".join((done.files_changed if done else None) or bead.files) or "-"
        verified = "passed" if done is not None and done.evidence is not None and done.evidence.passed else "none"
        lines.append(f"- {bead_id}: {summary}. Files: {files}. Verification: {verified}"
                     f"{f' ({bead.verification_evidence})' if bead.verification_evidence else ''}. "
                     f"Commit: {(bead.commit or '-')[:12]}.")
    left = [b.id for b in swarm.beads.values() if b.status != "closed"]
    lines += ["", "## Left", "", *([f"- {b}" for b in left] or ["- nothing"]), ""]
    return "\n".join(lines)


def owner_file(swarm: Swarm, worker: str) -> str:
    if swarm.mode == "standalone":
        return f"{HANDOFF_DIR}/single-worker.json"
    return f"{HANDOFF_DIR}/worker-{worker}.json"


def handoff_document(swarm: Swarm, a: Attempt, bead: Bead, *, feature: str, tokens_used_pct: float,
                     paused_at: datetime) -> dict[str, Any]:
    """The seed's handoff (schema 2.0) for a worker paused mid-bead."""
    stamp = paused_at.isoformat()
    worker = swarm.workers[a.worker]
    path = owner_file(swarm, a.worker)
    standalone = swarm.mode == "standalone"
    owner = "single-worker" if standalone else f"worker-{worker.name}"
    closed = worker.beads_closed[-1] if worker.beads_closed else None
    # Only files that are there to read: this handoff and the bead's card, both written into the worktree, and a
    # standalone run's state once a bead landed. (The seed's example also names AGENTS.md and CONTEXT.md: Autarch
    # writes neither, and a worker's kickoff already asks it to read the repository's AGENTS.md if there is one.)
    read_first = [path, f".pulse/beads/{bead.id}.md", *([STATE_FILE] if standalone and swarm.merged else [])]
    summary = ("Worker paused cleanly because context is near the limit. The next turn should rejoin "
               "coordination, confirm the current graph state, and continue from the highest-priority executable "
               f"bead: {bead.id} is claimed and in progress.")
    payload: dict[str, Any] = {
        "context_snapshot": {"tokens_used_pct": round(tokens_used_pct, 4), "last_bead_closed": closed},
        "transfer": {
            "status": "Worker is paused safely and no longer editing files.",
            "completed": [f"Closed bead {b}" for b in worker.beads_closed] or ["No bead closed yet"],
            "in_flight": [f"Bead {bead.id} ({bead.title}) claimed, attempt {a.number}: its worktree holds the "
                          "work so far, uncommitted; it resumes in a fresh session"],
            "blockers": [],
            "resume_notes": [f"Read {path} first, then the bead's files before editing them",
                             "Re-check file reservations before editing any file",
                             f"Close the bead with complete_pulse once `{'`, `'.join(bead.verify)}` pass"],
        },
        "verification_evidence_paths": [bead.verification_evidence] if bead.verification_evidence else [],
    }
    if not standalone:
        payload = {"runtime": {"runtime_nickname": worker.nickname, "agent_mail_name": worker.name,
                               "epic_id": swarm.workflow_id, "epic_topic": f"epic-{swarm.workflow_id}",
                               "coordinator_agent_name": COORDINATOR}, **payload}
    return {
        "schema_version": "2.0",
        "handoff_id": f"{owner}-{stamp}",
        "owner_type": "worker",
        "owner_id": owner,
        "skill": "pulse:executing",
        "feature": feature,
        "phase": "execution/standalone" if standalone else f"execution/{swarm.workflow_id}",
        "status": "ready_to_resume",
        "paused_at": stamp,
        "reason": "context_critical",
        "next_action": (f"Read {path}, then continue bead {bead.id} from its worktree and close it with "
                        "complete_pulse."),
        "read_first": read_first,
        "summary": summary,
        "payload": payload,
    }


def manifest_document(entries: list[HandoffEntry]) -> str:
    """``.pulse/handoffs/manifest.json``: each handoff's owner file, summary and next action."""
    return json.dumps({"schema_version": "2.0", "handoffs": [
        {"handoff_id": e.handoff_id, "owner_id": e.owner_id, "owner_file": e.owner_file, "status": e.status,
         "paused_at": e.paused_at.isoformat(), "summary": e.summary, "next_action": e.next_action,
         "bead_id": e.bead_id} for e in entries]}, indent=2) + "\n"


def resume_briefing(handoff: HandoffDocument, path: str) -> str:
    """What the fresh session is told before its bead: resume from the handoff, re-reading first."""
    transfer = handoff.payload.transfer
    return "\n".join([
        "## Resuming from a handoff",
        f"An earlier session of yours stopped at the context limit and wrote {path}. Read it first (edits are "
        "refused until you have), then the files it names that exist, then carry on.",
        f"- Next action: {handoff.next_action}",
        f"- In flight: {'; '.join(transfer.in_flight)}",
        f"- Resume notes: {'; '.join(transfer.resume_notes)}",
        "",
    ])


def handoff_mail_request(handoff: HandoffDocument, path: str, nickname: str, name: str) -> str:
    """What the session that handed off is asked, once its handoff is written: the seed's ``[HANDOFF]`` mail to the
    coordinator, sent with its own ``send_message``, and nothing else."""
    transfer = handoff.payload.transfer
    body = "\n".join([
        f"Handoff summary: {handoff.summary}", "", "Resume briefing:", f"- Next action: {handoff.next_action}",
        f"- Read first: {', '.join(handoff.read_first)}", "", "Transfer block:", f"- Status: {transfer.status}",
        f"- Completed: {'; '.join(transfer.completed) or 'none'}", f"- In flight: {'; '.join(transfer.in_flight)}",
        f"- Blockers: {'; '.join(transfer.blockers) or 'none'}",
        f"- Resume notes: {'; '.join(transfer.resume_notes)}",
    ])
    return "\n".join([
        "## Your handoff is written",
        f"Your context passed its limit, so you stop here. Your handoff is at {path} (schema 2.0); a fresh session "
        "of yours resumes from it. Before you stop, notify the coordinator: send_message to `coordinator` with the "
        f"subject `[HANDOFF] {nickname} / {name}` and this body, then end your turn. Do not change any file.",
        "", "```", body, "```",
    ])
