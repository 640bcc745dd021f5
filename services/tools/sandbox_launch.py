"""The sandbox launcher: confines one agent command, runs it, and ends everything it started.

Standard library only, and little of it. Two ways in: the tools service's launch server
(:mod:`.sandbox_zygote`) forks one per command and calls :func:`run_launcher` (no interpreter start per
command); ``python -I -S sandbox_launch.py SPEC`` runs one on its own (the capability probe; it starts in
~15 ms), with the sandbox's environment already in place. SPEC is the spec
:func:`autarch.services.tools.sandbox.prepare_launch` writes, ``marshal``-ed and in hex (``json`` alone would
double the launcher's start-up). The process tree:

- the launcher (leader of a process group of its own; dies with its parent by ``PR_SET_PDEATHSIG``: the launch
  server, or, started on its own, whoever started it) joins the command's cgroups (:mod:`.sandbox_limits`),
  creates a user namespace with a PID, a mount and — when the network is off — a network namespace, and forks
- an init (PID 1 of the new PID namespace): it makes the mounts private, mounts a fresh ``/proc`` (so no
  process outside is even visible), gives ``/dev/shm`` a private tmpfs, brings up loopback, and forks (then,
  with a private network, starts a preflight command's forwarder to the registry proxy, :mod:`.egress_forward`,
  when the command's process hands it the forwarder's listener, and reaps)
- the command's process: it hides ``/run`` and ``/tmp`` under empty tmpfs (bringing back only the allowed paths
  beneath them), makes the repository's git directory (or a linked worktree's ``.git`` file) read-only and
  non-executable, bounds the namespace's PIDs
  where no cgroup counts processes, opens a preflight command's listener for the forwarder and hands it to the
  init, lowers its resource limits, confines itself with Landlock to the rules of the spec, gives SIGPIPE and
  SIGXFSZ back their default action (Python ignores both, and an ignored signal stays ignored across
  ``execve``), and ``execve``-s the command.

All of that up to the command's own part needs no command: the launch server makes a *spare* launcher this far
ahead of time, whose command's process waits for the spec (:func:`run_launcher`'s ``command``).

When the command exits the init exits with its status, and the kernel kills every process left in the
PID namespace — a ``setsid`` or double-forked daemon included — before the init is gone. Killing the launcher
(a timeout, a cancel, a limit) kills the init by its death signal, with the same effect. The launcher exits with
the command's status (128 + N for signal N); a failure of its own is exit code 125 with one ``autarch-sandbox:``
line on stderr.

What the init sets up for every command is :func:`_prepare_namespace`, one step after another. What depends on
the command is :func:`_prepare_for`; a process that must serve the command while it runs (the forwarder) is
forked by the init on what the command's process hands it (:func:`_start_forwarder`), so the command does not
wait for that fork, and the kernel ends it with the namespace.
"""

from __future__ import annotations

import _signal  # the C module: ``signal`` would cost enum's start-up
import _socket  # likewise: ``socket`` would cost enum's and selectors' start-up
import ctypes
import marshal
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The sibling modules, imported without their package: there are no site-packages here.
import landlock
import sandbox_limits

TYPE_CHECKING = False  # ``typing`` would cost its import at every start
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

LAUNCH_FAILED = 125
_PR_SET_PDEATHSIG = 1
_SIGKILL = 9  # the same on every Linux architecture
_RESTORED_SIGNALS = (_signal.SIGPIPE, _signal.SIGXFSZ)
"""Ignored by every Python process at start; a command gets their default action back (a writer to a closed
pipe ends quietly, a writer past the file size limit is stopped)."""
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
# statvfs flag → the mount flag a bind remount must repeat (a user namespace may not clear locked flags).
_KEPT_FLAGS = {1: _MS_RDONLY, 2: _MS_NOSUID, 4: _MS_NODEV, 8: _MS_NOEXEC, 1024: _MS_NOATIME, 2048: _MS_NODIRATIME,
               4096: _MS_RELATIME}
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxFailure(Exception):
    """The sandbox could not be set up; the command never ran."""


def _call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SandboxFailure(f"{what}: {os.strerror(err)}")


