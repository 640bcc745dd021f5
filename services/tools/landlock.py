"""A small ctypes binding of Linux Landlock: what this kernel offers and a ruleset to confine ourselves with.

Standard library only: :mod:`.sandbox_launch` imports it from a Python started with ``-I -S`` (no
site-packages), so nothing here may import the rest of Autarch.

Landlock is an allow-list enforced by the kernel: once :func:`restrict_self` returns, this process and
every process it starts can reach only the paths (and TCP ports) a rule names, with the rights the rule
gives; filesystem rights cover opening, executing, creating, removing, renaming and truncating. From ABI 6
on, a confined process can neither signal nor connect to an abstract unix socket of a process outside
its domain, and (since the first ABI) it cannot ptrace one — which also keeps it out of another
process's ``/proc/<pid>/environ`` and ``mem``.
"""

from __future__ import annotations

import ctypes
import os
import stat

__all__ = [
    "ACCESS_FS",
    "FILE_RIGHTS",
    "READ",
    "READ_EXEC",
    "LandlockError",
    "Ruleset",
    "abi_version",
    "fs_rights",
]

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

ACCESS_FS = {
    "execute": 1 << 0, "write_file": 1 << 1, "read_file": 1 << 2, "read_dir": 1 << 3,
    "remove_dir": 1 << 4, "remove_file": 1 << 5, "make_char": 1 << 6, "make_dir": 1 << 7,
    "make_reg": 1 << 8, "make_sock": 1 << 9, "make_fifo": 1 << 10, "make_block": 1 << 11,
    "make_sym": 1 << 12, "refer": 1 << 13, "truncate": 1 << 14, "ioctl_dev": 1 << 15,
}
READ = ACCESS_FS["read_file"] | ACCESS_FS["read_dir"]
READ_EXEC = READ | ACCESS_FS["execute"]
FILE_RIGHTS = (
    ACCESS_FS["execute"] | ACCESS_FS["write_file"] | ACCESS_FS["read_file"] | ACCESS_FS["truncate"]
    | ACCESS_FS["ioctl_dev"]
)
"""The rights that apply to a file (a rule on a file, not a directory, may name only these)."""
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class LandlockError(OSError):
    """The kernel refused a Landlock call; ``strerror`` says which and why."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is __attribute__((packed))
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"{what}: {os.strerror(err)}")
    return result


def abi_version() -> int:
    """The Landlock ABI this kernel offers; 0 when it has none (an old kernel, or Landlock not enabled)."""
    try:
        result = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return int(result) if result > 0 else 0


def fs_rights(abi: int) -> int:
    """Every filesystem right the given ABI knows (all of them are handled: what is not granted is denied)."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= ACCESS_FS["refer"]
    if abi >= 3:
        rights |= ACCESS_FS["truncate"]
    if abi >= 5:
        rights |= ACCESS_FS["ioctl_dev"]
    return rights


class Ruleset:
    """One ruleset under construction; :meth:`restrict_self` enforces it on this process for good.

    Args:
        abi: the kernel's ABI (:func:`abi_version`).
        connect_ports: ``None`` leaves TCP alone; a tuple allows outgoing TCP to those ports only
            (empty: none). Needs ABI 4.
    """

    def __init__(self, abi: int, *, connect_ports: tuple[int, ...] | None = None) -> None:
        if abi < 1:
            raise LandlockError(95, "Landlock is not available on this kernel")
        self.abi = abi
        self.handled = fs_rights(abi)
        self._libc = _libc()
        attr = _RulesetAttr(handled_access_fs=self.handled)
        size = 8
        if connect_ports is not None and abi >= 4:
            attr.handled_access_net = _NET_CONNECT_TCP
            size = 16
        if abi >= 6:
            attr.scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL
            size = 24
        self._rule = _PathBeneathAttr()  # one struct for every rule: the kernel copies it
        self._rule_ref = ctypes.byref(self._rule)
        self.fd = _check(
            self._libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
            "landlock_create_ruleset",
        )
        for port in (connect_ports or ()) if attr.handled_access_net else ():
            rule = _NetPortAttr(allowed_access=_NET_CONNECT_TCP, port=port)
            _check(self._libc.syscall(_ADD_RULE, self.fd, _RULE_NET_PORT, ctypes.byref(rule), ctypes.c_uint32(0)),
                   f"landlock_add_rule(port {port})")

    def allow(self, path: str, rights: int) -> bool:
        """Give ``rights`` on ``path`` and everything beneath it; False when the path does not exist."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                rights &= FILE_RIGHTS
            self._rule.allowed_access = rights & self.handled
            self._rule.parent_fd = fd
            _check(self._libc.syscall(_ADD_RULE, self.fd, _RULE_PATH_BENEATH, self._rule_ref, 0),
                   f"landlock_add_rule({path})")
        finally:
            os.close(fd)
        return True

    def restrict_self(self) -> None:
        """Enforce the ruleset on this thread and all it starts (after ``no_new_privs``, as the kernel asks)."""
        _check(self._libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(self._libc.syscall(_RESTRICT_SELF, self.fd, ctypes.c_uint32(0)), "landlock_restrict_self")
        os.close(self.fd)
