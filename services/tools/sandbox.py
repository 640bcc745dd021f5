"""What an agent's command may reach, and how it is started confined (see :mod:`.sandbox_launch`).

The policy is an allow-list at every level:

- files (Landlock): read, write and execute in the worktree and a private temp dir made for the call;
  read and execute in the system's toolchain directories (``/usr``, ``/bin``, ``/lib*``, ``/opt``,
  ``/etc`` without its secret files, ``/proc``, ``/sys``), this Python's installation and what the user
  adds (``sandbox_read_paths``, ``sandbox_write_paths``); read only, never execute, in the repository's git
  directory as Autarch's records name it (``git status/diff/log`` work; no hook can run, none be written; a
  linked worktree's ``.git`` file is read-only too, so no command can point it elsewhere). The data dir, other
  worktrees, the home directory and the rest of ``/tmp`` are out of reach;
- network: none but loopback inside a private network namespace (``sandbox_network`` opens outgoing TCP to
  ``sandbox_network_ports`` only, so the gateway and NATS stay unreachable); a preflight command also reaches
  the package registries through the registry proxy of :mod:`.egress`;
- processes: a PID namespace whose init ends everything with the command; no signal or ptrace across;
- resources: memory, processes, file size, bytes written and CPU time, each bounded (:class:`SandboxLimits`,
  held as :mod:`.sandbox_limits` says);
- environment: only the variables named in :data:`PASSED_VARIABLES` and ``sandbox_env``.

Commands start through the launch server of :mod:`.sandbox_client` (one warm process forks each launcher).

Where the kernel has no Landlock, bubblewrap (``bwrap``) builds the same allow-list out of mounts; where neither
exists the shell refuses to run, unless the user set ``sandbox = "off"``.
"""

from __future__ import annotations

import functools
import marshal
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from . import landlock

if TYPE_CHECKING:
    from .gitrecord import GitRecord

__all__ = [
    "LAUNCH_FAILED",
    "PASSED_VARIABLES",
    "Capabilities",
    "Launch",
    "SandboxLimits",
    "SandboxPolicy",
    "SandboxUnavailable",
    "capabilities",
    "decode_spec",
    "encode_spec",
    "prepare_launch",
    "sandbox_environment",
]

_LAUNCHER = str(Path(__file__).with_name("sandbox_launch.py"))
LAUNCH_FAILED = 125
"""The launcher's exit code when the sandbox could not be set up (the command never ran); its stderr says why."""
_SHELL = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"

SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/etc", "/proc", "/sys")
"""The toolchain and system directories a command may read and execute from."""
SYSTEM_SECRETS = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
    "/etc/ssh", "/etc/ssl/private", "/etc/security/opasswd",
)
"""Beneath :data:`SYSTEM_READ` but never readable: password hashes, host keys, private TLS keys."""
DEVICES_RW = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")
DEVICES_R = ("/dev/random", "/dev/urandom")
PASSED_VARIABLES = ("PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "COLUMNS", "LINES")
"""Variables a command inherits (with every ``LC_*``); anything else must be named in ``sandbox_env``."""
DEFAULT_NETWORK_PORTS = (53, 80, 443)
HIDDEN = ("/run", "/tmp", "/var/tmp")
"""Replaced by empty tmpfs in the command's mount namespace (allowed paths beneath them are bound back)."""

_DEVICE_RW = landlock.ACCESS_FS["read_file"] | landlock.ACCESS_FS["write_file"] | landlock.ACCESS_FS["truncate"] \
    | landlock.ACCESS_FS["ioctl_dev"]
_ALL = (1 << 16) - 1  # masked by the kernel's ABI in the launcher's Ruleset


class NetworkAmendment(Protocol):
    """What a command's way out adds to its launch (preflight's registry proxy, :mod:`.egress`).

    A protocol rather than the class itself: :mod:`.egress` builds on this module, not the other way round.
    """

    def apply(self, spec: dict, env: dict[str, str], temp_dir: str) -> None:
        """Add its rules and spec keys to ``spec`` and its variables to ``env``."""


class SandboxUnavailable(Exception):
    """The command cannot run confined; the message says why and what the user can do."""


MIB = 1024 * 1024


@dataclass(frozen=True)
class SandboxLimits:
    """What one command may use (0: no limit); the ``sandbox_*`` settings of the same names, in bytes here."""

    memory: int = 8192 * MIB
    """Memory of all its processes together."""
    processes: int = 4096
    """Processes and threads at once."""
    file_size: int = 4096 * MIB
    """Size of any one file it writes."""
    write: int = 8192 * MIB
    """Bytes it writes to files, in total."""
    cpu: int = 1800
    """CPU seconds of all its processes together."""

    def spec(self) -> dict[str, int]:
        return {"memory": self.memory, "processes": self.processes, "file_size": self.file_size,
                "write": self.write, "cpu": self.cpu}



@dataclass(frozen=True)
class SandboxPolicy:
    """The user's settings for agent commands (``sandbox*`` in :class:`autarch.runtime.settings.ToolsSettings`)."""

    mode: str = "on"
    """``on``: confined, refused where no sandbox exists; ``off``: unconfined (the user's explicit choice)."""
    network: bool = False
    """Allow outgoing TCP to :attr:`network_ports` (no network namespace then)."""
    network_ports: tuple[int, ...] = DEFAULT_NETWORK_PORTS
    read_paths: tuple[str, ...] = ()
    """More directories to read and execute from (a toolchain in the home directory, say)."""
    write_paths: tuple[str, ...] = ()
    """More directories to write in (a shared build cache, say)."""
    env: tuple[str, ...] = ()
    """More environment variable names a command inherits."""
    data_dir: str | None = None
    """Autarch's data dir: must stay out of reach, so no read or write path may contain it."""
    limits: SandboxLimits = SandboxLimits()
    cgroups: bool = True
    """Hold limits by cgroups where this machine lets the service make them; False: by the fallbacks alone (what
    a machine without cgroup write access gets; for tests)."""


@dataclass(frozen=True)
class Capabilities:
    """What this machine offers: the Landlock ABI (0: none) and whether user namespaces can be made."""

    landlock_abi: int
    namespaces: bool
    namespace_error: str = ""


def encode_spec(spec: dict) -> str:
    """The launcher's argument: ``marshal`` in hex (plain data only: str, int, bool, None, list, dict)."""
    return marshal.dumps(spec).hex()


def decode_spec(text: str) -> dict:
    """The inverse of :func:`encode_spec`."""
    return marshal.loads(bytes.fromhex(text))


@functools.cache
def capabilities() -> Capabilities:
    """Probe once per process: the kernel's Landlock ABI, and a real start of the launcher in namespaces."""
    abi = landlock.abi_version()
    spec = {"argv": ["/bin/true"], "cwd": "/", "parent": os.getpid(), "namespaces": True,
            "private_network": True, "landlock_abi": 0, "rules": []}
    try:
        done = subprocess.run([sys.executable, "-I", "-S", _LAUNCHER, encode_spec(spec)], env={},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Capabilities(abi, False, str(exc))
    if done.returncode != 0:
        return Capabilities(abi, False, done.stderr.strip().removeprefix("autarch-sandbox: "))
    return Capabilities(abi, True)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _grant(root: str, rights: int, exclude: tuple[str, ...], rules: list[tuple[str, int]]) -> None:
    """A rule for ``root``, or — when a path to keep out lies beneath it — one per child, recursively."""
    if any(_under(root, ex) for ex in exclude) or not os.path.exists(root):
        return
    if not any(_under(ex, root) and ex != root for ex in exclude):
        rules.append((root, rights))
        return
    try:
        children = sorted(os.listdir(root))
    except OSError:
        return
    for name in children:
        _grant(os.path.join(root, name), rights, exclude, rules)


def _python_prefixes() -> list[str]:
    return sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})


@functools.lru_cache(maxsize=8)
def _base_rules(policy: SandboxPolicy) -> tuple[tuple[str, int], ...]:
    """The rules every call shares (computed once per policy: ``/etc`` is walked around its secrets)."""
    rules: list[tuple[str, int]] = []
    for root in (*SYSTEM_READ, *_python_prefixes(), *policy.read_paths):
        _grant(os.path.realpath(os.path.expanduser(root)), landlock.READ_EXEC, SYSTEM_SECRETS, rules)
    for path in policy.write_paths:
        _grant(os.path.realpath(os.path.expanduser(path)), _ALL, SYSTEM_SECRETS, rules)
    rules += [(dev, _DEVICE_RW) for dev in DEVICES_RW if os.path.exists(dev)]
    rules += [(dev, landlock.READ_EXEC & ~landlock.ACCESS_FS["execute"]) for dev in DEVICES_R if os.path.exists(dev)]
    if policy.data_dir:
        data = os.path.realpath(os.path.expanduser(policy.data_dir))
        for path, _ in rules:
            if _under(data, path):
                raise SandboxUnavailable(
                    f"the sandbox would expose Autarch's data dir {data}: it lies inside {path}. Move the data dir "
                    "or narrow sandbox_read_paths / sandbox_write_paths."
                )
    return tuple(rules)


