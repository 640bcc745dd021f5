"""One workflow's repository, records and worktree, opened for the length of one operation."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from dulwich.config import ConfigFile
from dulwich.errors import NotGitRepository
from dulwich.ignore import default_user_ignore_filter_path
from dulwich.object_store import BaseObjectStore
from dulwich.repo import Repo

from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import GitErrorCode
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.ignore import GIT_IGNORE_FILES, Ignorer, read_ignore_file

from .refs import branch_ref, pulse_branch_name, read_branch
from .store import PulseRecord, WorkflowRecord
from .worktrees import admin_dir

__all__ = ["Repository", "Workspace", "fail", "open_repository"]


def fail(code: str, message: str, **details: object) -> ServiceFailure:
    """The typed error a handler raises (``code`` from :class:`GitErrorCode` or :class:`ErrorCode`)."""
    return ServiceFailure(code, message, dict(details))


class Repository(Repo):
    """dulwich's ``Repo`` reading its config file again only when the file changed (its inode, size, mtime or
    ctime), not at each ``get_config``: dulwich and this service asked for it some 15 times in one bead's three
    verbs, each a parse of the file (a third of their time in process). Good for the length of one operation, as
    a ``Repo`` here is."""

    def get_config(self) -> ConfigFile:
        path = os.path.join(self.commondir(), "config")
        try:
            st = os.stat(path)
        except OSError:
            return super().get_config()
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        kept: tuple[tuple[int, int, int, int], ConfigFile] | None = self.__dict__.get("_config_read")
        if kept is not None and kept[0] == stamp:
            return kept[1]
        config = super().get_config()
        self.__dict__["_config_read"] = (stamp, config)
        return config


def open_repository(path: str | os.PathLike[str]) -> Repo:
    """Open the repository whose top directory is ``path``, or fail with ``not_a_repository``."""
    if not os.path.isdir(path):
        raise fail(GitErrorCode.NOT_A_REPOSITORY, f"{path} is not a directory", path=str(path))
    try:
        repo = Repository(str(path))
    except NotGitRepository:
        raise fail(
            GitErrorCode.NOT_A_REPOSITORY,
            f"{path} is not the top directory of a git repository",
            path=str(path),
        ) from None
    except Exception as exc:  # unsupported repository extensions, unreadable config, …
        raise fail(
            GitErrorCode.NOT_A_REPOSITORY, f"{path}: cannot open the repository: {exc}", path=str(path)
        ) from None
    try:
        object_format = repo.get_config().get((b"extensions",), b"objectformat")
    except KeyError:
        object_format = b"sha1"
    if object_format.lower() != b"sha1":
        repo.close()
        raise fail(GitErrorCode.NOT_A_REPOSITORY, f"{path}: {object_format.decode()} repositories are not supported")
    return repo


@dataclass
class Workspace:
    """A workflow's record with its repository open; close it when the operation ends."""

    repo: Repo
    record: WorkflowRecord
    max_file_bytes: int = 100 * 1024 * 1024
    """The largest file a snapshot of this worktree reads (``git_max_file_bytes``)."""

    def close(self) -> None:
        self.repo.close()

    @property
    def objects(self) -> BaseObjectStore:
        return self.repo.object_store

    @property
    def admin(self) -> Path:
        return admin_dir(self.repo, self.record.worktree_id)

    @property
    def worktree(self) -> Path:
        return Path(self.record.worktree_path)

    @property
    def index_path(self) -> Path:
        return self.admin / "index"

    @property
    def workflow_ref(self) -> bytes:
        return branch_ref(self.record.branch)

    def pulse_ref(self, pulse_id: str) -> bytes:
        return branch_ref(pulse_branch_name(self.record.branch, pulse_id))

    def workflow_head(self) -> bytes:
        head = read_branch(self.repo, self.workflow_ref)
        if head is None:
            raise fail(
                ErrorCode.CONFLICT,
                f"the workflow branch {self.record.branch} no longer exists",
                branch=self.record.branch,
            )
        return head

    def running_pulse(self, pulse_id: str) -> PulseRecord:
        """The pulse if it is the running one, else a ``no_active_pulse`` error."""
        pulse = self.record.pulses.get(pulse_id)
        if pulse is None or pulse.state != "running" or self.record.active_pulse != pulse_id:
            state = pulse.state if pulse else "unknown"
            raise fail(
                GitErrorCode.NO_ACTIVE_PULSE,
                f"pulse {pulse_id} is not running in workflow {self.record.id} ({state}); "
                f"running: {self.record.active_pulse or 'none'}",
                pulse_id=pulse_id,
                state=state,
                active_pulse=self.record.active_pulse,
            )
        return pulse

    @cached_property
    def filemode(self) -> bool:
        return self.repo.get_config().get_boolean((b"core",), b"filemode", True)

    def ignore_check(self) -> Callable[[str], bool]:
        """The worktree's ignore rules as git applies them: ``.gitignore`` files, ``info/exclude``,
        ``core.excludesFile`` (in rising order of precedence, reversed), ``core.ignorecase``.

        The shared engine (:mod:`autarch.runtime.ignore`); ``.autarchignore`` is not read: what a
        commit picks up is what ``git add -A`` would. A path ending in ``/`` names a directory;
        a path below an ignored directory is ignored.
        """
        ignorecase, sources = self._ignore_sources
        base = []
        for path in sources:
            rules = read_ignore_file(path, ignorecase=ignorecase, follow=True)
            if rules is not None:
                base.append(rules)
        return Ignorer(str(self.worktree), files=GIT_IGNORE_FILES, base=base, ignorecase=ignorecase)

    def ignore_rules_stamp(self) -> tuple[object, ...]:
        """What the ignore rules from outside the worktree are read from, as it stands now (the settings, and
        each file's inode, size and times): equal stamps mean equal rules, so a scan listing only the
        directories that changed judges untracked files as the last one did."""
        ignorecase, sources = self._ignore_sources
        stamps: list[object] = [ignorecase]
        for path in sources:
            try:
                st = os.stat(path)
            except OSError:
                stamps.append((path, None))
                continue
            stamps.append((path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        return tuple(stamps)

    @cached_property
    def _ignore_sources(self) -> tuple[bool, tuple[str, ...]]:
        """``core.ignorecase``, and the ignore files outside the worktree (``core.excludesFile``, ``info/exclude``)."""
        config = self.repo.get_config_stack()
        ignorecase = config.get_boolean((b"core",), b"ignorecase", False)
        sources = (
            os.path.expanduser(default_user_ignore_filter_path(config)),
            os.path.join(self.repo.commondir(), "info", "exclude"),
        )
        return ignorecase, sources