def _die_with_parent(expected_parent: int) -> None:
    _libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != expected_parent:  # the parent died before the line above took effect
        os._exit(LAUNCH_FAILED)


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _enter_namespaces(private_network: bool) -> None:
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS | (_CLONE_NEWNET if private_network else 0)
    _call(_libc.unshare(flags), "unshare (user, PID, mount and network namespaces)")
    # The same ids inside as outside: files keep their owners, and nothing gains a privilege outside.
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(value: str | None) -> bytes | None:
        return value.encode() if value is not None else None

    _call(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _read_only(path: str) -> None:
    """Bind ``path`` (a directory or a file) over itself read-only, non-executable, without set-uid: no hook can
    be written or run, no ``.git`` file pointed elsewhere.

    Both mounts go through an ``O_PATH | O_NOFOLLOW`` descriptor (``/proc/self/fd/N``): a symlink swapped in
    for ``path`` makes the launch fail instead of redirecting the mount.
    """
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        kind = os.fstat(fd).st_mode & 0o170000
        if kind not in (0o040000, 0o100000):  # a directory or a regular file; a link (O_NOFOLLOW) is neither
            raise SandboxFailure(f"{path} is neither a directory nor a file; not mounting it read-only")
        handle = f"/proc/self/fd/{fd}"
        kept = 0
        vfs = os.statvfs(handle).f_flag
        for st_flag, ms_flag in _KEPT_FLAGS.items():
            if vfs & st_flag:
                kept |= ms_flag
        _mount(handle, handle, None, _MS_BIND | _MS_REC)
    finally:
        os.close(fd)
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)  # the new mount, not what lies beneath it
    try:
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOEXEC | _MS_NOSUID | _MS_NODEV | kept
        _mount(None, f"/proc/self/fd/{fd}", None, flags)
    finally:
        os.close(fd)


def _loopback_up() -> None:
    """``ip link set lo up`` in the new network namespace (plain ioctls: the socket module costs 5 ms to import)."""
    fd = _libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    if fd < 0:
        raise SandboxFailure(f"socket: {os.strerror(ctypes.get_errno())}")
    try:
        ifreq = ctypes.create_string_buffer(b"lo", 40)  # struct ifreq: 16-byte name, then the flags (a short)
        _call(_libc.ioctl(fd, _SIOCGIFFLAGS, ifreq), "ioctl(SIOCGIFFLAGS lo)")
        flags = ctypes.c_short.from_buffer(ifreq, 16)
        flags.value |= _IFF_UP
        _call(_libc.ioctl(fd, _SIOCSIFFLAGS, ifreq), "ioctl(SIOCSIFFLAGS lo)")
    finally:
        os.close(fd)


def _hide(directory: str, keep: list[str]) -> None:
    """An empty tmpfs over ``directory`` (its unix sockets with it), then ``keep`` (paths beneath it) bound back.

    Landlock governs opening files, not connecting to a unix socket by path, so a database's or a container
    engine's socket in ``/run`` or ``/tmp`` is hidden this way instead.
    """
    kept = [path for path in keep if path.startswith(directory.rstrip("/") + "/") and os.path.exists(path)]
    handles = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in kept}
    _mount("tmpfs", directory, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777,size=64m")
    for path, fd in sorted(handles.items()):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        os.close(fd)


def _bound_pids(spec: dict, held: set[str]) -> None:
    """Cap the PIDs of this (new) namespace where no cgroup counts the command's processes (Linux 6.14+: each
    PID namespace has its own ``pid_max``); elsewhere the write fails and the poll and ``RLIMIT_NPROC`` remain."""
    value = sandbox_limits.pid_max(spec.get("limits") or {}, held)
    if value:
        try:
            _write("/proc/sys/kernel/pid_max", str(value))
        except OSError:
            pass


def _prepare_namespace(private_network: bool) -> None:
    """What the init makes of its new namespaces before there is a command (the same for every command)."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done here reaches the host's mounts
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777,size=256m")
    if private_network:
        _loopback_up()


def _prepare_for(spec: dict, held: set[str], init: _socket.socket | None) -> None:
    """What depends on the command (in its own process, before it is confined): the paths brought back into
    the hidden directories, the read-only git directory or linked worktree's ``.git`` file, the namespace's PID
    cap, and a preflight command's listener for the registry forwarder, handed to the init (``init``: the channel
    to it)."""
    for directory in spec.get("hidden", []):
        if os.path.isdir(directory) and not os.path.islink(directory):
            _hide(directory, [path for path, _ in spec["rules"]])
    for path in spec.get("readonly_mounts", []):
        _read_only(path)  # the tools service checked each exists; one gone since fails the launch
    _bound_pids(spec, held)
    if spec.get("egress") and init is not None:
        # After the hiding (the proxy's directory is among the paths brought back), before the limits and
        # Landlock, which are the command's own.
        import egress_forward  # the sibling module; the launch server has it imported already

        egress_forward.hand_over(spec["egress"], init)


def _confine(spec: dict) -> None:
    abi = int(spec.get("landlock_abi") or 0)
    if abi < 1:
        return
    ports = spec.get("connect_ports")
    ruleset = landlock.Ruleset(abi, connect_ports=tuple(ports) if ports is not None else None)
    for path, rights in spec["rules"]:
        ruleset.allow(path, int(rights))
    ruleset.restrict_self()


def _fail(exc: Exception) -> None:
    """End this process with the launcher's own exit code and one line saying why (the command never ran)."""
    os.write(2, f"autarch-sandbox: {exc}\n".encode())
    os._exit(LAUNCH_FAILED)


