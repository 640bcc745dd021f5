"""Where a worktree's repository lives, from Autarch's records, and how the tools service runs git on it.

An agent's command can write anything in its worktree, the linked worktree's ``.git`` file included, so
nothing this service runs outside the sandbox takes a path, a config or a program from there
(docs/security.md):

- the git directory, work tree and common directory come from a :class:`GitRecord`: the git service's own
  records (``worktree_record``), a repository the caller named as trusted (``autarch tools call
  --repository``), or a root whose ``.git`` is a real directory (a repository's own checkout: the sandbox keeps
  that directory read-only). A ``.git`` file is never read to find them;
- host-side git (:class:`HostGit`) is started with ``GIT_DIR``, ``GIT_WORK_TREE`` and ``GIT_COMMON_DIR`` set
  from the record, no system config, no filesystem monitor, no hooks, no external diff or pager, and with every
  filter and diff driver that only the repository's own config defines switched off: a ``.gitattributes`` may
  pick only the drivers of the user's global config (git-lfs keeps working);
- a linked worktree's ``.git`` file is checked against the record before and after every command
  (:func:`dot_git_tampered`) and written back from it (:func:`restore_dot_git`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from typing import Any

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import GetWorktreeRecord, WorktreeRecord
from autarch.contracts.tools import ToolErrorCode
from autarch.runtime.errors import RemoteError
from autarch.runtime.git_admin import admin_dir_of, own_git_dir
from autarch.runtime.requests import request

__all__ = [
    "GIT_FILE_TAMPERED",
    "GitRecord",
    "GitRecords",
    "HostGit",
    "NoGitRecord",
    "dot_git_tampered",
    "restore_dot_git",
]

log = logging.getLogger("tools")

GIT_FILE_TAMPERED = ToolErrorCode.GIT_FILE_TAMPERED
"""The ``code`` of a tool result whose worktree's ``.git`` file was not what the records say (docs/tools.md)."""

_MAX_DOT_GIT = 64 * 1024
_ASK_TIMEOUT = 5.0
_ASK_GRACE = 0.5
"""How long a restarting git service is waited for before a root's own ``.git`` directory is used."""
_ASK_GRACE_LINKED = 5.0
"""The same for a root with no ``.git`` directory of its own (a linked worktree), which only a record can serve."""

_FIXED_OPTIONS = (
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.pager=cat",
    "-c", "diff.external=",
    "-c", "submodule.recurse=false",
    "-c", "status.submoduleSummary=false",
    "-c", "core.sshCommand=",
    "-c", "credential.helper=",
)
"""Programs a repository's config can name that git would run; host-side git never runs them."""


class NoGitRecord(Exception):
    """No record says where this root's repository is; the message says why (for the model and the user)."""


@dataclass(frozen=True)
class GitRecord:
    """Where git keeps the repository of one work tree (all real paths)."""

    work_tree: str
    git_dir: str
    """The linked worktree's administrative directory, or the repository's own ``.git`` directory."""
    common_dir: str
    linked: bool
    source: str
    """Which record it came from: ``git service``, ``trusted repository`` or ``own .git directory``."""

    @property
    def dot_git(self) -> str:
        return os.path.join(self.work_tree, ".git")

    @property
    def dot_git_content(self) -> bytes:
        """What git writes in a linked worktree's ``.git`` file."""
        return b"gitdir: " + os.fsencode(self.git_dir) + b"\n"

    def readable(self) -> tuple[str, ...]:
        """The git directories a command in the work tree may read (its own ``.git`` directory is in the root)."""
        if not self.linked:
            return ()
        if _under(self.git_dir, self.common_dir):
            return (self.common_dir,)
        return (self.common_dir, self.git_dir)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _own_record(root: str) -> GitRecord | None:
    dot_git = own_git_dir(root)
    if dot_git is None:
        return None
    return GitRecord(work_tree=root, git_dir=dot_git, common_dir=dot_git, linked=False, source="own .git directory")


