"""The sandbox's launch server: started once by the tools service, it forks a launcher for every command.

Starting a Python interpreter and importing ``ctypes`` for each command was most of the sandbox's cost (about
17 of its 25 ms); a fork of this small, already warm process costs a fraction of a millisecond. Standard
library only, run as ``python -I -S sandbox_zygote.py CONTROL_FD PARENT_PID``, in the tools service's session
(so its commands share the service's scheduling group, see ``shell.py``).

Protocol, over ``SOCK_SEQPACKET`` unix sockets (one message per packet, ``marshal``-ed plain data):

- on CONTROL, the server first says ``{"ready": True, "limits": {limit: what holds it}}``; the tools service
  then sends one request per command, ``{"spec": …, "env": …}`` (a launcher spec, see
  :mod:`.sandbox_launch`) or ``{"exec": argv, "env": …, "cwd": …}`` (a program that confines itself:
  bubblewrap), with three descriptors: the command's own socket, its stdout and its stderr.
- on the command's socket the tools service may send ``b"kill"`` (a timeout, a cancel); when it closes its
  end, the command is killed too. The server answers once, when every process of the command has ended:
  ``{"status": code, "limit": None or {"name", "value", "used", "stopped"}}`` (``code`` is 128 + N for signal N;
  125 with an ``autarch-sandbox:`` line on stderr when the sandbox could not be set up, or with ``"error"`` when
  the server could not even start it).

Joining a cgroup costs the joiner an RCU grace period (5-15 ms on a loaded machine), and each new process
waits for a CPU, so the server keeps one *spare* launcher ready: forked, in its cgroup, its namespaces made, its
init and the command's own process waiting; the next command of the same shape (namespaces, network, cgroups) is
sent to that process, which only does its mounts, limits and Landlock rules and executes the command. A new spare
is made once the server is idle, or a second after the last command started (off the path of the next one).
A preflight command's forwarder to the registry proxy (:mod:`.egress_forward`) is forked by the spare's init on
the listener that process hands it once the spec is there: a spare holds nothing of any command, so one made
after a preflight command serves a pulse's just as well (no shape of its own), and reaches no proxy.

Every command runs in cgroups of its own where this machine lets the service make them (reused between
commands), and the server polls each running command's use of its limits (:mod:`.sandbox_limits`) every
:data:`POLL_SECONDS`: a command over one is killed and its answer names the limit. The server dies with the
tools service (``PR_SET_PDEATHSIG``: SIGTERM, on which it kills its commands and removes its cgroups), and
each launcher with the server.
"""

from __future__ import annotations

import marshal
import os
import select
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The sibling modules, imported without their package: there are no site-packages here.
import egress_forward  # noqa: F401  (imported here once, not in each preflight command's launcher)
import sandbox_launch
import sandbox_limits

TYPE_CHECKING = False  # annotations only: the zygote does not import ``typing``
if TYPE_CHECKING:
    from typing import Any

POLL_SECONDS = 0.1
"""How often a running command's use of its polled limits (bytes written, CPU, fallbacks) is measured."""
SPARE_DELAY_SECONDS = 1.0
"""While commands run, a new spare is made only this long after the last one started: making one takes a few
milliseconds of CPU, which a short command would otherwise wait for on a busy machine."""
_MAX_MESSAGE = 1 << 20
_KILL_WAIT_SECONDS = 10.0
"""How long a killed command's processes may take to be gone (a process in uninterruptible sleep)."""


class Job:
    """One running command."""

    def __init__(self, pid: int, pidfd: int, channel: socket.socket, limits: dict[str, int],
                 cgroup: sandbox_limits.Cgroup | None, namespaces: bool) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.channel = channel
        self.limits = {name: int(limits.get(name) or 0) for name in sandbox_limits.LIMITS}
        self.cgroup = cgroup
        self.namespaces = namespaces
        self.start: dict[str, int] = {}
        """The cgroup's counters before the command (a pooled cgroup's count from its earlier commands)."""
        self.init: int | None = None
        self.hit: dict | None = None
        self.killed_at: float | None = None
        self.init_pidfd: int | None = None
        self.status: int | None = None
        self.rusage: object = None
        self.next_check = time.monotonic() + POLL_SECONDS
        """When to measure it next (not at once: a short command ends before it used anything worth a look)."""

    @property
    def polled(self) -> bool:
        """Whether any of its limits needs a look while it runs (a cgroup's too: its counters say when the kernel
        killed a process for memory or refused a fork; only the file size limit stops a writer by itself)."""
        return any(self.limits[name] for name in ("memory", "processes", "write", "cpu"))