def _git_access(root: str, git: GitRecord | None) -> tuple[list[str], list[str]]:
    """The git directories a command in ``root`` may read, and the paths to mount read-only in its namespace.

    Only the record says where the repository is (never the worktree's ``.git``, which a command can rewrite):
    a linked worktree's common (and administrative) directory is readable, its ``.git`` file read-only. A
    ``.git`` directory of the root's own is read-only whatever the record says: that only takes rights away.
    """
    readable = list(git.readable()) if git is not None and git.work_tree == root else []
    mounts = []
    dot_git = os.path.join(root, ".git")
    try:
        info = os.lstat(dot_git)
    except OSError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        mounts.append(dot_git)
    elif readable and info is not None and stat.S_ISREG(info.st_mode):
        mounts.append(dot_git)  # the linked worktree's .git file: a command must not point it elsewhere
    return readable, mounts


def sandbox_environment(policy: SandboxPolicy, *, home: str | None, environ: dict[str, str] | None = None,
                        readable: tuple[str, ...] = ()) -> dict[str, str]:
    """The command's environment, built from an allow-list (never from what a filter let through).

    Args:
        home: the private temp dir, which also serves as ``HOME`` and ``TMPDIR``; None keeps the real ones.
        readable: directories the command may read; ``PATH`` keeps only entries beneath them, after this
            Python's own ``bin`` (so ``python3`` is an interpreter the command can run, not a shim it cannot).
    """
    source = os.environ if environ is None else environ
    names = set(PASSED_VARIABLES) | set(policy.env)
    env = {k: v for k, v in source.items() if k in names or k.startswith("LC_")}
    if home is None:
        for name in ("HOME", "TMPDIR"):
            if name in source:
                env[name] = source[name]
    else:
        env.update(HOME=home, TMPDIR=home, TMP=home, TEMP=home)
        entries = [os.path.dirname(sys.executable)]
        for entry in source.get("PATH", os.defpath).split(os.pathsep):
            real = os.path.realpath(entry) if entry else ""
            if real and any(_under(real, root) for root in readable) and entry not in entries:
                entries.append(entry)
        env["PATH"] = os.pathsep.join(entries)
    # Never wait for a password prompt or a pager that nobody will answer; leave no bytecode in the worktree
    # (a __pycache__ the agent's test run made would otherwise land in the pulse's commit).
    env.update(GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", PAGER="cat", PYTHONDONTWRITEBYTECODE="1",
               AUTARCH_SANDBOX=policy.mode)
    return env