def _from_repository(repository: str, root: str) -> GitRecord | None:
    """``root``'s record read from a trusted repository's own git directory (never from ``root``)."""
    if root == repository:
        record = _own_record(root)
        return None if record is None else GitRecord(**{**record.__dict__, "source": "trusted repository"})
    common = own_git_dir(repository)
    admin = None if common is None else admin_dir_of(common, root)
    if common is None or admin is None:
        return None
    return GitRecord(work_tree=root, git_dir=admin, common_dir=os.path.realpath(common), linked=True,
                     source="trusted repository")


def _from_reply(reply: WorktreeRecord, root: str) -> GitRecord | None:
    if os.path.realpath(reply.path) != root:
        return None
    return GitRecord(work_tree=root, git_dir=reply.git_dir, common_dir=reply.common_dir, linked=reply.linked,
                     source="git service")


class GitRecords:
    """Each root's :class:`GitRecord`, asked of the git service once and kept (a record never changes while the
    worktree lives; a kept record whose git directory is gone is asked again)."""

    def __init__(self, nc: Any = None, *, repositories: tuple[str, ...] = ()) -> None:
        self.nc = nc
        self._repositories = [os.path.realpath(path) for path in repositories]
        self._known: dict[str, GitRecord] = {}
        self._options: dict[GitRecord, tuple[str, ...]] = {}

    def trust_repository(self, path: str) -> None:
        """Take ``path``'s own git directory as a record of its linked worktrees (the CLI's ``--repository``)."""
        real = os.path.realpath(path)
        if real not in self._repositories:
            self._repositories.append(real)

    async def lookup(self, root: str) -> GitRecord:
        """The record of ``root`` (a real path); :class:`NoGitRecord` when none says where its repository is."""
        known = self._known.get(root)
        if known is not None and os.path.isdir(known.git_dir):  # noqa: ASYNC240 - one stat, cheaper than a thread hop
            return known
        record, why = None, "no repository named for it"
        for repository in self._repositories:  # named by the user: asked first, no service to wait for
            record = await asyncio.to_thread(_from_repository, repository, root)
            if record is not None:
                break
        if record is None:
            own = await asyncio.to_thread(_own_record, root)
            # A restarting git service is waited for longer where a .git file says this is a linked worktree, which
            # only its record can serve; the look only chooses how long to wait, it names no path.
            linked = own is None and os.path.lexists(os.path.join(root, ".git"))  # noqa: ASYNC240 - one lstat
            record, why = await self._ask(root, grace=_ASK_GRACE_LINKED if linked else _ASK_GRACE)
            record = record or own
        if record is None:
            raise NoGitRecord(
                f"{root} is not a worktree or repository Autarch has a record of ({why}); its .git file alone is "
                "not trusted, since a command in the worktree can rewrite it"
            )
        self._known[root] = record
        return record

    async def _ask(self, root: str, *, grace: float) -> tuple[GitRecord | None, str]:
        if self.nc is None or not self.nc.is_connected:
            return None, "no git service to ask: not connected to NATS"
        try:
            reply = await request(self.nc, subjects.request("git", "worktree_record"), GetWorktreeRecord(path=root),
                                  WorktreeRecord, timeout=_ASK_TIMEOUT, retry_unavailable=grace)
        except RemoteError as exc:
            if exc.code == ErrorCode.NOT_FOUND:
                return None, f"the git service: {exc.reply.message}"
            return None, f"the git service did not answer: {exc.reply.message}"
        return _from_reply(reply, root), "the git service answered for another path"

    async def host_git(self, record: GitRecord, base_env: dict[str, str]) -> HostGit:
        """How to run git on ``record``'s work tree outside the sandbox; :class:`NoGitRecord` when its config
        cannot be read (so the drivers to switch off are unknown)."""
        env = _host_env(record, base_env)
        options = self._options.get(record)
        if options is None:
            options = await _driver_overrides(env)
            self._options[record] = options
        return HostGit(record=record, env=env, options=(*_FIXED_OPTIONS, *options))


