"""A workflow worktree driven pulse by pulse in process, counting the git engine's scans of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from autarch.contracts.git import CheckpointPulse, CreateWorkflowBranch, RegisterRepository, StartPulse
from autarch.services.git import checkout, checkpoints
from autarch.services.git.commits import Identity
from autarch.services.git.engine import GitEngine
from autarch.services.git.index_file import read_index
from autarch.services.git.snapshots import Snapshot

from .gitcli import git


class Loop:
    """A workflow worktree driven pulse by pulse, counting the scans of its tracked files."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: Mapping[str, str] | None = None) -> None:
        repo = tmp_path / "project"
        (repo / "src").mkdir(parents=True)
        git(repo, "init", "-q", "-b", "main")
        (repo / "src" / "app.py").write_text("def main():\n    return 1\n")
        (repo / "README.md").write_text("# Demo\n")
        for name, text in (files or {}).items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
        self.repo = repo
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "initial")
        self.engine = GitEngine(data_dir=tmp_path / "data", identity=Identity())
        registered = self.engine.register_repository(RegisterRepository(path=str(repo), base_branch="main"))
        view = self.engine.create_workflow_branch(
            CreateWorkflowBranch(run_id="wf", repository_id=registered.repository_id, branch="autarch/wf"))
        self.worktree = Path(view.worktree_path)
        self.number = 0
        self.scans = 0
        scan = checkout.scan_worktree

        def counted(*args: object, **kwargs: object) -> object:
            self.scans += 1
            return scan(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(checkout, "scan_worktree", counted)
        self.checkpoint_scans: list[Snapshot] = []
        """What each checkpoint's scan found (``partial``: it listed only what the watch did not prove quiet)."""
        full_scan = checkpoints.scan_worktree

        def recorded(*args: object, **kwargs: object) -> Snapshot:
            snapshot = full_scan(*args, **kwargs)  # type: ignore[arg-type]
            self.checkpoint_scans.append(snapshot)
            return snapshot

        monkeypatch.setattr(checkpoints, "scan_worktree", recorded)

    def start(self) -> None:
        self.number += 1
        self.engine.start_pulse(StartPulse(run_id="wf", pulse_id=f"p{self.number}"))

    def checkpoint(self, write: Callable[[Path], object] | None = None) -> None:
        (write or (lambda root: (root / "src" / f"step{self.number}.py").write_text(f"STEP = {self.number}\n")))(
            self.worktree)
        self.engine.checkpoint_pulse(CheckpointPulse(run_id="wf", pulse_id=f"p{self.number}",
                                                     summary=f"feat: step {self.number}"))

    def pulses(self, count: int) -> None:
        for _ in range(count):
            self.start()
            self.checkpoint()

    def scans_of_next_start(self) -> int:
        before = self.scans
        self.start()
        return self.scans - before

    @property
    def last_scan(self) -> Snapshot:
        return self.checkpoint_scans[-1]

    def quiet(self) -> bool:
        with self.engine.open_workspace("wf") as ws:
            return self.engine.watch.unchanged(ws.worktree, read_index(ws.index_path).checksum)
