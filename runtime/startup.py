"""What a process checks before it starts, and how it says that it cannot run.

A plain ``pip install autarch`` has every service's requirements; a container image has the core and its own
service's extra (``pyproject.toml``). A service whose extra is not fully installed would die on an import
deep inside it, and a supervisor would restart it forever: instead its ``__main__`` calls
:func:`require_extra` first, which names the missing distribution and the extra that brings it, once, and exits
with :data:`CANNOT_START`. ``autarch up`` stops the whole system on that status rather than restarting the
process (``cli/local/supervisor.py``), as it does for a gateway whose port another program holds (:func:`listen`).

A service that serves before it has loaded its state (``TypedService.hold_until_loaded``) loads it with
:func:`yielding`: at ``autarch up`` every process starts at once on a small machine, and a load that yields the
CPU lets the others (the orchestrator, the gateway: what ``/healthz`` and the first page wait for) start first.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import socket
import sys
import threading
from collections.abc import Callable
from importlib import metadata
from typing import NoReturn, TypeVar

__all__ = ["CANNOT_START", "YIELDING_NICENESS", "cannot_start", "listen", "missing_requirements", "require_extra",
           "yielding"]

T = TypeVar("T")

YIELDING_NICENESS = 10
"""How much lower than the process's own the priority of a :func:`yielding` thread is (a ``nice`` increment)."""

CANNOT_START = 78
"""Exit status of a process that cannot run as installed or configured (sysexits' ``EX_CONFIG``): started
again it would fail the same way."""

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


def _requirements_of(extra: str) -> list[tuple[str, str, str]]:
    """``(distribution, requirement, extra naming it)`` for every requirement of autarch's ``extra``,
    self-references (``autarch[indexer]``) followed; empty when autarch's own metadata is not installed."""
    try:
        declared = metadata.requires("autarch") or []
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed: nothing to check
        return []
    by_extra: dict[str, list[tuple[str, str, str]]] = {}
    for line in declared:
        requirement, _, marker = line.partition(";")
        named = _EXTRA.search(marker)
        match = _NAME.match(requirement)
        if named and match:
            by_extra.setdefault(named[1], []).append((match[1], match[2] or "", requirement.strip()))
    found: list[tuple[str, str, str]] = []
    pending, seen = [extra], set()
    while pending:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.add(current)
        for name, extras, requirement in by_extra.get(current, []):
            if name.lower() == "autarch":
                pending.extend(part.strip() for part in extras.split(",") if part.strip())
            else:
                found.append((name, requirement, current))
    return found


def missing_requirements(extra: str) -> list[tuple[str, str]]:
    """``(requirement, extra)`` of each requirement of autarch's ``extra`` whose distribution is not installed."""
    missing = []
    for name, requirement, named_by in _requirements_of(extra):
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append((requirement, named_by))
    return missing


def cannot_start(name: str, reason: str) -> NoReturn:
    """Say once, on stderr, why ``name`` cannot run, and exit with :data:`CANNOT_START`."""
    print(f"{name}: cannot start: {reason}", file=sys.stderr, flush=True)
    raise SystemExit(CANNOT_START)


def require_extra(name: str, extra: str | None = None) -> None:
    """Return if every requirement of autarch's ``extra`` (default: ``name``) is installed; otherwise say which
    are not and which extra brings them, and exit with :data:`CANNOT_START`.

    Called by a service's ``__main__`` before it imports the service: the check reads the installed metadata
    only, so it is itself safe to run in an environment that lacks the extra.
    """
    missing = missing_requirements(extra or name)
    if not missing:
        return
    listed = ", ".join(requirement for requirement, _ in missing)
    extras = ",".join(dict.fromkeys(named_by for _, named_by in missing))
    cannot_start(name, f"{'these dependencies are' if len(missing) > 1 else 'a dependency is'} not installed: "
                       f"{listed}. The '{extras}' extra brings {'them' if len(missing) > 1 else 'it'}: "
                       f"pip install 'autarch[{extras}]' (a plain `pip install autarch` has every service's).")


def listen(name: str, host: str, port: int, *, setting: str) -> socket.socket:
    """A TCP socket listening on ``host:port`` for ``name`` to serve on; when it cannot be had (another program
    holds the port, say), say so once, naming the port and ``setting`` that chooses it, and exit with
    :data:`CANNOT_START`: a restart would find the port taken just the same."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        # SO_REUSEADDR (create_server's default on POSIX), as uvicorn binds: a restart is not refused over the
        # last process's connections still in TIME_WAIT; only a live listener makes the port taken.
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            cannot_start(name, f"port {port} on {host} is already in use by another program; stop it, or choose "
                               f"another port with {setting}.")
        cannot_start(name, f"cannot listen on {host}:{port}: {exc.strerror or exc}")


async def yielding(work: Callable[[], T], *, name: str) -> T:
    """``work()`` in a thread of its own whose CPU priority is :data:`YIELDING_NICENESS` below the process's (Linux:
    a thread's own ``nice``; elsewhere, or where it cannot be set, the same priority): where other processes want
    the CPU at the same moment, theirs come first; on an idle machine it runs as fast as in any thread.

    The thread ends with ``work`` (a pool's worker would keep the lower priority for whatever it ran next).
    Cancelling the caller does not stop ``work``, as with ``asyncio.to_thread``.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return  # the caller was cancelled meanwhile
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]  # None only with an error

    def run() -> None:
        if sys.platform == "linux":  # elsewhere PRIO_PROCESS with this id would name a process, not this thread
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(),
                               os.getpriority(os.PRIO_PROCESS, 0) + YIELDING_NICENESS)
            except OSError:
                pass
        try:
            outcome: tuple[T | None, BaseException | None] = (work(), None)
        except BaseException as exc:
            outcome = (None, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    threading.Thread(target=run, name=name, daemon=True).start()
    return await done