def _host_env(record: GitRecord, base_env: dict[str, str]) -> dict[str, str]:
    env = {name: value for name, value in base_env.items() if not name.startswith("GIT_")}
    env.update(
        GIT_DIR=record.git_dir,
        GIT_WORK_TREE=record.work_tree,
        GIT_COMMON_DIR=record.common_dir,
        GIT_CEILING_DIRECTORIES=os.path.dirname(record.work_tree),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_ATTR_NOSYSTEM="1",
        GIT_OPTIONAL_LOCKS="0",
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        GIT_NO_LAZY_FETCH="1",
    )
    # The user's global config stays (HOME's): that is where git-lfs and the user's own drivers are defined.
    return env


async def _driver_overrides(env: dict[str, str]) -> tuple[str, ...]:
    """``-c`` options switching off every filter and diff driver the user's global config does not define."""
    proc = await asyncio.create_subprocess_exec(
        "git", *_FIXED_OPTIONS, "config", "--list", "--show-scope", "--includes", "-z", env=env,
        cwd=env["GIT_WORK_TREE"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:  # fail closed: without the list, a repository's own driver could run
        raise NoGitRecord(f"its git config cannot be read: {err.decode('utf-8', 'replace').strip()}")
    user: set[tuple[str, str]] = set()
    other: set[tuple[str, str]] = set()
    fields = out.split(b"\x00")
    for scope, entry in zip(fields[::2], fields[1::2], strict=False):
        key = entry.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
        section, _, rest = key.partition(".")
        name, _, _variable = rest.rpartition(".")
        if section.lower() not in ("filter", "diff") or not name:
            continue
        (user if scope == b"global" else other).add((section.lower(), name))
    options: list[str] = []
    for section, name in sorted(other - user):
        variables = ("clean", "smudge", "process") if section == "filter" else ("textconv", "command")
        for variable in variables:
            options += ["-c", f"{section}.{name}.{variable}="]
        if section == "filter":
            options += ["-c", f"filter.{name}.required=false"]
    return tuple(options)


@dataclass(frozen=True)
class HostGit:
    """git as the tools service runs it on one work tree: paths and config from the record only."""

    record: GitRecord
    env: dict[str, str] = field(repr=False)
    options: tuple[str, ...] = ()

    @property
    def root(self) -> str:
        return self.record.work_tree

    def argv(self, *args: str) -> list[str]:
        return ["git", "--no-pager", *self.options, *args]


def dot_git_tampered(record: GitRecord) -> str | None:
    """What a command did to the work tree's ``.git`` (None: it is what the record says)."""
    path = record.dot_git
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "it was deleted"
    except OSError as exc:
        return f"it cannot be checked ({exc.strerror})"
    if not record.linked:
        return None if stat.S_ISDIR(info.st_mode) else "the repository's .git directory was replaced"
    if stat.S_ISLNK(info.st_mode):
        return "it was replaced by a symbolic link"
    if stat.S_ISDIR(info.st_mode):
        return "it was replaced by a directory"
    if not stat.S_ISREG(info.st_mode):
        return "it was replaced by a special file"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    try:
        content = os.read(fd, _MAX_DOT_GIT + 1)
    finally:
        os.close(fd)
    if content.rstrip(b"\n") == record.dot_git_content.rstrip(b"\n"):
        return None
    return "it was rewritten to point elsewhere" if content.startswith(b"gitdir:") else "it was rewritten"


def restore_dot_git(record: GitRecord) -> None:
    """Put the ``.git`` file the record says back in place of whatever a command left there.

    Raises:
        OSError: it could not be written (the caller reports the file as not restored).
    """
    if not record.linked:
        raise OSError(f"{record.dot_git}: a repository's own .git directory cannot be rebuilt from the records")
    root_fd = os.open(record.work_tree, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            info = os.stat(".git", dir_fd=root_fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode):
            # rmtree never follows a link out of the directory it removes.
            shutil.rmtree(os.path.join(record.work_tree, ".git"))
        tmp = ".git.autarch-restore"
        try:
            os.unlink(tmp, dir_fd=root_fd)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=root_fd)
        try:
            os.write(fd, record.dot_git_content)
        finally:
            os.close(fd)
        os.replace(tmp, ".git", src_dir_fd=root_fd, dst_dir_fd=root_fd)  # a link or a file there is replaced
    finally:
        os.close(root_fd)
    log.warning("restored %s from the records (a command had changed it)", record.dot_git)
