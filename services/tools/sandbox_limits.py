"""Resource limits of one sandboxed command: what holds each limit, and how much of it a command has used.

Standard library only: the launch server (:mod:`.sandbox_zygote`) and the launcher (:mod:`.sandbox_launch`)
import it from a Python started with ``-I -S``, so nothing here may import the rest of Autarch.

A command's limits arrive as plain numbers (0: none) under these names:

- ``memory`` (bytes): a cgroup memory controller of the command's own (v1 ``memory.limit_in_bytes`` with swap,
  or v2 ``memory.max``), whose OOM kills its counters record. Without one: the anonymous resident memory of
  all its processes, summed at every poll, and ``RLIMIT_DATA`` per process at 1.5 times the limit (an
  allocation past it fails inside the command).
- ``processes`` (processes and threads): a cgroup pids controller (``pids.max``; ``pids.events`` counts each
  refused fork). Without one: ``RLIMIT_NPROC``, which inside the command's own user namespace counts only that
  namespace's processes (never enforced for root), the PID namespace's ``pid_max`` (Linux 6.14+; at least
  301), and a count at every poll.
- ``file_size`` (bytes): ``RLIMIT_FSIZE``; the kernel kills a process writing past it with SIGXFSZ.
- ``write`` (bytes): the kernel's I/O accounting (``write_bytes`` of ``/proc/<pid>/io``: bytes a process made
  dirty in disk-backed files, its reaped children's included) summed over the command's processes at every
  poll, and the whole tree's exact total from ``wait4`` at the end. Pipes, sockets, tmpfs and devices are not
  counted; neither is space reserved without writing (``fallocate``, which the file size limit bounds per file).
- ``cpu`` (seconds of CPU time, all processes together): a cgroup's CPU accounting (v1 ``cpuacct.usage``, v2
  ``cpu.stat``), without one the processes' own times; ``RLIMIT_CPU`` per process as a backstop.

cgroups are made beneath the tools service's own cgroup in each hierarchy, so the command's stay inside
whatever bounds the service itself (a systemd unit's ``MemoryMax``, a container's limit).
"""

from __future__ import annotations

import os
import resource

__all__ = [
    "LIMITS",
    "Cgroup",
    "CgroupLayout",
    "CgroupPool",
    "TreeUsage",
    "cgroup_layout",
    "mechanisms",
    "rlimits",
    "tree_pids",
    "tree_usage",
]

LIMITS = ("memory", "processes", "file_size", "write", "cpu")
SANDBOX_TASKS = 2
"""Tasks of the sandbox's own in the command's pids cgroup (the launcher and the namespace's init)."""
MIN_PID_MAX = 301
"""The smallest ``pid_max`` the kernel accepts (it keeps PIDs below 300 for itself once they wrapped)."""
RLIMIT_CPU_MARGIN = 2
DATA_LIMIT_FACTOR = 1.5
"""Without a memory cgroup, ``RLIMIT_DATA`` per process is this times the memory limit."""
_PREFIX = "autarch-sandbox-"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_V1_CONTROLLERS = ("memory", "pids", "cpuacct")


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _field(text: str, name: str) -> int:
    """The number after ``name`` in a ``key value`` per line file (``memory.events``, ``pids.events``)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    return 0


# -- where our cgroups live -------------------------------------------------------------------------------


class CgroupLayout:
    """The tools service's own cgroup directory for each controller it can use (v1), or the one v2 directory."""

    def __init__(self, dirs: dict[str, str], v2: bool) -> None:
        self.dirs = dirs
        """``memory``, ``pids``, ``cpu`` → the directory beneath which a command's cgroup is made."""
        self.v2 = v2

    def __repr__(self) -> str:
        return f"CgroupLayout({self.dirs!r}, v2={self.v2})"


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _own_dirs() -> tuple[dict[str, str], str | None]:
    """This process's cgroup directory per v1 controller, and its v2 directory (None: no v2 mounted)."""
    v1_paths: dict[str, str] = {}
    v2_path = None
    for line in _read("/proc/self/cgroup").splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and not controllers:
            v2_path = path
        for controller in controllers.split(","):
            if controller:
                v1_paths[controller] = path
    v1_dirs: dict[str, str] = {}
    v2_dir = None
    for line in _read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point, fstype, options = _unescape(fields[3]), _unescape(fields[4]), tail[0], tail[2]
        if fstype == "cgroup":
            for controller in options.split(","):
                v1_path = v1_paths.get(controller)
                if v1_path is not None and controller not in v1_dirs and _beneath(v1_path, root):
                    v1_dirs[controller] = mount_point + v1_path[len(root.rstrip("/")):]
        elif fstype == "cgroup2" and v2_path is not None and v2_dir is None and _beneath(v2_path, root):
            v2_dir = mount_point + v2_path[len(root.rstrip("/")):]
    return v1_dirs, v2_dir