def _exec_command(spec: dict, env: dict[str, str], held: set[str], init: _socket.socket | None = None) -> None:
    """In the process that becomes the command: its mounts and resource limits, confinement, then the command
    (whose ``execve`` closes ``init``, the channel to the namespace's init, which then knows it has nothing to
    start)."""
    try:
        if spec.get("namespaces"):
            _prepare_for(spec, held, init)
        limits = sandbox_limits.rlimits(spec.get("limits") or {}, held, own_user_namespace=bool(spec.get("namespaces")))
        sandbox_limits.set_rlimits(limits)
        os.chdir(spec["cwd"])
        _confine(spec)
        for signum in _RESTORED_SIGNALS:
            _signal.signal(signum, _signal.SIG_DFL)
        argv = spec["argv"]
        os.execve(argv[0], argv, env)
    except (OSError, ValueError, SandboxFailure) as exc:
        _fail(exc)


def _status_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


Command = tuple[dict, dict, set]
"""What a launcher runs: the spec, the environment, and the controllers whose cgroup holds a limit."""


def _start_forwarder(channel: _socket.socket) -> None:
    """In the init, until the command's process is executed (or gone): if it hands over a listener (a preflight
    command's, :func:`egress_forward.hand_over`), fork the forwarder on it, a child of the init.

    The command's process only listens and sends; the fork is the init's, so the command never waits for it.
    """
    try:
        data, ancillary, _, _ = channel.recvmsg(4096, _socket.CMSG_SPACE(4), _socket.MSG_CMSG_CLOEXEC)
    except OSError:
        return
    finally:
        channel.close()
    fds = [int.from_bytes(payload[:4], sys.byteorder) for level, kind, payload in ancillary
           if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS]
    if not data or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        return
    import egress_forward  # the sibling module; the launch server has it imported already

    egress_forward.fork_forwarder(fds[0], data.decode())


def _run_as_init(private_network: bool, command: Callable[[], Command]) -> None:
    """PID 1 of the namespace: prepare it, fork the command, start what it asks for, reap orphans, exit with the
    command."""
    _libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    try:
        _prepare_namespace(private_network)
        # Only a private network has a forwarder to the registry proxy (sandbox_network gives no proxy).
        channel = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET) if private_network else None
    except (OSError, SandboxFailure) as exc:
        _fail(exc)
    child = os.fork()
    if child == 0:
        if channel is not None:
            channel[0].close()
        try:
            spec, env, held = command()
        except (OSError, ValueError) as exc:
            _fail(exc)
        _exec_command(spec, env, held, channel[1] if channel is not None else None)
    if channel is not None:
        channel[1].close()
        _start_forwarder(channel[0])
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(LAUNCH_FAILED)
        if pid == child:
            # Exiting as PID 1 makes the kernel SIGKILL everything the command left in the namespace.
            os._exit(_status_code(status))


def run_launcher(*, namespaces: bool, private_network: bool, cgroup_procs: list[str],
                 command: Callable[[], Command]) -> None:
    """The launcher: join the command's cgroups, make its namespaces, and run it; exits, never returns.

    ``command`` gives what to run: at once, or — a spare launcher the launch server made ahead of time, whose
    cgroup, namespaces and init are ready before any command exists — when the server sends it (the init's
    child, which becomes the command, waits for it).
    """
    try:
        for path in cgroup_procs:
            _write(path, "0")
        if namespaces:
            _enter_namespaces(private_network)
        else:
            spec, env, held = command()
            _exec_command(spec, env, held)  # Landlock alone: the command replaces the launcher
    except (OSError, ValueError, SandboxFailure) as exc:
        _fail(exc)
    init = os.fork()
    if init == 0:
        _run_as_init(private_network, command)
    _, status = os.waitpid(init, 0)
    os._exit(_status_code(status))


def launch(spec: dict, env: dict[str, str], *, cgroup_procs: Iterable[str] = (),
           held: Iterable[str] = frozenset()) -> None:
    """Run the command of ``spec`` confined, and exit with its status; never returns.

    ``cgroup_procs``: the ``cgroup.procs`` files of the command's cgroups, ``held``: the controllers they hold
    (:mod:`.sandbox_limits`); without them the limits of the spec hold by their per-process fallbacks.
    """
    run_launcher(namespaces=bool(spec.get("namespaces")), private_network=bool(spec.get("private_network")),
                 cgroup_procs=list(cgroup_procs), command=lambda: (spec, env, set(held)))


def main() -> None:
    spec = marshal.loads(bytes.fromhex(sys.argv[1]))
    _die_with_parent(int(spec["parent"]))
    launch(spec, dict(os.environ))


if __name__ == "__main__":
    main()
