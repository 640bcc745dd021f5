"""The git service's own state: small JSON records under ``<data dir>/git``.

A workflow's record doubles as its operation journal: a multi-step operation (checkpoint,
recovery) records what it is about to do (``pending``, with the commit already made) before
moving any branch, so a restarted service finishes it instead of guessing. Each record is
replaced atomically (write a temporary file, rename).

A pulse that ended is moved out of its workflow's record into ``<workflow>.pulses``, one JSON line per pulse,
appended once: the record every operation reads and writes holds only the pulse still running (or with a step
to finish), so a loop session's thousandth iteration does not decode and rewrite the 999 pulses before it (a
record of 1,000 pulses took 8 ms to read, several times per iteration). Appended before the record is replaced,
an ended pulse is never lost to a crash; one found in both (a crash between the two) is read from the record.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec

if TYPE_CHECKING:
    from .diffs import DiffStats, FileDiff, FileKey

__all__ = [
    "ArtifactStore",
    "GitStore",
    "PendingOperation",
    "PulseRecord",
    "RepositoryRecord",
    "WorkflowRecord",
    "write_atomic",
]


class RepositoryRecord(msgspec.Struct, kw_only=True):
    id: str
    path: str
    base_branch: str
    registered_at: float


class PulseRecord(msgspec.Struct, kw_only=True):
    id: str
    branch: str
    base_commit: str
    state: Literal["running", "succeeded", "recovered", "discarded"] = "running"
    commit: str | None = None
    recovery: bool = False
    files_changed: int = 0
    paths: list[str] = []
    """The paths the pulse changed (records journaled before paths were kept have none)."""


class PendingOperation(msgspec.Struct, kw_only=True):
    """A checkpoint or recovery whose commit exists but whose branch moves may not be done."""

    kind: Literal["checkpoint", "recovery"]
    pulse_id: str
    commit: str | None
    """The checkpoint or recovery commit; None for a recovery with nothing to keep."""
    pulse_head: str | None
    """Where the pulse branch pointed before this operation."""
    files_changed: int
    paths: list[str] = []


class WorkflowRecord(msgspec.Struct, kw_only=True):
    id: str
    repository_id: str
    repository_path: str
    branch: str
    base_branch: str
    base_commit: str
    worktree_path: str
    worktree_id: str
    state: Literal["creating", "ready", "removed"] = "creating"
    start_commit: str | None = None
    """Where the branch was cut when not at ``base_commit`` (a fork: the original branch's commit at the fork)."""
    worktree_commit: str | None = None
    """The commit the worktree was last reset to (what "clean" is measured against)."""
    active_pulse: str | None = None
    pulses: dict[str, PulseRecord] = {}
    pending: PendingOperation | None = None
    created_at: float = 0.0


_encoder = msgspec.json.Encoder()


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one rename (readers see the old or the new content)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class GitStore:
    """Records of repositories and workflows under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repositories_dir = root / "repositories"
        self.workflows_dir = root / "workflows"
        self.locks_dir = root / "locks"
        for directory in (self.repositories_dir, self.workflows_dir, self.locks_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self._repo_decoder = msgspec.json.Decoder(RepositoryRecord)
        self._workflow_decoder = msgspec.json.Decoder(WorkflowRecord)
        self._pulse_decoder = msgspec.json.Decoder(PulseRecord)
        self._logged: dict[str, set[str]] = {}
        """Workflow → the ended pulses this process appended to its log (each is appended once)."""

    def repository(self, repository_id: str) -> RepositoryRecord | None:
        try:
            return self._repo_decoder.decode((self.repositories_dir / f"{repository_id}.json").read_bytes())
        except FileNotFoundError:
            return None

    def repositories(self) -> Iterator[RepositoryRecord]:
        for path in sorted(self.repositories_dir.glob("*.json")):
            yield self._repo_decoder.decode(path.read_bytes())

    def save_repository(self, record: RepositoryRecord) -> None:
        write_atomic(self.repositories_dir / f"{record.id}.json", _encoder.encode(record))

    def workflow(self, workflow_id: str) -> WorkflowRecord | None:
        """The workflow's record, with the pulses that have not ended (see :meth:`ended_pulse`)."""
        try:
            return self._workflow_decoder.decode((self.workflows_dir / f"{workflow_id}.json").read_bytes())
        except FileNotFoundError:
            return None

    def save_workflow(self, record: WorkflowRecord) -> None:
        """Replace the workflow's record; its pulses that ended are appended to its pulse log instead (``record``
        itself is not changed: the caller still finds them in it)."""
        keep = {record.active_pulse, record.pending.pulse_id if record.pending is not None else None}
        ended = [p for p in record.pulses.values() if p.state != "running" and p.id not in keep]
        if ended:
            logged = self._logged.setdefault(record.id, set())
            new = [p for p in ended if p.id not in logged]
            if new:
                with open(self._pulse_log(record.id), "ab") as f:
                    f.write(b"".join(_encoder.encode(p) + b"\n" for p in new))
                logged.update(p.id for p in new)
            done = {p.id for p in ended}
            record = msgspec.structs.replace(
                record, pulses={k: p for k, p in record.pulses.items() if k not in done})
        write_atomic(self.workflows_dir / f"{record.id}.json", _encoder.encode(record))

    def ended_pulse(self, workflow_id: str, pulse_id: str) -> PulseRecord | None:
        """The pulse ``pulse_id`` of the workflow if it ended (it is then in the pulse log), else None."""
        data = self._read_pulse_log(workflow_id)
        if b'"id":' + _encoder.encode(pulse_id) not in data:
            return None  # the common case (a new pulse's id), told without decoding the log
        return self._ended(data).get(pulse_id)

    def all_pulses(self, record: WorkflowRecord) -> dict[str, PulseRecord]:
        """Every pulse of the workflow, ended ones (in the order they ended) then the record's own."""
        pulses = self._ended(self._read_pulse_log(record.id))
        pulses.update(record.pulses)
        return pulses

    def delete_workflow(self, workflow_id: str) -> None:
        (self.workflows_dir / f"{workflow_id}.json").unlink(missing_ok=True)
        self._pulse_log(workflow_id).unlink(missing_ok=True)
        self._logged.pop(workflow_id, None)

    def _pulse_log(self, workflow_id: str) -> Path:
        return self.workflows_dir / f"{workflow_id}.pulses"

    def _read_pulse_log(self, workflow_id: str) -> bytes:
        try:
            return self._pulse_log(workflow_id).read_bytes()
        except FileNotFoundError:
            return b""

    def _ended(self, data: bytes) -> dict[str, PulseRecord]:
        pulses: dict[str, PulseRecord] = {}
        for line in data.splitlines():
            try:
                pulse = self._pulse_decoder.decode(line)
            except msgspec.DecodeError:
                continue  # a line cut short by a crash mid-append: that pulse is still in its record
            pulses[pulse.id] = pulse  # appended again after a crash: the last is the one
        return pulses

    def workflows(self) -> Iterator[WorkflowRecord]:
        for path in sorted(self.workflows_dir.glob("*.json")):
            yield self._workflow_decoder.decode(path.read_bytes())

    def lock_path(self, repository_id: str) -> Path:
        return self.locks_dir / f"{repository_id}.lock"


class ArtifactStore:
    """Diff artifacts: ``<id>.diff`` (the text) beside ``<id>.json`` (what it is), written in that order."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.recent_diff: tuple[tuple[bytes, bytes], str, DiffStats] | None = None
        """The last diff rendered: its two tree ids, text and stats. Tree ids name their content, so the same pair
        always gives the same text; a first pulse's diff and its workflow's compare the same trees."""
        self.recent_files: dict[FileKey, FileDiff] = {}
        """The last diff's files, rendered (a file's text follows from its path, modes and blob ids)."""
        self.recent_bytes = 0
        """The bytes of the renderings in ``recent_files`` (an update may count one twice: an upper bound)."""

    def meta_path(self, artifact_id: str) -> Path:
        return self.root / f"{artifact_id}.json"

    def text_path(self, artifact_id: str) -> Path:
        return self.root / f"{artifact_id}.diff"

    def read_meta(self, artifact_id: str) -> bytes | None:
        try:
            return self.meta_path(artifact_id).read_bytes()
        except FileNotFoundError:
            return None

    def read_text(self, artifact_id: str) -> str:
        with open(self.text_path(artifact_id), encoding="utf-8", newline="") as f:  # keep \r\n as stored
            return f.read()

    def save(self, artifact_id: str, *, meta: bytes, text: str) -> None:
        write_atomic(self.text_path(artifact_id), text.encode("utf-8"))
        write_atomic(self.meta_path(artifact_id), meta)