def _beneath(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def _usable(directory: str, v2: bool, controller: str) -> bool:
    """Whether a child cgroup can be made here and its limit set (tried on a probe cgroup, then removed)."""
    probe = os.path.join(directory, f"{_PREFIX}probe-{os.getpid()}")
    limit_file = {"memory": "memory.max" if v2 else "memory.limit_in_bytes", "pids": "pids.max",
                  "cpu": "cpu.stat" if v2 else "cpuacct.usage"}[controller]
    try:
        os.mkdir(probe)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        if controller in ("memory", "pids"):
            _write(os.path.join(probe, limit_file), "max" if v2 or controller == "pids" else "-1")
        else:
            _read(os.path.join(probe, limit_file))
        _read(os.path.join(probe, "cgroup.procs"))
        return True
    except OSError:
        return False
    finally:
        try:
            os.rmdir(probe)
        except OSError:
            pass


def cgroup_layout() -> CgroupLayout | None:
    """The controllers this process may give commands cgroups of their own in; None when there are none.

    cgroup v1: each of ``memory``, ``pids`` and ``cpuacct`` whose hierarchy lets us make a child of our own
    cgroup (root, or a delegated tree). cgroup v2: only where our own cgroup already enables ``memory`` and
    ``pids`` for its children; a v2 cgroup holding processes cannot enable them (the "no internal processes"
    rule), and moving the tools service into a leaf of its own is not done here, so on a typical v2 machine
    the limits are held by the fallbacks.
    """
    try:
        v1_dirs, v2_dir = _own_dirs()
    except (OSError, ValueError):
        return None
    dirs = {}
    for controller in _V1_CONTROLLERS:
        directory = v1_dirs.get(controller)
        name = "cpu" if controller == "cpuacct" else controller
        if directory and os.access(directory, os.W_OK) and _usable(directory, False, name):
            dirs[name] = directory
    if dirs:
        return CgroupLayout(dirs, v2=False)
    if v2_dir and os.access(v2_dir, os.W_OK):
        try:
            enabled = set(_read(os.path.join(v2_dir, "cgroup.subtree_control")).split())
        except OSError:
            enabled = set()
        if {"memory", "pids"} <= enabled and all(_usable(v2_dir, True, c) for c in ("memory", "pids", "cpu")):
            return CgroupLayout({"memory": v2_dir, "pids": v2_dir, "cpu": v2_dir}, v2=True)
    return None


def kernel_at_least(major: int, minor: int) -> bool:
    release = os.uname().release.split(".")
    try:
        return (int(release[0]), int("".join(c for c in release[1] if c.isdigit()) or 0)) >= (major, minor)
    except (IndexError, ValueError):
        return False


def _nproc_counts_the_namespace() -> bool:
    """Since Linux 5.14 ``RLIMIT_NPROC`` counts a user's processes per user namespace; before, across the
    whole system (every process of the service's user would count against a command's limit). Never for root."""
    return os.getuid() != 0 and kernel_at_least(5, 14)


def mechanisms(layout: CgroupLayout | None) -> dict[str, str]:
    """What holds each limit on this machine, in words (logged at start, reported with the launch server)."""
    dirs = layout.dirs if layout else {}
    kind = "cgroup v2" if layout and layout.v2 else "cgroup v1"
    nproc = ("RLIMIT_NPROC in the command's own user namespace" if _nproc_counts_the_namespace()
             else "no RLIMIT_NPROC (not enforced for root, system-wide before Linux 5.14)")
    pid_max = ("the PID namespace's pid_max" if kernel_at_least(6, 14)
               else "no per-namespace pid_max (Linux < 6.14)")
    return {
        "memory": f"{kind} memory controller" if "memory" in dirs
        else "RLIMIT_DATA per process and the processes' resident memory, polled",
        "processes": f"{kind} pids controller" if "pids" in dirs else f"{nproc}, {pid_max} and a count, polled",
        "file_size": "RLIMIT_FSIZE",
        "write": "the kernel's I/O accounting (write_bytes), polled",
        "cpu": (f"{kind} CPU accounting, polled" if "cpu" in dirs else "the processes' CPU times, polled")
        + ", and RLIMIT_CPU per process",
    }


# -- one command's cgroups -------------------------------------------------------------------------------


class Cgroup:
    """The cgroups of one command (one per controller; v1 controllers may share a directory)."""

    def __init__(self, layout: CgroupLayout, name: str) -> None:
        self.v2 = layout.v2
        self.dirs = {controller: os.path.join(parent, name) for controller, parent in layout.dirs.items()}
        self._applied: dict[str, int] = {}
        try:
            for directory in sorted(set(self.dirs.values())):
                os.mkdir(directory)
        except OSError:
            self.remove()
            raise

    @property
    def controllers(self) -> set[str]:
        return set(self.dirs)

    @property
    def procs_files(self) -> list[str]:
        """Where a process writes ``0`` to join every one of these cgroups."""
        return [os.path.join(d, "cgroup.procs") for d in sorted(set(self.dirs.values()))]

    def apply(self, limits: dict[str, int]) -> None:
        """Set the memory and process limits (only those that changed since this cgroup's last command)."""
        memory = int(limits.get("memory") or 0)
        if "memory" in self.dirs and self._applied.get("memory") != memory:
            directory = self.dirs["memory"]
            if self.v2:
                _write(os.path.join(directory, "memory.max"), str(memory) if memory else "max")
                swap = os.path.join(directory, "memory.swap.max")
                if os.path.exists(swap):
                    _write(swap, "0" if memory else "max")
            else:
                swap = os.path.join(directory, "memory.memsw.limit_in_bytes")
                has_swap = os.path.exists(swap)
                if has_swap:  # memory + swap may never be below memory alone: lift it first
                    _write(swap, "-1")
                _write(os.path.join(directory, "memory.limit_in_bytes"), str(memory) if memory else "-1")
                if has_swap and memory:
                    _write(swap, str(memory))
            self._applied["memory"] = memory
        processes = int(limits.get("processes") or 0)
        if "pids" in self.dirs and self._applied.get("processes") != processes:
            _write(os.path.join(self.dirs["pids"], "pids.max"),
                   str(processes + SANDBOX_TASKS) if processes else "max")
            self._applied["processes"] = processes

    def counters(self) -> dict[str, int]:
        """Running totals: OOM kills, forks refused at the process limit, CPU time in nanoseconds."""
        found: dict[str, int] = {}
        if "memory" in self.dirs:
            name = "memory.events" if self.v2 else "memory.oom_control"
            found["oom_kills"] = _field(_read(os.path.join(self.dirs["memory"], name)), "oom_kill")
        if "pids" in self.dirs:
            found["forks_refused"] = _field(_read(os.path.join(self.dirs["pids"], "pids.events")), "max")
        if "cpu" in self.dirs:
            if self.v2:
                found["cpu_ns"] = _field(_read(os.path.join(self.dirs["cpu"], "cpu.stat")), "usage_usec") * 1000
            else:
                found["cpu_ns"] = int(_read(os.path.join(self.dirs["cpu"], "cpuacct.usage")))
        return found

    def pids(self) -> list[int]:
        """Every process in the command's cgroup now."""
        return [int(pid) for pid in _read(self.procs_files[0]).split()]

    def kill(self) -> None:
        """SIGKILL every process in it (v2 in one write where the kernel has ``cgroup.kill``)."""
        if self.v2:
            kill_file = os.path.join(self.procs_files[0][: -len("cgroup.procs")], "cgroup.kill")
            if os.path.exists(kill_file):
                _write(kill_file, "1")
                return
        for pid in self.pids():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def empty(self) -> bool:
        try:
            return not any(_read(path).strip() for path in self.procs_files)
        except OSError:
            return False

    def remove(self) -> bool:
        done = True
        for directory in set(self.dirs.values()):
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


class CgroupPool:
    """Cgroups kept between commands: making and removing one per command would cost a memory cgroup each time,
    and v1 keeps a removed memory cgroup alive for as long as pages are charged to it."""

    KEEP = 16

    def __init__(self, layout: CgroupLayout) -> None:
        self.layout = layout
        self._idle: list[Cgroup] = []
        self._made = 0
        self._prefix = f"{_PREFIX}{os.getpid()}-"

    def take(self, limits: dict[str, int]) -> Cgroup:
        while self._idle:
            cgroup = self._idle.pop()
            try:
                cgroup.apply(limits)
                return cgroup
            except OSError:  # e.g. a lower memory limit its leftover page cache could not be shrunk under
                cgroup.remove()
        cgroup = Cgroup(self.layout, f"{self._prefix}{self._made}")
        self._made += 1
        try:
            cgroup.apply(limits)
        except OSError:
            cgroup.remove()
            raise
        return cgroup

    def give_back(self, cgroup: Cgroup) -> None:
        if cgroup.empty() and len(self._idle) < self.KEEP:
            self._idle.append(cgroup)
        else:
            cgroup.remove()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().remove()

    def sweep(self) -> None:
        """Remove the empty cgroups a launch server that died without cleaning up left behind."""
        for parent in set(self.layout.dirs.values()):
            try:
                names = os.listdir(parent)
            except OSError:
                continue
            for name in names:
                if not name.startswith(_PREFIX):
                    continue
                owner = name[len(_PREFIX):].split("-", 1)[0]
                if owner.isdigit() and int(owner) != os.getpid() and not os.path.exists(f"/proc/{owner}"):
                    try:
                        os.rmdir(os.path.join(parent, name))
                    except OSError:
                        pass


# -- limits the launcher sets on itself --------------------------------------------------------------------


def rlimits(limits: dict[str, int], held: set[str], *, own_user_namespace: bool) -> dict[int, int]:
    """The resource limits (``RLIMIT_*`` → value) a launcher sets before it starts the command.

    ``held``: the controllers whose cgroup holds a limit, which then needs no per-process stand-in;
    ``own_user_namespace``: the command gets a user namespace of its own (where ``RLIMIT_NPROC`` counts).
    """
    out = {resource.RLIMIT_CORE: 0}  # a crash must not drop a core file of any size into the worktree
    if limits.get("file_size"):
        out[resource.RLIMIT_FSIZE] = int(limits["file_size"])
    if limits.get("cpu"):
        # A backstop, should the server's poll be late: SIGKILL for a process over the total by itself. Two seconds
        # above it, as the kernel's timer may fire a tenth early, and the poll, which says why, comes first.
        out[resource.RLIMIT_CPU] = int(limits["cpu"]) + RLIMIT_CPU_MARGIN
    if limits.get("memory") and "memory" not in held:
        # Above the limit, so the poll sees a process grow past it and says why it stopped it; still a hard bound
        # for one that allocates faster than the poll looks (an allocation past it fails inside the command).
        out[resource.RLIMIT_DATA] = int(limits["memory"] * DATA_LIMIT_FACTOR)
    if limits.get("processes") and "pids" not in held and own_user_namespace and _nproc_counts_the_namespace():
        out[resource.RLIMIT_NPROC] = int(limits["processes"]) + SANDBOX_TASKS
    return out


def set_rlimits(values: dict[int, int]) -> None:
    """Lower each limit to ``value`` (the soft one only for core dumps, so a command may still ask for them)."""
    for which, value in values.items():
        _, hard = resource.getrlimit(which)
        if which == resource.RLIMIT_CORE:
            resource.setrlimit(which, (0, hard))
            continue
        if hard != resource.RLIM_INFINITY and hard < value:
            value = hard
        resource.setrlimit(which, (value, value))


def pid_max(limits: dict[str, int], held: set[str]) -> int | None:
    """The PID namespace's ``pid_max`` that bounds the command's processes where no cgroup does."""
    processes = int(limits.get("processes") or 0)
    if not processes or "pids" in held:
        return None
    return max(processes + SANDBOX_TASKS, MIN_PID_MAX)


# -- what a process tree has used --------------------------------------------------------------------------


def tree_pids(root: int) -> list[int]:
    """``root`` and every process descended from it (its threads' ``children`` lists, Linux 3.5+)."""
    found = [root]
    index = 0
    while index < len(found):
        pid = found[index]
        index += 1
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                found.extend(int(child) for child in _read(f"/proc/{pid}/task/{tid}/children").split())
            except OSError:
                continue
    return found


class TreeUsage:
    """What a set of processes has used: bytes written, CPU seconds, anonymous resident bytes, tasks."""

    __slots__ = ("cpu", "memory", "tasks", "written")

    def __init__(self) -> None:
        self.written = 0
        self.cpu = 0.0
        self.memory = 0
        self.tasks = 0


def tree_usage(pids: list[int], *, own: tuple[int, ...] = (), detail: bool = True) -> TreeUsage:
    """Sum over ``pids``: each process's counters include those of the children it reaped, so a process that
    ended is counted in whoever waited for it. ``own`` (the sandbox's launcher and init) count for writes and
    CPU but not memory or tasks. ``detail`` False reads only the bytes written (what a cgroup does not count).
    """
    usage = TreeUsage()
    for pid in pids:
        try:
            io = _read(f"/proc/{pid}/io")
            stat = _read(f"/proc/{pid}/stat") if detail else ""
            statm = _read(f"/proc/{pid}/statm") if detail and pid not in own else ""
        except OSError:
            continue  # gone meanwhile: counted in its parent from now on
        usage.written += _field(io.replace(":", ""), "write_bytes")
        if not detail:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) < 18:
            continue
        usage.cpu += sum(int(value) for value in fields[11:15]) / _CLOCK_TICKS
        if pid not in own:
            usage.tasks += int(fields[17])
            pages = statm.split()
            if len(pages) >= 3:
                usage.memory += (int(pages[1]) - int(pages[2])) * _PAGE  # resident minus file-backed and shared
    return usage