class Spare:
    """A launcher made ahead of its command: it waits for one on :attr:`sock`."""

    def __init__(self, pid: int, pidfd: int, sock: socket.socket, shape: tuple[bool, bool, bool],
                 cgroup: sandbox_limits.Cgroup | None) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.sock = sock
        self.shape = shape
        self.cgroup = cgroup


def _shape(request: dict) -> tuple[bool, bool, bool] | None:
    """What a spare must have prepared to run ``request``: namespaces, a private network, cgroups."""
    spec = request.get("spec")
    if spec is None:
        return None
    return bool(spec.get("namespaces")), bool(spec.get("private_network")), bool(spec.get("cgroups", True))


class Server:
    """The launch server's loop: requests on the control socket, kills on command sockets, exits by pidfd."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.control.setblocking(False)
        self.epoll = select.epoll()
        self.epoll.register(control.fileno(), select.EPOLLIN)
        self.by_fd: dict[int, tuple[str, Job]] = {}
        self.running: list[Job] = []
        self.spare: Spare | None = None
        self.spare_shape: tuple[bool, bool, bool] | None = None
        """The shape of the last command, which the next spare is made for."""
        self.spare_limits: dict[str, int] = {}
        """The limits of the last command: a spare's cgroup gets them ahead (usually unchanged: no write then)."""
        self.broken_shapes: set[tuple[bool, bool, bool]] = set()
        """Shapes whose spare ended by itself: their commands start afresh (and say why, should they fail too)."""
        self.last_start = 0.0
        self.abandoned: list[sandbox_limits.Cgroup] = []
        self.layout = sandbox_limits.cgroup_layout()
        # Any: a cgroup is only ever taken from (and given back to) a pool that exists.
        self.pool: Any = sandbox_limits.CgroupPool(self.layout) if self.layout else None
        if self.pool:
            self.pool.sweep()

    # -- the loop ----------------------------------------------------------------------------------------

    def serve(self) -> None:
        hello = {"ready": True, "limits": sandbox_limits.mechanisms(self.layout), "pid": os.getpid()}
        self.control.setblocking(True)
        self.control.send(marshal.dumps(hello))
        self.control.setblocking(False)
        while True:
            due = [job.next_check for job in self.running
                   if job.killed_at is not None or job.status is not None or job.polled]
            timeout = max(0.0, min(due) - time.monotonic()) if due else -1
            for fd, _ in self.epoll.poll(timeout):
                if fd == self.control.fileno():
                    if not self.receive():
                        return
                    continue
                if self.spare is not None and fd == self.spare.pidfd:
                    self.drop_spare()
                    continue
                entry = self.by_fd.get(fd)
                if entry is None:
                    continue
                kind, job = entry
                if kind == "channel":
                    self.heard(job)
                elif kind == "pid":
                    self.exited(job)
                elif kind == "init":
                    self.unregister(job.init_pidfd)
                    os.close(job.init_pidfd)  # type: ignore[arg-type]  # registered as "init" only while set
                    job.init_pidfd = None
                    self.maybe_finish(job)
            now = time.monotonic()
            for job in list(self.running):
                if now < job.next_check:
                    continue
                job.next_check = now + POLL_SECONDS
                if job.status is None and job.killed_at is None and job.polled:
                    self.check(job, final=False)
                elif job.status is not None:
                    self.maybe_finish(job)
            if self.spare is None and self.spare_shape is not None and self.spare_shape not in self.broken_shapes \
                    and (not self.running or time.monotonic() - self.last_start > SPARE_DELAY_SECONDS):
                self.make_spare(self.spare_shape)

    def register(self, fd: int, kind: str, job: Job) -> None:
        self.epoll.register(fd, select.EPOLLIN)
        self.by_fd[fd] = (kind, job)

    def unregister(self, fd: int | None) -> None:
        if fd is not None and fd in self.by_fd:
            self.epoll.unregister(fd)
            del self.by_fd[fd]

    # -- requests ----------------------------------------------------------------------------------------

    def receive(self) -> bool:
        """Start every request waiting; False when the tools service closed the control socket."""
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.control, _MAX_MESSAGE, 3)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                for fd in fds:
                    os.close(fd)
                return False
            if len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                continue
            channel = socket.socket(fileno=fds[0])
            try:
                self.start(marshal.loads(data), channel, fds[1], fds[2])
            except Exception as exc:
                self.answer(channel, {"status": sandbox_launch.LAUNCH_FAILED, "limit": None,
                                      "error": f"{type(exc).__name__}: {exc}"})
                channel.close()
            finally:
                for fd in fds[1:]:
                    try:
                        os.close(fd)
                    except OSError:
                        pass

    def start(self, request: dict, channel: socket.socket, stdout: int, stderr: int) -> None:
        spec = request.get("spec")
        limits = (spec or request).get("limits") or {}
        shape = _shape(request)
        self.last_start = time.monotonic()
        if shape is not None:
            self.spare_shape = shape
            self.spare_limits = dict(limits)
            if self.hand_to_spare(request, shape, channel, stdout, stderr):
                return
        cgroup = None
        if self.pool and (spec or request).get("cgroups", True):
            try:
                cgroup = self.pool.take(limits)
            except OSError:
                pass  # the limits hold by their per-process fallbacks for this command
        try:
            counters = cgroup.counters() if cgroup else {}
            me = os.getpid()
            pid = os.fork()
            if pid == 0:
                self.child(request, me, stdout, stderr, cgroup)
        except BaseException:
            if cgroup:
                self.pool.give_back(cgroup)
            raise
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            if cgroup:
                self.pool.give_back(cgroup)
            raise
        job = Job(pid, pidfd, channel, limits, cgroup, bool(spec and spec.get("namespaces")))
        job.start = counters
        channel.setblocking(False)
        self.running.append(job)
        self.register(pidfd, "pid", job)
        self.register(channel.fileno(), "channel", job)

    def hand_to_spare(self, request: dict, shape: tuple[bool, bool, bool], channel: socket.socket, stdout: int,
                      stderr: int) -> bool:
        """Give the command to the spare launcher, if one of its shape is ready; False: start one afresh."""
        spare, self.spare = self.spare, None
        if spare is None:
            return False
        if spare.shape != shape:
            self.kill_spare(spare)
            return False
        limits = request["spec"].get("limits") or {}
        try:
            if spare.cgroup:
                spare.cgroup.apply(limits)
            counters = spare.cgroup.counters() if spare.cgroup else {}
            held = sorted(spare.cgroup.controllers) if spare.cgroup else []
            message = {"spec": request["spec"], "env": request["env"], "held": held}
            spare.sock.setblocking(True)
            socket.send_fds(spare.sock, [marshal.dumps(message)], [stdout, stderr])
        except OSError:
            self.kill_spare(spare)
            return False
        spare.sock.close()
        self.unregister_spare(spare)
        job = Job(spare.pid, spare.pidfd, channel, limits, spare.cgroup, shape[0])
        job.start = counters
        channel.setblocking(False)
        self.running.append(job)
        self.register(spare.pidfd, "pid", job)
        self.register(channel.fileno(), "channel", job)
        return True

    def make_spare(self, shape: tuple[bool, bool, bool]) -> None:
        """Fork a launcher that joins its cgroup and makes its namespaces now, and waits for its command."""
        cgroup = None
        try:
            cgroup = self.pool.take(self.spare_limits) if self.pool and shape[2] else None
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            if cgroup:
                self.pool.give_back(cgroup)
            self.broken_shapes.add(shape)  # do not try again for every command
            return
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            self.spare_child(me, theirs, shape, cgroup)
        theirs.close()
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            mine.close()
            if cgroup:
                self.pool.give_back(cgroup)
            return
        self.spare = Spare(pid, pidfd, mine, shape, cgroup)
        self.epoll.register(pidfd, select.EPOLLIN)

    @staticmethod
    def spare_child(server: int, sock: socket.socket, shape: tuple[bool, bool, bool],
                    cgroup: sandbox_limits.Cgroup | None) -> None:
        """In the forked spare: the launcher of a command that is not there yet; its init receives it."""
        try:
            # Nothing to say before there is a command: its output arrives with it.
            Server.become_launcher(server, -1, -1, keep=sock.fileno())

            def command() -> sandbox_launch.Command:
                data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 2)
                if not data or len(fds) != 2:
                    os._exit(0)  # the server gave this spare up
                os.dup2(fds[0], 1)
                os.dup2(fds[1], 2)
                for fd in fds:
                    os.close(fd)
                sock.close()
                message = marshal.loads(data)
                return message["spec"], message["env"], set(message["held"])

            namespaces, private_network, _ = shape
            sandbox_launch.run_launcher(namespaces=namespaces, private_network=private_network,
                                        cgroup_procs=cgroup.procs_files if cgroup else [], command=command)
        finally:
            os._exit(sandbox_launch.LAUNCH_FAILED)

    @staticmethod
    def become_launcher(server: int, stdout: int, stderr: int, *, keep: int | None = None) -> None:
        """In a forked child: a process group of its own, dead with the server, ``/dev/null`` in, ``stdout`` and
        ``stderr`` out, nothing else of the server's open (its sockets, other commands' descriptors)."""
        os.setpgid(0, 0)
        sandbox_launch._die_with_parent(server)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # ignored by the server; an ignored signal survives execve
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null if stdout < 0 else stdout, 1)
        os.dup2(null if stderr < 0 else stderr, 2)
        if keep is None:
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        else:
            os.closerange(3, keep)
            os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))

    def unregister_spare(self, spare: Spare) -> None:
        try:
            self.epoll.unregister(spare.pidfd)
        except (OSError, ValueError):
            pass

    def kill_spare(self, spare: Spare) -> None:
        """End a spare that will not be used (its init dies with it), and take its cgroup back."""
        self.unregister_spare(spare)
        spare.sock.close()
        for kill in (lambda: os.killpg(spare.pid, signal.SIGKILL), lambda: os.kill(spare.pid, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.waitpid(spare.pid, 0)
        except ChildProcessError:
            pass
        os.close(spare.pidfd)
        if spare.cgroup:
            deadline = time.monotonic() + 2.0
            while not spare.cgroup.empty() and time.monotonic() < deadline:
                spare.cgroup.kill()
                time.sleep(0.005)
            self.pool.give_back(spare.cgroup)

    def drop_spare(self) -> None:
        """The spare ended by itself (it could not make its namespaces, say): its shape's commands start afresh."""
        spare, self.spare = self.spare, None
        if spare is not None:
            self.kill_spare(spare)
            self.broken_shapes.add(spare.shape)

    @staticmethod
    def child(request: dict, server: int, stdout: int, stderr: int, cgroup: sandbox_limits.Cgroup | None) -> None:
        """In the forked launcher: become the command's launcher, or exec the self-confining program."""
        try:
            Server.become_launcher(server, stdout, stderr)
            held = cgroup.controllers if cgroup else set()
            procs = cgroup.procs_files if cgroup else []
            if "spec" in request:
                sandbox_launch.launch(request["spec"], request["env"], cgroup_procs=procs, held=held)
            for path in procs:
                sandbox_launch._write(path, "0")
            limits = request.get("limits") or {}
            sandbox_limits.set_rlimits(sandbox_limits.rlimits(limits, held, own_user_namespace=False))
            for signum in sandbox_launch._RESTORED_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            os.chdir(request["cwd"])
            os.execve(request["exec"][0], request["exec"], request["env"])
        except BaseException as exc:  # whatever happens, this child must not return to the server's loop
            try:
                os.write(2, f"autarch-sandbox: {exc}\n".encode())
            finally:
                os._exit(sandbox_launch.LAUNCH_FAILED)

    # -- a running command ---------------------------------------------------------------------------------

    def heard(self, job: Job) -> None:
        """The tools service asked to kill the command, or closed its end (it stopped waiting)."""
        try:
            data = job.channel.recv(64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.unregister(job.channel.fileno())
        self.kill(job)

    def kill(self, job: Job) -> None:
        if job.killed_at is not None or job.status is not None:
            return
        job.killed_at = time.monotonic()
        init = self.init_of(job)
        if init is not None and job.init_pidfd is None:
            job.init_pidfd = self.pidfd_of_child(init, parent=job.pid)
            if job.init_pidfd is not None:
                self.register(job.init_pidfd, "init", job)
        try:
            os.killpg(job.pid, signal.SIGKILL)  # the launcher (our child, not reaped: its number is its own)
        except (ProcessLookupError, PermissionError):
            pass
        if job.init_pidfd is not None:
            try:
                signal.pidfd_send_signal(job.init_pidfd, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass
        if job.cgroup:
            try:
                job.cgroup.kill()
            except OSError:
                pass

    @staticmethod
    def pidfd_of_child(pid: int, *, parent: int) -> int | None:
        """A pidfd of ``pid`` if it is (still) ``parent``'s child: never of a process that took over its number."""
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return None
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
            if int(stat[stat.rfind(b")") + 2:].split()[1]) == parent:
                return pidfd  # checked after the pidfd was taken: the pidfd is of that very process
        except (OSError, ValueError, IndexError):
            pass
        os.close(pidfd)
        return None

    @staticmethod
    def init_of(job: Job) -> int | None:
        """The namespace's init, seen from here (the launcher's only child), once it exists."""
        if job.init is None and job.namespaces:
            try:
                with open(f"/proc/{job.pid}/task/{job.pid}/children") as handle:
                    children = handle.read().split()
            except OSError:
                children = []
            job.init = int(children[0]) if children else None
        return job.init

    def exited(self, job: Job) -> None:
        if not job.namespaces and job.killed_at is None:
            # Landlock alone: no namespace ends what the command left running; its process group (and cgroup)
            # does, killed while the launcher is still a zombie, so the group's number cannot be anyone else's.
            try:
                os.killpg(job.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _, status, rusage = os.wait4(job.pid, 0)
        self.unregister(job.pidfd)
        os.close(job.pidfd)
        job.status = sandbox_launch._status_code(status)
        job.rusage = rusage
        if job.hit is None:
            self.check(job, final=True)
        self.maybe_finish(job)

    def maybe_finish(self, job: Job) -> None:
        """Answer once the launcher is reaped and every process of the command is gone (or given up on)."""
        if job.status is None or (job.init_pidfd is not None and not self.waited_too_long(job)):
            return
        if job.cgroup and not job.cgroup.empty() and not self.waited_too_long(job):
            job.cgroup.kill()
            if job.killed_at is None:
                job.killed_at = time.monotonic()
            return
        if job.init_pidfd is not None:
            self.unregister(job.init_pidfd)
            os.close(job.init_pidfd)
            job.init_pidfd = None
        if job.cgroup:
            if job.cgroup.empty():
                self.pool.give_back(job.cgroup)
            else:  # a process that would not die (uninterruptible sleep): out of the pool, removed at the end
                self.abandoned.append(job.cgroup)
            job.cgroup = None
        self.unregister(job.channel.fileno())
        self.answer(job.channel, {"status": job.status, "limit": job.hit})
        job.channel.close()
        self.running.remove(job)

    @staticmethod
    def waited_too_long(job: Job) -> bool:
        return job.killed_at is not None and time.monotonic() - job.killed_at > _KILL_WAIT_SECONDS

    @staticmethod
    def answer(channel: socket.socket, message: dict) -> None:
        try:
            channel.setblocking(True)
            channel.send(marshal.dumps(message))
        except OSError:
            pass  # the tools service stopped listening

    # -- limits ------------------------------------------------------------------------------------------

    def check(self, job: Job, *, final: bool) -> None:
        """Measure the command's use of its limits; kill it at the first one it is over."""
        hit = self.over(job, final=final)
        if hit is not None and not final:
            again = self.over(job, final=False)  # a process reaped between two reads can count twice, once
            hit = again if again is not None and again[0] == hit[0] else None
        if hit is None:
            return
        name, used = hit
        job.hit = {"name": name, "value": job.limits[name], "used": used, "stopped": not final}
        if not final:
            self.kill(job)

    def over(self, job: Job, *, final: bool) -> tuple[str, int | float] | None:
        limits = job.limits
        held = job.cgroup.controllers if job.cgroup else set()
        counters: dict[str, int] = {}
        if job.cgroup:
            try:
                counters = job.cgroup.counters()
            except OSError:
                counters = {}
        if "memory" in held and limits["memory"] and counters.get("oom_kills", 0) > job.start.get("oom_kills", 0):
            return "memory", limits["memory"]
        if "pids" in held and limits["processes"] and \
                counters.get("forks_refused", 0) > job.start.get("forks_refused", 0):
            return "processes", limits["processes"]
        if final:
            return self.over_at_exit(job, counters)
        try:
            pids = job.cgroup.pids() if job.cgroup else sandbox_limits.tree_pids(job.pid)
        except OSError:
            return None
        init = self.init_of(job)
        own = (job.pid, init) if init else (job.pid,)
        usage = sandbox_limits.tree_usage(pids, own=own, detail=not {"memory", "pids", "cpu"} <= held)
        if limits["write"] and usage.written > limits["write"]:
            return "write", usage.written
        cpu = (counters["cpu_ns"] - job.start.get("cpu_ns", 0)) / 1e9 if "cpu" in held and "cpu_ns" in counters \
            else usage.cpu
        if limits["cpu"] and cpu > limits["cpu"]:
            return "cpu", round(cpu, 2)
        if "memory" not in held and limits["memory"] and usage.memory > limits["memory"]:
            return "memory", usage.memory
        if "pids" not in held and limits["processes"] and usage.tasks >= limits["processes"]:
            return "processes", usage.tasks
        return None

    @staticmethod
    def over_at_exit(job: Job, counters: dict[str, int]) -> tuple[str, int | float] | None:
        """After the launcher was reaped: its ``wait4`` totals hold the whole tree's writes and CPU time."""
        limits = job.limits
        rusage = job.rusage
        if limits["file_size"] and job.status in (128 + signal.SIGXFSZ,):
            return "file_size", limits["file_size"]
        written = int(getattr(rusage, "ru_oublock", 0)) * 512
        if limits["write"] and written > limits["write"]:
            return "write", written
        if "cpu_ns" in counters:
            cpu = (counters["cpu_ns"] - job.start.get("cpu_ns", 0)) / 1e9
        else:
            cpu = float(getattr(rusage, "ru_utime", 0.0)) + float(getattr(rusage, "ru_stime", 0.0))
        if limits["cpu"] and cpu >= limits["cpu"]:
            return "cpu", round(cpu, 2)
        return None

    # -- the end -----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every command, wait (briefly) until they are gone, and remove the cgroups."""
        jobs = list(self.running)
        for job in jobs:
            self.kill(job)
        deadline = time.monotonic() + 5.0
        for job in jobs:
            if job.status is None:
                try:
                    os.waitpid(job.pid, 0)
                except ChildProcessError:
                    pass
            while job.cgroup and not job.cgroup.empty() and time.monotonic() < deadline:
                job.cgroup.kill()
                time.sleep(0.01)
            if job.cgroup:
                job.cgroup.remove()
        if self.spare is not None:
            self.kill_spare(self.spare)
            self.spare = None
        for cgroup in self.abandoned:
            cgroup.kill()
            cgroup.remove()
        if self.pool:
            self.pool.close()


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    # The tools service's death (its thread that started us) stops this server, which then kills its commands.
    sandbox_launch._libc.prctl(sandbox_launch._PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != int(sys.argv[2]):
        sys.exit(0)
    signal.signal(signal.SIGTERM, _stop)
    # A ^C at the terminal reaches the whole foreground process group, this server too: the tools service decides
    # when it stops (it closes the control socket), and its death would stop this server anyway.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = Server(control)
    try:
        server.serve()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server.close()


if __name__ == "__main__":
    main()
