"""Diff artifacts: a workflow's or a pulse's unified diff, stored once, fetched by id.

An artifact's id is derived from what it compares (kind, workflow, pulse, both commits), so
asking twice for the same diff returns the same artifact without recomputing it, and a diff's
text never changes once stored.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec
from dulwich.graph import find_merge_base

from autarch.contracts.base import decode_renamed
from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import (
    RUN_ID_WAS,
    DiffArtifact,
    DiffArtifactRef,
    GetDiffArtifact,
    PulseDiff,
    WorkflowDiff,
)

from .checkout import commit_tree_id
from .diffs import FileDiff, FileKey, tree_diff
from .dulwich_ids import oid
from .engine import GitEngine
from .refs import branch_ref, read_branch
from .store import ArtifactStore
from .workspace import Workspace, fail

__all__ = ["get_diff_artifact", "pulse_diff", "workflow_diff"]

_MAX_RECENT_FILES = 200_000
"""Rendered files kept for the next diff (a small file's rendering and key take ~300 bytes)."""
_MAX_RECENT_BYTES = 64 * 1024 * 1024
"""And the bytes they (and the last diff's text) may hold: a diff of a few huge files is not kept in memory."""


def workflow_diff(engine: GitEngine, query: WorkflowDiff) -> DiffArtifactRef:
    """The workflow branch against its base branch, from their merge base (what a pull request shows)."""
    with engine.open_workspace(query.run_id) as ws:
        head = ws.workflow_head()
        base_head = read_branch(ws.repo, branch_ref(ws.record.base_branch))
        start = ws.record.base_commit.encode()
        if base_head is not None:
            bases = find_merge_base(ws.repo, [oid(base_head), oid(head)])
            if bases:
                start = bases[0]
        return _artifact(engine.artifacts, ws, kind="workflow", pulse_id=None, start=start, end=head)


def pulse_diff(engine: GitEngine, query: PulseDiff) -> DiffArtifactRef:
    """One ended pulse's commit (checkpoint or recovery) against the commit it started from."""
    with engine.open_workspace(query.run_id) as ws:
        pulse = ws.record.pulses.get(query.pulse_id) or engine.store.ended_pulse(ws.record.id, query.pulse_id)
        if pulse is None or pulse.commit is None:
            state = pulse.state if pulse else "unknown"
            raise fail(
                ErrorCode.NOT_FOUND,
                f"pulse {query.pulse_id} of workflow {query.run_id} has no commit ({state})",
                pulse_id=query.pulse_id,
                state=state,
            )
        return _artifact(
            engine.artifacts,
            ws,
            kind="pulse",
            pulse_id=pulse.id,
            start=pulse.base_commit.encode(),
            end=pulse.commit.encode(),
        )


def _read_ref(meta: bytes) -> DiffArtifactRef:
    # Artifacts stored before issue 33 name their run ``workflow_id``.
    return decode_renamed(meta, DiffArtifactRef, RUN_ID_WAS)


def get_diff_artifact(artifacts: ArtifactStore, query: GetDiffArtifact) -> DiffArtifact:
    """One page of a stored diff."""
    meta = artifacts.read_meta(query.artifact_id)
    if meta is None:
        raise fail(ErrorCode.NOT_FOUND, f"no diff artifact {query.artifact_id}", artifact_id=query.artifact_id)
    ref = _read_ref(meta)
    text = artifacts.read_text(query.artifact_id)
    end = query.offset + query.limit
    return DiffArtifact(
        ref=ref,
        diff=text[query.offset : end],
        offset=query.offset,
        next_offset=end if end < len(text) else None,
    )


def _artifact(
    artifacts: ArtifactStore, ws: Workspace, *, kind: Literal["workflow", "pulse"], pulse_id: str | None,
    start: bytes, end: bytes,
) -> DiffArtifactRef:
    key = f"{kind}:{ws.record.id}:{pulse_id or ''}:{start.decode()}:{end.decode()}"
    artifact_id = hashlib.sha256(key.encode()).hexdigest()[:32]
    meta = artifacts.read_meta(artifact_id)
    if meta is not None:
        return _read_ref(meta)
    trees = (commit_tree_id(ws.objects, start), commit_tree_id(ws.objects, end))
    # A first pulse's diff and its workflow's compare the same two trees, and a later workflow diff shares most of
    # its files with the one before: the last diff's text and its files' renderings are used again.
    recent = artifacts.recent_diff
    if recent is not None and recent[0] == trees:
        text, stats = recent[1], recent[2]
    else:
        files: dict[FileKey, FileDiff] = {}
        raw, stats = tree_diff(ws.objects, *trees, reuse=artifacts.recent_files, keep=files)
        text = raw.decode("utf-8", errors="replace")
        artifacts.recent_diff = (trees, text, stats) if len(raw) <= _MAX_RECENT_BYTES else None
        # Kept across diffs (a later pulse's small diff must not drop the first pulse's files before the workflow
        # diff asks), up to a bound in files and in bytes: past it only this diff's files stay, or none.
        size = sum(len(rendered[0]) for rendered in files.values())
        if (len(artifacts.recent_files) + len(files) > _MAX_RECENT_FILES
                or artifacts.recent_bytes + size > _MAX_RECENT_BYTES):
            fits = len(files) <= _MAX_RECENT_FILES and size <= _MAX_RECENT_BYTES
            artifacts.recent_files, artifacts.recent_bytes = (files, size) if fits else ({}, 0)
        else:
            artifacts.recent_files.update(files)
            artifacts.recent_bytes += size
    ref = DiffArtifactRef(
        artifact_id=artifact_id,
        kind=kind,
        run_id=ws.record.id,
        pulse_id=pulse_id,
        from_commit=start.decode(),
        to_commit=end.decode(),
        files_changed=stats.files_changed,
        insertions=stats.insertions,
        deletions=stats.deletions,
        size=len(text),
    )
    artifacts.save(artifact_id, meta=msgspec.json.encode(ref), text=text)
    return ref