@dataclass
class Launch:
    """How to start one command: the argv and environment, and the private temp dir to remove after.

    A confined command goes through the launch server (:mod:`.sandbox_client`): ``spec`` for the launcher, or,
    under bubblewrap, ``argv`` with ``limits`` and ``cwd``. ``argv`` of a launcher spec also starts the launcher
    on its own (``python -I -S sandbox_launch.py SPEC``), which is what :func:`capabilities` does.
    """

    argv: list[str]
    env: dict[str, str]
    temp_dir: str | None = None
    own_session: bool = False
    """Start it in a session of its own: only an unconfined command, which has no PID namespace to end what it
    leaves behind (see :mod:`.shell`)."""
    spec: dict | None = None
    limits: dict[str, int] | None = None
    cwd: str | None = None
    cgroups: bool = True

    @property
    def confined(self) -> bool:
        return self.limits is not None

    def cleanup(self) -> None:
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def prepare_launch(policy: SandboxPolicy, command: str, *, root: str, git: GitRecord | None = None,
                   network: NetworkAmendment | None = None) -> Launch:
    """The confined (or, with ``sandbox = "off"``, plain) start of ``bash -c command`` in ``root``.

    ``git``: the root's record (:mod:`.gitrecord`): the git directories outside the root the command may read
    come from it alone (None: none).

    ``network``: the command's way to the package registries (a preflight command's, :mod:`.egress`), added to
    its sandbox here; it learns whether the command got a network namespace of its own.

    Raises:
        SandboxUnavailable: confinement is on but this machine cannot provide it, or the settings would
            expose the data dir.
    """
    shell = [_SHELL, "-c", command]
    if policy.mode == "off":
        return Launch(shell, sandbox_environment(policy, home=None), own_session=True)
    caps = capabilities()
    root = os.path.realpath(root)
    if caps.landlock_abi < 1:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxUnavailable(
                "no sandbox is available: this kernel has no Landlock and bubblewrap (bwrap) is not installed, so "
                "agent commands cannot be confined. Use a kernel with Landlock (Linux 5.13+, in the lsm= boot "
                "list) or install bubblewrap, or set sandbox = \"off\" to run them unconfined at your own risk."
            )
        return _bubblewrap_launch(bwrap, policy, shell, root, git)
    git_readable, git_mounts = _git_access(root, git)
    git_inside = os.path.join(root, ".git") in git_mounts and os.path.isdir(os.path.join(root, ".git"))
    if git_inside and not caps.namespaces:
        raise SandboxUnavailable(
            f"{root} holds its own .git, which only a mount namespace can keep read-only, and user namespaces are "
            f"not available here ({caps.namespace_error}); run commands in a linked worktree instead"
        )
    rules = list(_base_rules(policy))
    temp_dir = tempfile.mkdtemp(prefix="autarch-sandbox-")
    readable = tuple(path for path, _ in rules)
    rules += [(root, _ALL), (temp_dir, _ALL)]
    rules += [(path, landlock.READ) for path in git_readable]
    private_network = caps.namespaces and not policy.network
    if caps.namespaces:
        rules.append(("/dev/shm", _ALL))  # a private tmpfs in the launcher's mount namespace
    spec = {
        "argv": shell,
        "cwd": root,
        "parent": os.getpid(),
        "namespaces": caps.namespaces,
        "private_network": private_network,
        "private_shm": caps.namespaces,
        "landlock_abi": caps.landlock_abi,
        "rules": rules,
        # Without a network namespace, Landlock (ABI 4+) keeps TCP to the allowed ports; none when off.
        "connect_ports": None if private_network else list(policy.network_ports if policy.network else ()),
        # Without namespaces (Landlock alone) a linked worktree's .git file stays writable: the check of it before
        # and after every command (commands.py) is then what holds.
        "readonly_mounts": git_mounts if caps.namespaces else [],
        # Where unix sockets live: hidden, since Landlock does not govern connecting to one by path.
        "hidden": list(HIDDEN) if caps.namespaces else [],
    }
    spec["limits"] = policy.limits.spec()
    spec["cgroups"] = policy.cgroups
    env = sandbox_environment(policy, home=temp_dir, readable=(*readable, root))
    if network is not None:  # the registries (and their proxy) of a preflight command
        network.apply(spec, env, temp_dir)
    return Launch([sys.executable, "-I", "-S", _LAUNCHER, encode_spec(spec)], env, temp_dir, spec=spec,
                  limits=spec["limits"], cwd=root)  # type: ignore[arg-type]  # policy.limits.spec(), above


def _bubblewrap_launch(bwrap: str, policy: SandboxPolicy, shell: list[str], root: str,
                       git: GitRecord | None) -> Launch:
    """Where the kernel has no Landlock: the same allow-list as mounts in a new, otherwise empty root.

    bubblewrap builds the root from bind mounts of exactly the allowed paths (read-only where only reading is
    allowed), a fresh ``/proc`` and minimal ``/dev``, in user, PID, IPC and (network off) network namespaces;
    the command's PID namespace dies with it. Without Landlock, outgoing TCP cannot be narrowed to ports, so
    ``sandbox_network`` then opens the whole network.
    """
    rules = list(_base_rules(policy))
    git_readable, git_mounts = _git_access(root, git)
    temp_dir = tempfile.mkdtemp(prefix="autarch-sandbox-")
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-user", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]
    if not policy.network:
        argv.append("--unshare-net")
    for path, rights in rules:
        if path.startswith(("/proc", "/dev")):
            continue  # bubblewrap's own fresh /proc and minimal /dev
        argv += ["--bind" if rights & landlock.ACCESS_FS["write_file"] else "--ro-bind", path, path]
    for path in SYSTEM_READ:
        if os.path.islink(path):  # /bin → usr/bin on a merged-/usr system: the rules name only the target
            argv += ["--symlink", os.readlink(path), path]
    argv += ["--bind", root, root, "--bind", temp_dir, temp_dir]
    for path in (*git_readable, *git_mounts):  # after the root's bind, so what is inside it is read-only too
        argv += ["--ro-bind", path, path]
    argv += ["--chdir", root, "--", *shell]
    readable = tuple(path for path, _ in rules)
    return Launch(argv, sandbox_environment(policy, home=temp_dir, readable=(*readable, root)), temp_dir,
                  limits=policy.limits.spec(), cwd=root, cgroups=policy.cgroups)
