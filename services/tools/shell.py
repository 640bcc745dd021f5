"""Running one command: its own process group, a timeout that kills everything, output captured head and tail.

A confined command goes through the sandbox's launch server (:mod:`.sandbox_client`, which captures its output
with :class:`Capture` too); :func:`run_command` starts the rest. A confined command started here (the sandbox
launcher of :mod:`.sandbox`, or bubblewrap, running ``bash -c``, where no launch server is at hand) starts in the
worktree as the leader of a new process group; an unconfined one (``sandbox = "off"``) as the leader of a new
session. When it times out, when its call is cancelled, or when it finishes but left background processes
behind, every process of its process group *and* of its session is killed with SIGKILL. Inside the sandbox that
kills the PID namespace's init, and with it every process the command started, ``setsid`` ones included;
unconfined, the session also catches a child that moved to a process group of its own, but a child that calls
``setsid`` leaves the session and escapes, which is the limit of sessions.

Why a confined command gets no session of its own: with the kernel's autogroup scheduling (on by default in
desktop and most server kernels), every new session is a scheduling group of its own that the CPU is shared
between equally. Twenty commands each in a session of their own would then get twenty shares to the whole
control plane's handful, and every event, approval and stream would wait behind them; in the tools service's
session they share its one (the launch server, started by the service, is in its session too). The sandbox's PID
namespace already ends everything a command starts, which is what a session added for an unconfined one.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_TIMEOUT_SECONDS",
    "OUTPUT_TRUNCATION_CHARS",
    "Capture",
    "LimitHit",
    "ShellOutcome",
    "effective_timeout",
    "run_command",
    "truncate_output",
]

DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_TIMEOUT_SECONDS = 300.0
OUTPUT_TRUNCATION_CHARS = 512
"""Seed 004's output truncation threshold: longer stdout/stderr keep their head and tail around a notice."""

_CAPTURE_BYTES = 256 * 1024  # kept from each end of a stream; far more than is ever shown


@dataclass(frozen=True)
class LimitHit:
    """A resource limit a command reached: its name (``memory``, ``processes``, ``file_size``, ``write``,
    ``cpu``), its value (bytes, processes or CPU seconds), what was used, and whether the command was stopped for
    it (False: it ended by itself, over the limit)."""

    name: str
    value: int
    used: float
    stopped: bool


@dataclass(frozen=True)
class ShellOutcome:
    """What a command did: its exit code (None when it timed out), its captured output, the limit it reached."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    limit: LimitHit | None = None
    lost: str | None = None
    """Why the command's end is not known from the command itself (the launch server stopped under it)."""


def effective_timeout(requested: float | None) -> float:
    """The seed's rule: 60 s by default, never more than 300 s."""
    if requested is None or requested <= 0:
        return DEFAULT_TIMEOUT_SECONDS
    return min(float(requested), MAX_TIMEOUT_SECONDS)


def truncate_output(text: str, limit: int = OUTPUT_TRUNCATION_CHARS) -> str:
    """Keep the first quarter and last three quarters of ``limit`` characters of a long output."""
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n... [{omitted} characters omitted] ...\n{text[-tail:]}"


class Capture:
    """Keeps the head and the tail of a stream without holding all of it."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = _CAPTURE_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - _CAPTURE_BYTES
            if excess > 0:
                self.dropped += excess
                del self.tail[:excess]

    def text(self) -> str:
        middle = f"\n... [{self.dropped} bytes omitted] ...\n".encode() if self.dropped else b""
        return bytes(self.head + middle + self.tail).decode("utf-8", "replace")


async def _pump(stream: asyncio.StreamReader, capture: Capture) -> None:
    while chunk := await stream.read(65536):
        capture.feed(chunk)


def _session_members(leader: int) -> list[int]:
    """Processes whose process group or session is ``leader``'s (Linux ``/proc``)."""
    members: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return members
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        # After the command name: state, ppid, pgrp, session, … A zombie is already dead.
        if len(fields) > 3 and fields[0] != b"Z" and (int(fields[2]) == leader or int(fields[3]) == leader):
            members.append(int(name))
    return members


async def _kill_everything(leader: int) -> None:
    """SIGKILL the command's process group and every process left in its session, until none remain."""
    for _ in range(50):
        try:
            os.killpg(leader, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        members = [pid for pid in _session_members(leader) if pid != os.getpid()]
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        await asyncio.sleep(0.02)


async def _exited(proc: asyncio.subprocess.Process, timeout: float) -> bool:
    """Wait until the shell itself exits (True) or ``timeout`` passes (False).

    ``Process.wait()`` is not used: it also waits for the pipes to close, which a background
    child holding them open would delay until the timeout.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.002
    while proc.returncode is None:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.01)  # a short command is answered within 10 ms of its exit
    return True


async def _end(proc: asyncio.subprocess.Process, pumps: Sequence[asyncio.Future[None]]) -> None:
    """Kill what is left of the command, then collect the rest of its output."""
    await _kill_everything(proc.pid)
    if proc.returncode is None:
        await proc.wait()
    _, pending = await asyncio.wait(pumps, timeout=2.0)
    for task in pending:  # only a process that escaped the session still holds a pipe
        task.cancel()
    await asyncio.gather(*pumps, return_exceptions=True)


async def run_command(
    argv: list[str], *, cwd: str, timeout: float, env: dict[str, str], own_session: bool
) -> ShellOutcome:
    """Run ``argv`` in ``cwd``; kill its whole process tree on timeout or exit.

    ``own_session``: start it as a session leader (an unconfined command, see the module's docstring); otherwise
    as a process group leader in this process's session.
    """
    group: dict[str, Any] = {"start_new_session": True} if own_session else {"process_group": 0}
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **group,
    )
    out, err = Capture(), Capture()
    assert proc.stdout is not None and proc.stderr is not None  # both were asked for as pipes above
    pumps = [
        asyncio.ensure_future(_pump(proc.stdout, out)),
        asyncio.ensure_future(_pump(proc.stderr, err)),
    ]
    timed_out = False
    try:
        timed_out = not await _exited(proc, timeout)
    finally:
        # On timeout this ends the command; after a normal exit it ends what it left running
        # in the background (which would otherwise hold the pipes open, and outlive the call);
        # when the call is cancelled it stops the command. Shielded: a second cancellation
        # must not leave part of the process group running.
        await asyncio.shield(_end(proc, pumps))
    return ShellOutcome(
        exit_code=None if timed_out else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
    )
