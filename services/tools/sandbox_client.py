"""The tools service's end of the sandbox's launch server (:mod:`.sandbox_zygote`): start it, hand it commands.

One server per :class:`LaunchServer` (one per tools executor), started at the first command from the event
loop's thread — the thread whose end would take it down with ``PR_SET_PDEATHSIG`` — and started again if it
ever dies. Each command gets a socket pair of its own: the server answers on it once every process of the
command has ended, with the exit status and the limit the command was stopped at, if any.
"""

from __future__ import annotations

import asyncio
import marshal
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from .sandbox import Launch
from .shell import Capture, LimitHit, ShellOutcome

__all__ = ["LaunchServer"]

_SERVER = str(Path(__file__).with_name("sandbox_zygote.py"))
_ANSWER_BYTES = 64 * 1024
_KILL_WAIT_SECONDS = 15.0
"""How long a killed command may take to be reported gone before the call gives up waiting."""
_OUTPUT_DRAIN_SECONDS = 2.0
SERVER_LOST = ("The sandbox's launch server stopped while the command ran, and the command was killed with it: it "
               "may have done part of its work. Check the current state before running it again")


class LaunchServer:
    """Starts the launch server on first use and runs commands through it."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._hello: dict[str, Any] | None = None

    # -- the server process ------------------------------------------------------------------------------

    def _started(self) -> socket.socket:
        if self._control is not None and self._process is not None and self._process.poll() is None:
            return self._control
        self.close()
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", _SERVER, str(theirs.fileno()), str(os.getpid())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env={},
            )
        except OSError:
            control.close()
            raise
        finally:
            theirs.close()
        control.setblocking(False)
        self._control = control
        self._hello = None
        return control

    @property
    def pid(self) -> int | None:
        """The server's process, once started."""
        return self._process.pid if self._process is not None else None

    async def limits(self) -> dict[str, str]:
        """What holds each resource limit on this machine, as the server found it at its start (empty when the
        server did not say within a few seconds, or could not start)."""
        if self._hello is None:
            try:
                control = self._started()
                data = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(control, _ANSWER_BYTES), 10)
            except (OSError, TimeoutError):
                data = b""
            self._hello = marshal.loads(data) if data else {}
        return dict(self._hello.get("limits") or {})

    def close(self) -> None:
        """Stop the server (closing its control socket ends it; it kills what still runs and removes its cgroups)."""
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._process is not None:
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    async def _send(self, data: bytes, fds: list[int]) -> None:
        control = self._started()
        loop = asyncio.get_running_loop()
        while True:
            try:
                socket.send_fds(control, [data], fds)
                return
            except BlockingIOError:  # the server is busy: wait until it reads
                await _writable(loop, control)

    # -- one command -------------------------------------------------------------------------------------

    async def run(self, launch: Launch, *, timeout: float) -> ShellOutcome:
        """Run ``launch``: its output captured, killed (all of it) on timeout or cancellation."""
        loop = asyncio.get_running_loop()
        if launch.spec is not None:
            request: dict[str, Any] = {"spec": launch.spec, "env": launch.env}
        else:
            request = {"exec": launch.argv, "env": launch.env, "cwd": launch.cwd, "limits": launch.limits,
                       "cgroups": launch.cgroups}
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        out, err = Capture(), Capture()
        try:
            try:
                await self._send(marshal.dumps(request), [theirs.fileno(), out_w, err_w])
            except (BrokenPipeError, ConnectionError):  # the server died since its last command: start another
                self.close()
                await self._send(marshal.dumps(request), [theirs.fileno(), out_w, err_w])
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            mine.close()
            raise
        finally:
            theirs.close()
            os.close(out_w)
            os.close(err_w)
        mine.setblocking(False)
        pumps = [_drain(loop, out_r, out), _drain(loop, err_r, err)]
        answer: dict[str, Any] | None = None
        timed_out = False
        try:
            try:
                answer = await asyncio.wait_for(_answer(loop, mine), timeout)
            except TimeoutError:
                timed_out = True
        finally:
            if answer is None:  # timed out or cancelled: kill it all, and wait until it is gone
                answer = await asyncio.shield(_kill(loop, mine))
            mine.close()
            await asyncio.shield(_finish(pumps))
        return _outcome(answer, out, err, timed_out=timed_out)


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_writer(sock.fileno(), lambda: ready.done() or ready.set_result(None))  # type: ignore[func-returns-value]  # dropped
    try:
        await ready
    finally:
        loop.remove_writer(sock.fileno())


async def _answer(loop: asyncio.AbstractEventLoop, channel: socket.socket) -> dict[str, Any]:
    data = await loop.sock_recv(channel, _ANSWER_BYTES)
    if not data:
        return {"status": None, "limit": None, "lost": SERVER_LOST}
    return marshal.loads(data)


async def _kill(loop: asyncio.AbstractEventLoop, channel: socket.socket) -> dict[str, Any]:
    try:
        await loop.sock_sendall(channel, b"kill")
        return await asyncio.wait_for(_answer(loop, channel), _KILL_WAIT_SECONDS)
    except (OSError, TimeoutError):
        return {"status": None, "limit": None, "lost": SERVER_LOST}


def _drain(loop: asyncio.AbstractEventLoop, fd: int, capture: Capture) -> asyncio.Future[None]:
    """Feed what ``fd`` yields into ``capture`` until end of file, from the loop (no thread, no transport)."""
    os.set_blocking(fd, False)
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            capture.feed(chunk)
            return
        loop.remove_reader(fd)
        os.close(fd)
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)

    def stop(_: asyncio.Future[None]) -> None:
        if done.cancelled() and loop.remove_reader(fd):
            os.close(fd)

    done.add_done_callback(stop)
    return done


async def _finish(pumps: list[asyncio.Future[None]]) -> None:
    """Collect the rest of the output: every writer is dead, so end of file is immediate."""
    _, pending = await asyncio.wait(pumps, timeout=_OUTPUT_DRAIN_SECONDS)
    for pump in pending:
        pump.cancel()


def _outcome(answer: dict[str, Any], out: Capture, err: Capture, *, timed_out: bool) -> ShellOutcome:
    limit = answer.get("limit")
    stderr = err.text()
    if answer.get("error"):
        stderr = f"autarch-sandbox: {answer['error']}\n"
    return ShellOutcome(
        exit_code=None if timed_out else answer.get("status"),
        stdout=out.text(),
        stderr=stderr,
        timed_out=timed_out,
        limit=LimitHit(limit["name"], int(limit["value"]), limit["used"], bool(limit["stopped"])) if limit else None,
        lost=None if timed_out else answer.get("lost"),
    )
