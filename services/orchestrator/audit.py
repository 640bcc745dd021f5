"""``autarch audit``'s view of the orchestrator's store: which aggregates an id names, and the exported bundle.

A workflow id names the workflow, its epic and its mailbox (their ids derive from it); any other id names one
aggregate. The bundle (``docs/audit.md``) holds those aggregates' events with their links, the checkpoints that
name them, and, for a workflow or loop session with a branch, the branch's commits as raw git objects, so the
standalone ``cli/audit_verify.py`` checks it with nothing but Python's standard library.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from datetime import UTC, datetime
from typing import Any

from autarch.contracts import subjects
from autarch.runtime.audit import AuditReport, StreamMessage, read_stream, relay_position, verify_store, verify_stream
from autarch.runtime.chain import ChainedRecorder, id_text

from .application import WorkflowApplication
from .loop.model import LoopSession
from .mail.model import mailbox_id_for
from .swarm.model import swarm_id_for
from .wire import WireEvents
from .workflow.model import Workflow

__all__ = ["BUNDLE_FORMAT", "aggregates_named", "export_bundle", "verify_orchestrator"]

BUNDLE_FORMAT = "autarch-audit-bundle/1"


def aggregates_named(app: WorkflowApplication, aggregate_id: str) -> list[str]:
    """The aggregates an id names in the store (empty: none); raises ValueError for an id that is no UUID."""
    canonical = str(uuid.UUID(aggregate_id))
    named = [canonical]
    if app.recorder.select_events(uuid.UUID(canonical), limit=1):
        named += [str(swarm_id_for(canonical)), str(mailbox_id_for(canonical))]
    recorder = app.recorder
    chained = recorder.chain_of if isinstance(recorder, ChainedRecorder) else (lambda _: {})
    return [a for a in named if app.recorder.select_events(uuid.UUID(a), limit=1) or chained(uuid.UUID(a))]


async def verify_orchestrator(app: WorkflowApplication, nc: Any | None, aggregate_id: str | None, *,
                              messages: list[StreamMessage] | None = None) -> AuditReport:
    """Verify the store (all of it, or what ``aggregate_id`` names), and with a connection the stream against it
    (``messages``: the whole stream, already read).

    Raises LookupError when the id names nothing in the store, ValueError when it is no UUID.
    """
    report = AuditReport(store=app.name)
    ids = None
    if aggregate_id is not None:
        ids = aggregates_named(app, aggregate_id)
        if not ids:
            raise LookupError(f"no aggregate {aggregate_id} in the event store")
    verify_store(app, report, ids)
    if nc is not None:
        # A workflow's (and its epic's and mailbox's) or a loop session's events share one workflow token.
        subject = subjects.run_events(str(uuid.UUID(aggregate_id))) if aggregate_id else subjects.EVENTS_ALL
        if messages is None or aggregate_id is not None:
            messages = await read_stream(nc, subjects.EVENTS_STREAM, subject)
        verify_stream(app, WireEvents(app), messages, report, position=relay_position(app), ids=ids)
    return report


def _git(cwd: str, *args: str) -> bytes:
    return subprocess.run(["git", "-C", cwd, *args], check=True, capture_output=True, timeout=60).stdout


def _branch_of(app: WorkflowApplication, aggregate_id: str) -> tuple[list[str], str, str | None] | None:
    """(places to look for the repository, branch, base commit) of a workflow or loop session whose branch the git
    service made; None for any other aggregate, and before the branch exists."""
    aggregate: Any = app.repository.get(uuid.UUID(aggregate_id))
    if isinstance(aggregate, Workflow) and aggregate.execution is not None:
        execution = aggregate.execution
        return [execution.worktree_path, aggregate.repo], execution.branch, execution.base_commit
    if isinstance(aggregate, LoopSession) and aggregate.branch is not None:
        made = aggregate.branch
        return [made.worktree_path, aggregate.project_path], made.branch, made.base_commit
    return None


def git_commits(places: list[str], branch: str, base: str | None) -> dict[str, Any]:
    """The branch's commits not on ``base``, oldest first, each as its raw object (the id is its hash)."""
    errors = []
    for place in places:
        try:
            head = _git(place, "rev-parse", "--verify", f"{branch}^{{commit}}").decode().strip()
        except (subprocess.SubprocessError, OSError) as exc:
            errors.append(f"{place}: {getattr(exc, 'stderr', b'') or exc}")
            continue
        spec = [head] + ([f"^{base}"] if base else [])
        try:
            ids = _git(place, "rev-list", "--reverse", *spec).decode().split()
        except subprocess.SubprocessError:
            ids = _git(place, "rev-list", "--reverse", head).decode().split()
            base = None
        commits = []
        for commit in ids:
            raw = _git(place, "cat-file", "commit", commit)
            header = raw.split(b"\n\n", 1)[0].decode(errors="replace").splitlines()
            commits.append({"id": commit, "tree": header[0].split()[1],
                            "parents": [line.split()[1] for line in header if line.startswith("parent ")],
                            "raw": base64.b64encode(raw).decode()})
        return {"branch": branch, "head": head, "base": base, "commits": commits}
    return {"branch": branch, "error": "; ".join(errors) or "no repository to read"}


def export_bundle(app: WorkflowApplication, aggregate_id: str) -> dict[str, Any]:
    """The bundle of everything an id names; raises LookupError when the store holds none of it."""
    recorder = app.recorder
    if not isinstance(recorder, ChainedRecorder):
        raise LookupError(f"the store's recorder ({type(recorder).__name__}) keeps no hash chain")
    named = aggregates_named(app, aggregate_id)
    if not named:
        raise LookupError(f"no aggregate {aggregate_id} in the event store")
    aggregates = []
    for aggregate in named:
        chain = recorder.chain_of(uuid.UUID(aggregate))
        aggregates.append({"id": aggregate, "events": [
            {"version": e.originator_version, "topic": e.topic, "state": base64.b64encode(e.state).decode(),
             "digest": chain[e.originator_version].hex() if e.originator_version in chain else None}
            for e in app.recorder.select_events(uuid.UUID(aggregate))]})
    wanted = set(named)
    checkpoints = [{"seq": c.seq, "payload": c.payload().decode(), "prev": c.prev.hex(), "digest": c.digest.hex()}
                   for c in recorder.checkpoints() if wanted & set(c.heads)]
    report = AuditReport(store=app.name)
    verify_store(app, report, named)
    bundle: dict[str, Any] = {
        "format": BUNDLE_FORMAT, "app": app.name, "id": id_text(uuid.UUID(aggregate_id)),
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "store_findings": [f.line() for f in report.findings],
        "aggregates": aggregates, "checkpoints": checkpoints,
    }
    try:
        branch = _branch_of(app, named[0])
    except Exception as exc:  # an aggregate its (edited) events no longer rebuild: the findings above say why
        bundle["git"] = {"error": f"the aggregate could not be rebuilt to find its branch: {exc}"}
    else:
        if branch is not None:
            bundle["git"] = git_commits(*branch)
    return bundle
