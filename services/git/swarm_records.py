"""The git service's records of a workflow's swarm: its workers and every bead attempt.

One JSON file per workflow, ``<data dir>/git/swarms/<workflow id>.json``, replaced atomically and
only written under the repository's lock (as workflow records are). It doubles as the journal of
the swarm verbs: each records what it is about to do before it moves a branch, so a repeated
command (after a timeout or a restarted service) answers the first outcome or finishes the step.

An attempt whose merge outcome is recorded changes no more: it is moved out of the record into
``<workflow id>.attempts``, one JSON line per attempt, appended once (as ended pulses are, ``store.py``), so
the record every bead verb reads and writes several times holds the attempts in flight, not every bead the
epic ever ran (with 300 beads, its reads and rewrites were a tenth of the git service's time). Appended before
the record is replaced, an ended attempt is never lost to a crash; one found in both is read from the record. A
process indexes the log where each attempt's line is, reading only what was appended since it last looked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import msgspec

from .store import write_atomic

__all__ = ["AttemptRecord", "MergeJournal", "MergeOutcome", "SwarmRecord", "SwarmStore", "WorkerRecord", "attempt_key",
           "ended"]


class WorkerRecord(msgspec.Struct, kw_only=True):
    name: str
    branch: str
    worktree_path: str
    worktree_id: str
    """The name of the worktree's administrative directory (``<common dir>/worktrees/<id>``)."""
    state: Literal["new", "opening", "open", "closed"] = "opening"
    """``new`` only in memory, before the first save."""
    current: str | None = None
    """The key of the bead attempt the worktree was last reset for."""


class MergeJournal(msgspec.Struct, kw_only=True):
    """A merge whose commit exists but whose move of the workflow branch may not be done."""

    commit: str
    """What the workflow branch moves to."""
    old_tip: str
    """Where it pointed when the merge was computed."""
    fast_forward: bool


class MergeOutcome(msgspec.Struct, kw_only=True):
    status: Literal["merged", "conflict"]
    commit: str | None = None
    fast_forward: bool = False
    conflicting_files: list[str] = []
    landed_since: list[str] = []


class AttemptRecord(msgspec.Struct, kw_only=True):
    bead_id: str
    attempt: int
    worker: str
    base_commit: str
    ready: bool = False
    """The worker branch and worktree were reset to ``base_commit``."""
    committed: bool = False
    commit: str | None = None
    files_changed: list[str] = []
    message: str = ""
    merging: MergeJournal | None = None
    merged: MergeOutcome | None = None


class SwarmRecord(msgspec.Struct, kw_only=True):
    workflow_id: str
    workers: dict[str, WorkerRecord] = {}
    attempts: dict[str, AttemptRecord] = {}
    """Keyed by :func:`attempt_key`: the attempts not :func:`ended` (those are in the attempt log,
    :meth:`SwarmStore.attempt`), and any ended since the record was read."""


def attempt_key(bead_id: str, attempt: int) -> str:
    return f"{bead_id}#{attempt}"


def ended(attempt: AttemptRecord) -> bool:
    """Its merge outcome is recorded (merged or conflict) and no merge journal is left: nothing changes it again."""
    return attempt.merged is not None and attempt.merging is None


_encoder = msgspec.json.Encoder()


class SwarmStore:
    """Swarm records under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._decoder = msgspec.json.Decoder(SwarmRecord)
        self._attempt_decoder = msgspec.json.Decoder(AttemptRecord)
        self._logged: dict[str, set[str]] = {}
        """Workflow → the ended attempts this process appended to its log (each is appended once)."""
        self._index: dict[str, _LogIndex] = {}
        """Workflow → where each attempt's last line is in its log, as far as this process has read it."""

    def load(self, workflow_id: str) -> SwarmRecord:
        """The workflow's swarm record (an empty one when it has none yet), with the attempts not ended."""
        try:
            return self._decoder.decode((self.root / f"{workflow_id}.json").read_bytes())
        except FileNotFoundError:
            return SwarmRecord(workflow_id=workflow_id)

    def attempt(self, record: SwarmRecord, key: str) -> AttemptRecord | None:
        """The attempt ``key`` of the record's workflow: the record's own, else the ended one in the log, else None.

        The log is read once per process and then only where it grew (another instance of the service may have
        appended): reading all of it for each new bead made every bead verb cost more the more beads had landed.
        """
        found = record.attempts.get(key)
        if found is not None:
            return found
        where = self._indexed(record.workflow_id).lines.get(key)
        if where is None:
            return None
        start, end = where
        try:
            with open(self._log(record.workflow_id), "rb") as f:
                f.seek(start)
                return self._attempt_decoder.decode(f.read(end - start))
        except (FileNotFoundError, msgspec.DecodeError):
            return None

    def _indexed(self, workflow_id: str) -> _LogIndex:
        """The index of the workflow's log, brought up to what the file holds now."""
        path = self._log(workflow_id)
        index = self._index.get(workflow_id)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if index is None or index.inode != st.st_ino or st.st_size < index.size:
                    index = self._index[workflow_id] = _LogIndex(inode=st.st_ino)  # new, or not the file it was
                if st.st_size > index.size:
                    f.seek(index.size)
                    index.add(f.read(st.st_size - index.size), self._attempt_decoder)
        except FileNotFoundError:
            index = self._index[workflow_id] = _LogIndex(inode=-1)
        return index

    def save(self, record: SwarmRecord) -> None:
        """Replace the workflow's record; its ended attempts are appended to its attempt log instead (``record``
        itself is not changed: the caller still finds them in it)."""
        done = {key: a for key, a in record.attempts.items() if ended(a)}
        if done:
            logged = self._logged.setdefault(record.workflow_id, set())
            new = [key for key in done if key not in logged]
            if new:
                with open(self._log(record.workflow_id), "ab+") as f:
                    # A line a crash cut short is ended first, so that the next is a line of its own.
                    lead = b"\n" if f.tell() > 0 and os.pread(f.fileno(), 1, f.tell() - 1) != b"\n" else b""
                    f.write(lead + b"".join(_encoder.encode(done[key]) + b"\n" for key in new))
                logged.update(new)
            record = msgspec.structs.replace(
                record, attempts={k: a for k, a in record.attempts.items() if k not in done})
        write_atomic(self.root / f"{record.workflow_id}.json", _encoder.encode(record))

    def _log(self, workflow_id: str) -> Path:
        return self.root / f"{workflow_id}.attempts"


class _LogIndex:
    """Attempt key → (start, end) of its last complete line in one attempt log, read up to ``size`` bytes."""

    def __init__(self, inode: int) -> None:
        self.inode = inode
        self.size = 0
        self.lines: dict[str, tuple[int, int]] = {}

    def add(self, data: bytes, decoder: msgspec.json.Decoder[AttemptRecord]) -> None:
        """Index the complete lines of ``data``, the log's bytes from ``size`` on; a last line without its newline
        (an append under way, or cut short by a crash) is left for a later read."""
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            try:
                attempt = decoder.decode(data[start:end])
            except msgspec.DecodeError:
                pass  # a line cut short by a crash, ended by the next append: that attempt is still in its record
            else:
                # Appended again after a crash: the last is the one.
                self.lines[attempt_key(attempt.bead_id, attempt.attempt)] = (self.size + start, self.size + end)
            start = end + 1
        self.size += start
